package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/lapsehq/lapse/postgres"
)

// serveOptions holds the flags of lapse serve.
type serveOptions struct {
	db, addr, logLevel, logFormat, flowsDir string
	dbConns, workConns, inFlight, reserve   int
	bodyTimeout                             time.Duration
	cc                                      engine.ClaimerConfig
	dc                                      engine.DelivererConfig
	sf                                      subscriberFlags
	pf                                      paymentFlags
	tf                                      triggerFlags
}

// serveFlags registers the flags of lapse serve on fs. lapse config shows
// the same set.
func serveFlags(fs *flag.FlagSet) *serveOptions {
	o := &serveOptions{}
	fs.StringVar(&o.db, "db", defaultDB, "database: an SQLite file path or a postgres:// URL")
	fs.StringVar(&o.addr, "http", "127.0.0.1:8080", "address of the HTTP API (port 0 picks a free one)")
	fs.IntVar(&o.dbConns, "db-conns", 0, "PostgreSQL: connections for the API (0: the DSN's pool_max_conns, or 16)")
	fs.IntVar(&o.workConns, "db-work-conns", 8, "PostgreSQL: connections of their own for the deadline engine and the delivery workers, so that API load cannot starve them")
	fs.IntVar(&o.inFlight, "max-in-flight", 4*int(postgres.DefaultMaxConns), "API requests in flight beyond which a request is answered 429 with Retry-After (0: no limit); a request counts once its body is in")
	fs.IntVar(&o.reserve, "callback-reserve", 0, "in-flight slots that only payment callbacks may take: other API requests are shed at --max-in-flight minus this (0: a quarter of --max-in-flight)")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", lapsehttp.DefaultBodyTimeout, "longest a request body may take to arrive after its headers; a slower one is refused with 400 and its connection closed")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&o.flowsDir, "flows", "", flowsUsage)
	o.sf.register(fs)
	o.pf.register(fs)
	o.tf.register(fs, &o.cc)
	fs.DurationVar(&o.dc.Poll, "delivery-poll", time.Second, "longest a subscriber's delivery loop sleeps before looking for due retries")
	fs.IntVar(&o.cc.Batch, "batch", 500, "due orders claimed per transaction")
	fs.IntVar(&o.cc.Workers, "workers", 2, "transactions that burn down a backlog in parallel")
	fs.DurationVar(&o.cc.MaxSleep, "max-sleep", time.Second, "longest the deadline engine sleeps without asking the database for the next deadline")
	fs.DurationVar(&o.cc.SweepInterval, "sweep-interval", 10*time.Second, "beat of the safety-net sweep")
	fs.DurationVar(&o.cc.SweepGrace, "sweep-grace", time.Second, "how overdue an order must be before the sweep fires it")
	fs.IntVar(&o.cc.SweepBatch, "sweep-batch", 500, "due orders the sweep claims per transaction")
	fs.DurationVar(&o.cc.StopTimeout, "stop-timeout", 10*time.Second, "how long shutdown lets in-flight work finish")
	return o
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	o := serveFlags(fs)
	var (
		db, addr, logLevel, logFormat, flowsDir = &o.db, &o.addr, &o.logLevel, &o.logFormat, &o.flowsDir
		dbConns, workConns, inFlight, reserve   = &o.dbConns, &o.workConns, &o.inFlight, &o.reserve
		cc, dc, sf, pf, tf                      = &o.cc, &o.dc, &o.sf, &o.pf, &o.tf
	)
	cfg, err := loadFlags(fs, args)
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
	// The background work gets a pool of its own on PostgreSQL; SQLite has
	// one writer for everything anyway.
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
	watcher := newConfigWatcher(cfg, fs, reloadable(eng, claimer, sf), log, reg)

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
	log.Info("lapse serving", "http", "http://"+ln.Addr().String(), "db", redact(*db), "flows", len(eng.Flows()), "subscribers", names,
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
