package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
)

const demoUsage = `Usage: lapse demo [--duration D] [--rate N] [--db FILE] [--http ADDR] [--config FILE]

Runs lapse serve in this process on a fresh SQLite file, with the sandbox
payment provider and a flaky merchant service (stock port and card service)
of its own, and drives live traffic through the HTTP API with an admin key
it makes: checkout orders paid in time, abandoned, cancelled, refunded, paid
late (refunded by Lapse) or paid at the deadline within the grace; group
buys that settle or fail; memberships whose cards are issued or that end in
manual review. The sandbox fails 10% of its charges, refunds and closes and
loses the answer of 5%; the stock port fails 20% of its calls and answers
10% too late; the card service fails 20% and never issues one product;
retry schedules are short, so that retries, dead deliveries and reviews
happen while you watch. A display of orders by state, close
lag, deliveries, reviews and payments is redrawn in place on a terminal (a
line every 5s otherwise). The console is served all along, with an operator
"demo" whose password and TOTP secret are printed at the start.

It stops after --duration, or at Ctrl-C: the traffic stops, the work in
flight settles for up to 20s (a second Ctrl-C skips that), a summary is
printed, and lapse reconcile runs on the demo's database. It exits 0 when
reconcile is clean, 1 when it is not. The database is kept: the last lines
say how to look at it again.

Flags:
  --duration D  how long the traffic runs (0: until Ctrl-C)
  --rate N      arrivals of orders and group buys a second (default 10)
  --db FILE     the SQLite file of the demo, which must not exist yet
                (default: lapse.db in a new temporary directory); taken from
                the command line only, never from LAPSE_DB or --config, so
                that the demo never writes into a real service's database
  --http ADDR   address of the API and the console (default 127.0.0.1:0, a
                free port); taken from the command line only
  --config FILE YAML file of flag values (duration, rate)
`

// demoArgs are the arguments of lapse demo.
type demoArgs struct {
	duration time.Duration
	rate     float64
}

// demoSettings are the settings of lapse demo. --db and --http are serve's,
// but the demo takes them from its command line only (see demoUsage).
var demoSettings = []*setting{dbSetting, serveSetting("http"),
	{Name: "duration", Kind: kindDuration, Range: atLeast("0s"),
		Doc:   "lapse demo: how long the traffic runs (0: until Ctrl-C)",
		field: func(o *options) any { return &o.demo.duration }},
	{Name: "rate", Kind: kindFloat, Default: "10", Range: &valueRange{min: "0", above: true, max: strconv.Itoa(demoMaxRate)},
		Doc:   "lapse demo: arrivals of orders and group buys a second",
		field: func(o *options) any { return &o.demo.rate }},
}

// The demo's failures and settling.
const (
	demoSandboxFail    = 0.10
	demoSandboxLost    = 0.05
	demoPortFail       = 0.20
	demoPortSlow       = 0.10
	demoPortSlowFor    = 800 * time.Millisecond // past --port-read-timeout
	demoSettleFor      = 20 * time.Second
	demoRedrawEvery    = 500 * time.Millisecond
	demoPlainEvery     = 5 * time.Second
	demoOperator       = "demo"
	demoMaxRate        = 500
	demoRetrySchedule  = "300ms,600ms,1s"
	demoRefundSchedule = 300 * time.Millisecond
)

// demo is one run of lapse demo.
type demo struct {
	duration time.Duration
	rate     float64
	began    time.Time

	svc      *service
	merchant *demoMerchant
	traffic  *demoTraffic
	last     *demoStats // as collect read them last, on the display's goroutine
	lastFull time.Time  // when collect last read everything

	mu         sync.Mutex
	state      string        // demoRunning, demoSettling, demoStopped
	trafficFor time.Duration // how long the traffic ran, once it stopped
}

// The phases of a demo.
const (
	demoRunning  = "running"
	demoSettling = "settling"
	demoStopped  = "stopped"
)

