package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/console"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/redis"
	"github.com/lapsehq/lapse/sqlite"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	// A SIGHUP asks for a reload, which the config watcher does once it
	// runs; until then it would end the process, mid-migration say. So it
	// is caught from here on, into a channel that nobody reads (a full one
	// drops it); signal.Ignore would also take it from the watcher's. The
	// file is read after this, and a change the start missed is seen by
	// the watcher, which starts from the file's state as read.
	early := make(chan os.Signal, 1)
	signal.Notify(early, syscall.SIGHUP)
	defer signal.Stop(early)
	fs := newFlagSet("serve", stderr)
	o := &options{}
	cfg, err := loadFlags(fs, serveSettings, o, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	cfg.Log(log) // loud when running on the last good snapshot
	var served atomic.Bool
	if err := runService(ctx, o, cfg, log, func(*service) { served.Store(true) }); err != nil {
		if ctx.Err() == nil || served.Load() {
			return err
		}
		// Asked to stop (SIGTERM, Ctrl-C) while starting, which the error
		// says (a migration cut short): a stop, not a failure. What the
		// start did is whole: a run of migrations is one transaction, or
		// on MySQL goes on from its last statement at the next start.
		log.Info("lapse stopped before it served: asked to stop while starting", "err", err)
		return nil
	}
	// Said once the deferred closes of runService (stores, subscribers,
	// the shared trigger, listeners) have run: when the process has
	// really stopped.
	log.Info("lapse stopped")
	return nil
}

// openOrdersCheckTimeout bounds the start's check of the open orders
// against the flows (Engine.CheckOpenOrders): about 2 s for 2,000,000 open
// orders on PostgreSQL on a loaded 2-core machine.
const openOrdersCheckTimeout = 20 * time.Second

// clockCheckTimeout bounds the start's comparison of the process's clock
// with the database's (Engine.CheckClock): a few reads of one row.
const clockCheckTimeout = 10 * time.Second

// service is a running lapse serve, as runService hands it to its caller:
// where it serves, and the parts that a caller in the same process (lapse
// demo) reads from.
type service struct {
	API, Console string // base URL of the API; URL of the console
	Engine       *engine.Engine
	Store        lapse.Store
	Access       *access.Service
	Sandbox      *payment.Sandbox // nil unless --sandbox
}

