package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	o := &options{}
	var (
		db, addr, logLevel, logFormat, flowsDir = &o.db, &o.addr, &o.logLevel, &o.logFormat, &o.flowsDir
		dbConns, workConns, inFlight, reserve   = &o.dbConns, &o.workConns, &o.inFlight, &o.reserve
		cc, dc, sf, pf, tf                      = &o.cc, &o.dc, &o.sf, &o.pf, &o.tf
	)
	cfg, err := loadFlags(fs, serveSettings, o, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	cfg.Log(log) // loud when running on the last good snapshot

	// A flow or schedule that is wrong stops the start before the database
	// is touched.
	flowSet, err := loadFlows(*flowsDir)
	if err != nil {
		return err
	}
	if err := pf.applyGrace(flowSet); err != nil {
		return err
	}
	groupRetries, issueRetries, cards, err := sf.lifecycle()
	if err != nil {
		return err
	}
	shared, triggerMode, err := tf.build()
	if err != nil {
		return err
	}
	var sharedTrigger engine.SharedTrigger
	if shared != nil {
		defer shared.Close()
		sharedTrigger = shared
	}
	if *dbConns < 0 || *workConns < 1 || *inFlight < 0 {
		return fmt.Errorf("--db-conns must not be negative, --db-work-conns at least 1, --max-in-flight not negative")
	}
	if *reserve < 0 || (*inFlight > 0 && *reserve >= *inFlight) {
		return fmt.Errorf("--callback-reserve must not be negative and must leave other requests a slot: less than --max-in-flight (%d)", *inFlight)
	}
	if o.bodyTimeout <= 0 {
		return fmt.Errorf("--body-timeout must be positive")
	}
	store, err := openStoreConns(ctx, *db, int32(*dbConns))
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	// The background work gets a pool of its own on PostgreSQL and MySQL;
	// SQLite has one writer for everything anyway.
	var work lapse.Store = store
	if _, isSQLite := sqlitePath(*db); !isSQLite {
		ws, err := openStoreConns(ctx, *db, int32(*workConns))
		if err != nil {
			return err
		}
		defer ws.Close()
		work = ws
	}

	subs, closeSubs, err := sf.subscriptions(ctx, log)
	if err != nil {
		return err
	}
	defer closeSubs()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	pays, err := pf.build(ctx, "http://"+ln.Addr().String(), store, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	eng, err := engine.New(store, flowSet, engine.Config{Logger: log, Registerer: reg,
		Subscriptions: subs, StockLedger: sf.stockLedger, CouponLedger: sf.couponLedger, Payments: pays.engine, WorkStore: work,
		GroupRetries: groupRetries, IssueRetries: issueRetries, Cards: cards, Trigger: sharedTrigger, TriggerMode: triggerMode})
	if err != nil {
		return err
	}
	claimer := engine.NewClaimer(eng, *cc)
	deliverer := engine.NewDeliverer(eng, *dc)
	watcher := newConfigWatcher(cfg, &process{engine: eng, claimer: claimer, timed: sf.timed}, log, reg)

	api := lapsehttp.NewServer(eng, lapsehttp.Config{
		Logger:          log,
		Gatherer:        reg,
		Callbacks:       pays.callbacks,
		MaxInFlight:     *inFlight,
		CallbackReserve: *reserve,
		BodyTimeout:     o.bodyTimeout,
		Ready: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return store.Ping(ctx)
		},
	})
	handler := api.Handler()
	if pays.sandbox != nil {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/sandbox/", api.WithBodyDeadline(sandboxHandler(pays.sandbox, log)))
		handler = mux
	}
	// Headers and bodies have their deadlines (the body's is set per request
	// by the API's handler). WriteTimeout, counted from the end of the
	// headers, only frees the connections of clients that do not read their
	// answers: it is well past the body deadline plus the slowest handler (a
	// statement times out after 30 s).
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout: o.bodyTimeout + 2*time.Minute, IdleTimeout: 2 * time.Minute}

	go watcher.Run(ctx)
	claimer.Start(ctx)
	deliverer.Start(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var names []string
	for _, s := range eng.Subscriptions() {
		names = append(names, s.Name)
	}
	var providers []string
	for name := range pays.callbacks {
		providers = append(providers, name)
	}
	slices.Sort(providers)
	log.Info("lapse serving", "http", "http://"+ln.Addr().String(), "db", hidePasswords(*db), "flows", len(eng.Flows()), "subscribers", names,
		"payment_callbacks", providers, "trigger", eng.TriggerStatus().Using)

	select {
	case <-ctx.Done():
		log.Info("lapse shutting down")
	case err := <-served:
		claimer.Stop()
		deliverer.Stop()
		return fmt.Errorf("http: %w", err)
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cc.StopTimeout)
	defer cancel()
	httpErr := srv.Shutdown(shutCtx)
	claimer.Stop()
	deliverer.Stop()
	if httpErr != nil && !errors.Is(httpErr, http.ErrServerClosed) {
		return fmt.Errorf("http shutdown: %w", httpErr)
	}
	log.Info("lapse stopped")
	return nil
}