// phase returns the demo's phase and, once the traffic stopped, how long
// it ran.
func (d *demo) phase() (string, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state, d.trafficFor
}

func (d *demo) setPhase(p string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == demoRunning {
		d.trafficFor = time.Since(d.began)
	}
	d.state = p
}

// runDemo is lapse demo.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, demoUsage) }
	o := &options{}
	cfg, err := loadFlags(fs, demoSettings, o, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	for _, w := range cfg.warnings() {
		fmt.Fprintln(stderr, "lapse: warning:", w)
	}
	a := o.demo
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("demo: unexpected argument %q", fs.Arg(0))
	}
	db, addr := "", "127.0.0.1:0"
	if cfg.Sources["http"] == sourceFlag {
		addr = o.addr
	}
	if cfg.Sources["db"] == sourceFlag {
		path, isSQLite := sqlitePath(o.db)
		switch _, err := os.Stat(path); {
		case !isSQLite || path == "" || path == ":memory:":
			return fmt.Errorf("demo: --db %s: the demo runs on the embedded store: give the path of an SQLite file to make", hidePasswords(o.db))
		case err == nil:
			return fmt.Errorf("demo: --db %s: the file exists; the demo makes a fresh database, so give a path that does not exist yet", path)
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("demo: --db %s: %w", path, err)
		}
		db = path
	} else {
		dir, err := os.MkdirTemp("", "lapse-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		db = filepath.Join(dir, defaultDB)
	}

	d := &demo{duration: a.duration, rate: a.rate, state: demoRunning}
	return d.run(ctx, db, addr, stdout, stderr)
}