// runService runs lapse serve with the options o (cfg says where they came
// from) until ctx ends, then shuts down gracefully: the API, the console,
// the engine's claimer and deliverer, the audit sealer and the outbox's
// pruner. Once everything serves, it calls started, if not nil, on its own
// goroutine.
func runService(ctx context.Context, o *options, cfg *flagConfig, log *slog.Logger, started func(*service)) error {
	var (
		db, addr, flowsDir                    = &o.db, &o.addr, &o.flowsDir
		dbConns, workConns, inFlight, reserve = &o.dbConns, &o.workConns, &o.inFlight, &o.reserve
		cc, dc, sf, pf, tf                    = &o.cc, &o.dc, &o.sf, &o.pf, &o.tf
	)
	// A flow or schedule that is wrong stops the start before the database
	// is touched. Summed before they are read: a change made meanwhile
	// is said at a SIGHUP rather than missed.
	flowsAt := flowsDigest(*flowsDir)
	flowSet, err := loadFlows(*flowsDir)
	if err != nil {
		return err
	}
	if err := pf.applyGrace(flowSet); err != nil {
		return err
	}
	if err := sf.checkEvents(engine.EventTypes(flowSet)); err != nil {
		return err
	}
	if err := sf.checkPorts(flowSet); err != nil {
		return err
	}
	if err := pf.check(); err != nil {
		return err
	}
	groupRetries, issueRetries, cards, err := sf.lifecycle()
	if err != nil {
		return err
	}
	shared, triggerMode, err := tf.build(log)
	if err != nil {
		return err
	}
	var sharedTrigger engine.SharedTrigger
	if shared != nil {
		defer shared.Close()
		sharedTrigger = shared
		// A server too old for the trigger's scripts is refused now, not
		// found out at every deadline; one that is down is the trigger's
		// to wait for (the sweep carries the load meanwhile).
		switch err := shared.CheckVersion(ctx); {
		case errors.Is(err, redis.ErrTooOld):
			return fmt.Errorf("--redis: %w; upgrade it, or run without --redis", err)
		case err != nil:
			log.Warn("Redis could not be asked its version; the trigger waits for it, the sweep firing deadlines meanwhile", "err", err)
		}
	}
	// Each value is in its setting's range (settings.go); what is left to
	// check here is how they go together.
	if *inFlight > 0 && *reserve >= *inFlight {
		return fmt.Errorf("--callback-reserve must leave other requests a slot: less than --max-in-flight (%d)", *inFlight)
	}
	accessCfg, err := o.ac.config()
	if err != nil {
		return err
	}
	proxies, err := o.ac.proxies()
	if err != nil {
		return err
	}
	// The subscribers, the payment providers and the listeners are made
	// before the database is opened, and made on a first start with its
	// admin key: a setting they refuse (a short --webhook-secret, a port
	// taken) changes nothing. The sandbox, whose state is in the
	// database, is made after it.
	subs, closeSubs, err := sf.subscriptions(ctx, log)
	if err != nil {
		return err
	}
	defer closeSubs()
	noSandbox := *pf
	noSandbox.sandbox = false
	if _, err := noSandbox.build(ctx, "", nil, log); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	ln = limitConns(ln, o.maxConns)
	defer ln.Close()
	var metricsLn net.Listener
	if o.ac.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", o.ac.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-http: %w", err)
		}
		defer metricsLn.Close()
	}
	var consoleLn net.Listener
	if o.ac.consoleAddr != "" {
		if consoleLn, err = net.Listen("tcp", o.ac.consoleAddr); err != nil {
			return fmt.Errorf("--console-http: %w", err)
		}
		consoleLn = limitConns(consoleLn, o.maxConns)
		defer consoleLn.Close()
	}

	store, err := openStoreConns(ctx, *db, int32(*dbConns), o.batchGather)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	acc, err := o.ac.service(ctx, accessCfg, store, *db, log)
	if err != nil {
		return err
	}
	// The background work gets a pool of its own on PostgreSQL and MySQL;
	// on SQLite, which has one writer for everything, its writes go first.
	var work lapse.Store = store
	if s, isSQLite := store.(*sqlite.Store); isSQLite {
		work = s.Priority()
	} else {
		ws, err := openStoreConns(ctx, *db, int32(*workConns), o.batchGather)
		if err != nil {
			return err
		}
		defer ws.Close()
		work = ws
	}
	warnInsecure(ln, log)
	if consoleLn != nil {
		warnInsecure(consoleLn, log)
	}

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
	// A clock off the database's would fire deadlines early or late and
	// take leases that others hold: refused before anything runs, as the
	// open orders below.
	cctx, cancel := context.WithTimeout(ctx, clockCheckTimeout)
	err = eng.CheckClock(cctx)
	cancel()
	if err != nil {
		return err
	}
	// Flows changed or removed under open orders would strand them where
	// no event moves them and their deadlines fail on every pass: refused
	// before anything runs. The check reads every open order once; it is
	// bounded, so that a table of tens of millions cannot hold the start:
	// past the bound it is said, and the start goes on without it.
	cctx, cancel = context.WithTimeout(ctx, openOrdersCheckTimeout)
	err = eng.CheckOpenOrders(cctx)
	cancel()
	switch {
	case lapse.ErrorCode(err) == lapse.EINVALID:
		return fmt.Errorf("--flows: %s", lapse.ErrorMessage(err))
	case err != nil && cctx.Err() != nil && ctx.Err() == nil:
		log.Warn("the open orders were not checked against the flows: counting them took longer than the bound",
			"bound", openOrdersCheckTimeout.String())
	case err != nil:
		return fmt.Errorf("checking the open orders against the flows: %w", err)
	}
	closer, err := closes.New(eng, store)
	if err != nil {
		return err
	}
	claimCfg := *cc
	claimCfg.Gather = claimGather(cc.Gather)
	claimer := engine.NewClaimer(eng, claimCfg)
	delivCfg := *dc
	delivCfg.CloseHold = closeHold(dc.CloseHold)
	deliverer := engine.NewDeliverer(eng, delivCfg)
	sealer, err := engine.NewAuditSealer(eng, engine.AuditSealerConfig{Interval: o.auditSealInterval, Registerer: reg})
	if err != nil {
		return err
	}
	var pruner *engine.OutboxPruner // nil when every event is kept
	if o.outboxRetention > 0 {
		if pruner, err = engine.NewOutboxPruner(eng, engine.OutboxPrunerConfig{Retention: o.outboxRetention, Interval: o.outboxPruneInterval,
			Registerer: reg}); err != nil {
			return err
		}
	}
	matcher, err := engine.NewHeldMatcher(eng, engine.HeldMatcherConfig{Window: o.heldPaymentWindow, Logger: log})
	if err != nil {
		return fmt.Errorf("--held-payment-window: %w", err)
	}
	prober, err := engine.NewProber(eng, engine.ProberConfig{Interval: o.probeInterval, Notify: probeNotify(sf.admins), Logger: log, Registerer: reg})
	if err != nil {
		return fmt.Errorf("--probe-interval: %w", err)
	}
	watcher := newConfigWatcher(cfg, &process{engine: eng, claimer: claimer, timed: sf.timed, probe: prober, natsWindow: sf.natsWindow}, log, reg)
	watcher.WatchFlows(*flowsDir, flowsAt)

	api := lapsehttp.NewServer(eng, lapsehttp.Config{
		Logger:          log,
		Gatherer:        reg,
		Registerer:      reg,
		Callbacks:       pays.callbacks,
		MaxInFlight:     *inFlight,
		CallbackReserve: *reserve,
		BodyTimeout:     o.bodyTimeout,
		Access:          acc,
		Closer:          closer,
		Probe:           prober,
		TrustedOrigins:  splitList(o.ac.trustedOrigins),
		TrustedProxies:  proxies,
		Ready:           lapsehttp.StoreReady(store),
	})
	// The operators' console, whose actions are requests to the API's own
	// handler with the operator's session.
	con, err := console.New(console.Config{Engine: eng, Access: acc, Closer: closer, API: api.Handler(), Store: store, Logger: log,
		Registerer: reg, TrustedOrigins: splitList(o.ac.trustedOrigins), TrustedProxies: proxies, BodyTimeout: o.bodyTimeout})
	if err != nil {
		return err
	}
	var sandbox http.Handler
	if pays.sandbox != nil {
		sandbox = api.WithBodyDeadline(sandboxHandler(pays.sandbox, log))
		warnSandbox(ln, log)
	}
	handler := listenerHandler(api.Handler(), con.Handler(), sandbox)
	// Headers and bodies have their deadlines (the body's is set per request
	// by the handler listenerHandler sends it to). WriteTimeout, counted from the end of the
	// headers, only frees the connections of clients that do not read their
	// answers: it is well past the body deadline plus the slowest handler (a
	// statement times out after 30 s).
	srv := newHTTPServer(handler, o.bodyTimeout+2*time.Minute)

	// SIGHUP reloads from here on, through the shutdown: a reload sent
	// once the start says it serves must not end the process.
	stopWatcher := watcher.Start(ctx)
	defer stopWatcher()
	// The deliverer first: it makes its relays' cursors before the claimer
	// writes any event for them.
	deliverer.Start(ctx)
	if o.deadlines {
		claimer.Start(ctx)
	} else {
		log.Warn("the deadline engine is off (--deadlines=false): this process fires no deadlines, other processes on the database must")
		// Its deadlines still go to the shared trigger, which the
		// processes that fire them rely on.
		claimer.StartFeed(ctx)
	}
	sealer.Start(ctx)
	prober.Start(ctx)
	matcher.Start(ctx)
	if pruner != nil {
		pruner.Start(ctx)
	}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	var metricsSrv *http.Server
	if metricsLn != nil {
		metricsSrv = metricsServer(reg, o.bodyTimeout)
		go func() {
			if err := metricsSrv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				served <- fmt.Errorf("--metrics-http: %w", err)
			}
		}()
	}
	var consoleSrv *http.Server
	if consoleLn != nil {
		consoleSrv = consoleServer(con.Handler(), o.bodyTimeout)
		go func() {
			if err := consoleSrv.Serve(consoleLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				served <- fmt.Errorf("--console-http: %w", err)
			}
		}()
	}
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		settleApprovals(ctx, acc, log)
		resumeCloses(ctx, closer, log)
	}()
	var names []string
	for _, s := range eng.Subscriptions() {
		names = append(names, s.Name)
	}
	var providers []string
	for name := range pays.callbacks {
		providers = append(providers, name)
	}
	slices.Sort(providers)
	consoleURL := "http://" + ln.Addr().String() + console.Prefix
	if consoleLn != nil {
		consoleURL = "http://" + consoleLn.Addr().String() + console.Prefix
	}
	metricsURL := ""
	if metricsLn != nil {
		metricsURL = "http://" + metricsLn.Addr().String() + "/metrics"
	}
	// Starting (migrations, flows, pools) leaves garbage that an idle
	// server, at GOGC 400, would not collect until the runtime's forced
	// collection minutes later, nor give back to the system for a while
	// after: give it back now.
	debug.FreeOSMemory()
	// The file is the fallback of the next start only once it started
	// this one: a file whose values do not go together (--trigger-mode
	// database without --redis) must not replace the last good one. It is
	// written before the start says it serves, which is when a caller may
	// look for it.
	watcher.Serving()
	log.Info("lapse serving", "http", "http://"+ln.Addr().String(), "db", hidePasswords(*db), "flows", len(eng.Flows()), "subscribers", names,
		"payment_callbacks", providers, "trigger", eng.TriggerStatus().Using, "metrics_http", metricsURL,
		"console", consoleURL, "deadlines", o.deadlines, "probe_interval", o.probeInterval,
		"outbox_retention", o.outboxRetention.String())
	if started != nil {
		go started(&service{API: "http://" + ln.Addr().String(), Console: consoleURL, Engine: eng, Store: store,
			Access: acc, Sandbox: pays.sandbox})
	}

	select {
	case <-ctx.Done():
		log.Info("lapse shutting down")
	case err := <-served:
		prober.Stop()
		matcher.Stop()
		claimer.Stop()
		deliverer.Stop()
		sealer.Stop()
		if pruner != nil {
			pruner.Stop()
		}
		return fmt.Errorf("http: %w", err)
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cc.StopTimeout)
	defer cancel()
	httpErr := srv.Shutdown(shutCtx)
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(shutCtx)
	}
	if consoleSrv != nil {
		_ = consoleSrv.Shutdown(shutCtx)
	}
	prober.Stop() // a run under way is cut short, and not counted
	matcher.Stop()
	if pruner != nil {
		pruner.Stop() // a step under way rolls back; its events stay for the next pass
	}
	claimer.Stop()
	deliverer.Stop()
	<-resumed // ctx is done: a batch under way stops after the orders it is closing
	// What the sealer leaves unsealed, the next one seals: another serve's,
	// the next start's, or lapse audit verify.
	sealer.Stop()
	if httpErr != nil && !errors.Is(httpErr, http.ErrServerClosed) {
		return fmt.Errorf("http shutdown: %w", httpErr)
	}
	return nil
}