// run runs the demo on a new database db, the API and the console on addr.
func (d *demo) run(ctx context.Context, db, addr string, stdout, stderr io.Writer) error {
	// The service outlives ctx (Ctrl-C): the work in flight settles, and
	// then the service stops.
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	d.merchant = newDemoMerchant(demoPortFail, demoPortSlow, demoPortSlowFor)
	merchantURL, err := d.merchant.serve(svcCtx)
	if err != nil {
		return fmt.Errorf("demo: the merchant service: %w", err)
	}
	key, err := demoKey()
	if err != nil {
		return err
	}
	o, cfg, err := demoServeOptions(db, addr, key, merchantURL)
	if err != nil {
		return err
	}
	logPath := db + ".log"
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	started := make(chan *service, 1)
	served := make(chan error, 1)
	go func() { served <- runService(svcCtx, o, cfg, log, func(s *service) { started <- s }) }()
	select {
	case d.svc = <-started:
	case err := <-served:
		return fmt.Errorf("demo: the service did not start (its log: %s): %v", logPath, err)
	case <-ctx.Done():
		stopSvc()
		<-served
		return fmt.Errorf("demo: stopped before the service started")
	}
	stopped := func() error {
		stopSvc()
		return <-served
	}
	// Money going back is retried on a day-long schedule in production;
	// the demo's must finish while one watches.
	if err := d.svc.Engine.SetSchedule(engine.RefundSubscriber, lapse.Schedule{Steps: []time.Duration{
		demoRefundSchedule, 2 * demoRefundSchedule, 4 * demoRefundSchedule, 8 * demoRefundSchedule}}); err != nil {
		stopped()
		return err
	}
	_, enr, err := d.svc.Access.AddOperator(svcCtx, cliPrincipal(), demoOperator, access.RoleAdmin, "")
	if err != nil {
		stopped()
		return fmt.Errorf("demo: the console's operator: %w", err)
	}
	d.traffic = newDemoTraffic(d.svc.API, key, d.svc.Sandbox.Redeliver)
	if err := d.traffic.setUp(svcCtx); err != nil {
		stopped()
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(stdout, "lapse demo: lapse serve runs in this process on %s (its log: %s)\n", db, logPath)
	fmt.Fprintf(stdout, "  API      %s  (admin key of this demo: %s)\n", d.svc.API, key)
	fmt.Fprintf(stdout, "  console  %s  operator %q, password %s\n", d.svc.Console, demoOperator, enr.Password)
	fmt.Fprintf(stdout, "           TOTP secret %s (an authenticator app; or scan the code below)\n", enr.Secret)
	fmt.Fprintf(stdout, "%s\n", enr.QR)

	scr := &screen{w: stdout, terminal: isTerminal(stdout), plainEvery: demoPlainEvery}
	show := func(force bool) {
		if !scr.due(force) {
			return
		}
		st, err := d.collect(svcCtx, force)
		if err != nil {
			fmt.Fprintf(stderr, "lapse demo: reading the service's figures: %v\n", err)
			return
		}
		scr.draw(st, d, force)
	}
	d.began = time.Now()
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	if d.duration > 0 {
		var cancel context.CancelFunc
		trafficCtx, cancel = context.WithTimeout(trafficCtx, d.duration)
		defer cancel()
	}
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		d.traffic.run(trafficCtx, d.rate)
	}()
	tick := time.NewTicker(demoRedrawEvery)
	defer tick.Stop()
	show(true)
	for running := true; running; {
		select {
		case <-trafficCtx.Done():
			running = false
		case err := <-served:
			return fmt.Errorf("demo: the service stopped (its log: %s): %v", logPath, err)
		case <-tick.C:
			show(false)
		}
	}
	<-trafficDone
	interrupted := ctx.Err() != nil

	// Settle: the deliveries in flight finish, payments are refunded; a
	// second Ctrl-C skips it.
	d.setPhase(demoSettling)
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt)
	defer signal.Stop(again)
	settle := time.NewTimer(demoSettleFor)
	defer settle.Stop()
	for settling := true; settling; {
		select {
		case <-again:
			settling = false
		case <-settle.C:
			settling = false
		case <-tick.C:
			st, err := d.collect(svcCtx, true) // settled is judged on fresh figures
			if err != nil {
				fmt.Fprintf(stderr, "lapse demo: reading the service's figures: %v\n", err)
				continue
			}
			scr.draw(st, d, false)
			settling = st.Pending > 0 || st.Unsettled > 0
		}
	}
	d.setPhase(demoStopped)
	final, err := d.collect(svcCtx, true)
	if err == nil {
		scr.draw(final, d, true)
	}
	if err := stopped(); err != nil {
		return fmt.Errorf("demo: the service: %w", err)
	}
	if err != nil {
		return fmt.Errorf("demo: reading the service's figures: %w", err)
	}
	d.summary(stdout, final, interrupted)

	fmt.Fprintf(stdout, "\nlapse reconcile --db %s\n", db)
	// The flows of the demo's service, built-in only, whatever LAPSE_FLOWS says.
	recErr := reconcile(context.WithoutCancel(ctx), []string{"--db", db, "--flows="}, stdout, stderr)
	fmt.Fprintf(stdout, "\nTo look again: lapse serve --db %s --http 127.0.0.1:0 (the console keeps the operator %q)\n", db, demoOperator)
	return recErr
}

// summary prints what the demo did.
func (d *demo) summary(w io.Writer, st *demoStats, interrupted bool) {
	how := "after --duration " + d.duration.String()
	if interrupted {
		how = "at Ctrl-C"
	}
	fmt.Fprintf(w, "\nSummary: the traffic ran %s and stopped %s; the work in flight settled until %s\n",
		st.Traffic, how, st.Elapsed)
	var arrivals []string
	n := 0
	for _, name := range slices.Sorted(maps.Keys(st.Started)) {
		arrivals = append(arrivals, fmt.Sprintf("%s %d", name, st.Started[name]))
		n += st.Started[name]
	}
	fmt.Fprintf(w, "  arrivals     %d: %s\n", n, strings.Join(arrivals, ", "))
	for _, flow := range slices.Sorted(maps.Keys(st.Orders)) {
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(st.Orders[flow])) {
			parts = append(parts, fmt.Sprintf("%s %d", s, st.Orders[flow][s]))
		}
		fmt.Fprintf(w, "  %-12s %s\n", flow, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "  close lag    p50 %s, p99 %s over %d closes by deadline\n", lagText(st.P50, st.Closes), lagText(st.P99, st.Closes), st.Closes)
	fmt.Fprintf(w, "  deliveries   %d pending, %d dead\n", st.Pending, st.Dead)
	fmt.Fprintf(w, "  reviews      %d open\n", st.Reviews)
	for _, cur := range slices.Sorted(maps.Keys(st.Money)) {
		m := st.Money[cur]
		if m.Overflow {
			fmt.Fprintf(w, "  payments     %s the totals do not fit in 64 bits, and are not shown\n", cur)
			continue
		}
		fmt.Fprintf(w, "  payments     %s captured %s = applied %s + refunded %s + in review %s + not settled %s\n", cur,
			minor(m.Captured), minor(m.Applied), minor(m.Refunded), minor(m.Review), minor(m.Open))
	}
	c := st.Sandbox
	fmt.Fprintf(w, "  sandbox      %d paid, %d charges, %d refunds, %d closes; %d failed, %d answers lost, %d callbacks unanswered\n",
		c.Pay, c.Charge, c.Refund, c.Close, c.Failed, c.Lost, c.CallbackFailures)
	m := st.Merchant
	fmt.Fprintf(w, "  stock port   %d calls, %d failed, %d answered too late, %d asked back\n", m.Calls, m.Failed, m.Slow, m.Queries)
	fmt.Fprintf(w, "  card port    %d calls, %d failed\n", m.CardCalls, m.CardFailed)
	fmt.Fprintf(w, "  API          %d requests failed\n", st.APIFails)
	if st.LastFail != "" {
		fmt.Fprintf(w, "               last: %s\n", st.LastFail)
	}
}

// demoServeOptions returns the options of lapse serve that the demo runs:
// serve's defaults, whatever the environment and config files say, with the
// demo's database, address, admin key, sandbox, merchant service and short
// retry schedules.
func demoServeOptions(db, addr, key, merchantURL string) (*options, *flagConfig, error) {
	fs := flag.NewFlagSet("lapse demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &options{}
	defineFlags(fs, serveSettings, o)
	args := []string{"--db", db, "--http", addr, "--admin-key", key,
		"--sandbox", "--sandbox-fail-rate", fmt.Sprint(demoSandboxFail), "--sandbox-unknown-rate", fmt.Sprint(demoSandboxLost),
		"--payment-grace", "checkout=" + demoGrace.String(),
		"--stock-port", merchantURL + "/stock", "--card-port", merchantURL + "/cards",
		"--port-retry", demoRetrySchedule, "--port-connect-timeout", "200ms", "--port-read-timeout", "400ms",
		"--issue-retries", demoRetrySchedule, "--group-retries", "300ms,600ms,1s,2s",
		"--delivery-poll", "100ms", "--max-sleep", "250ms", "--sweep-interval", "2s",
		// The flaky stock port would fail the probe's deliveries, and its
		// orders would crowd the demo's figures.
		"--probe-interval", "0"}
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("demo: the service's settings: %w", err)
	}
	cfg := &flagConfig{Sources: map[string]string{}, fs: fs, settings: settingsByName(serveSettings)}
	cfg.known = knownSettings(cfg.settings)
	fs.VisitAll(func(f *flag.Flag) { cfg.Sources[f.Name] = sourceDefault })
	fs.Visit(func(f *flag.Flag) { cfg.Sources[f.Name] = sourceFlag })
	return o, cfg, nil
}

// demoKey returns a new admin key for the demo's traffic.
func demoKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "demo-" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}