// settleApprovals settles the approval requests that a process stopped
// between their approval and the end of their carrying out left approved
// (access.SettleStranded): each becomes executed or failed, by its
// action's audit rows.
func settleApprovals(ctx context.Context, acc *access.Service, log *slog.Logger) {
	n, err := acc.SettleStranded(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Error("approvals: the requests left approved could not be settled; they are settled when read, or at the next start", "err", err)
	case n > 0:
		log.Warn("approvals: requests left approved by a process that stopped while carrying them out were settled by their audit rows", "settled", n)
	}
}

// resumeCloses runs the manual close batches that a process stopped or
// killed part way left running, one after the other, as Lapse itself: each
// is finished with every order closed once (closes.Finish, which outlasts
// an outage of the database). A batch that stops for another reason is
// logged, and the next one is run.
func resumeCloses(ctx context.Context, closer *closes.Closer, log *slog.Logger) {
	bs, err := closer.Unfinished(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("manual close: the unfinished batches could not be listed; they resume at the next start", "err", err)
		}
		return
	}
	by := &lapse.AuditEntry{ActorKind: access.KindSystem, ActorID: "lapse", ActorName: "lapse"}
	for _, b := range bs {
		log.Info("manual close: resuming a batch left running", "batch", b.ID, "total", b.Total, "created_by", b.CreatedBy)
		got, err := closer.Finish(ctx, b.ID, by, nil)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Error("manual close: a resumed batch stopped; it resumes at the next start", "batch", b.ID, "err", err)
			continue
		}
		log.Info("manual close: batch finished", "batch", got.ID, "closed", got.Closed, "skipped", got.Skipped, "failed", got.Failed)
	}
}
