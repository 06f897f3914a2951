package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// probeFixture is an engine with the stock ledger and a prober every
// minute, on a manual clock at the start of a minute.
type probeFixture struct {
	store   lapse.Store
	watch   *probeWatch // the engine's store
	clk     *lapse.ManualClock
	eng     *engine.Engine
	prober  *engine.Prober
	reg     *prometheus.Registry
	mu      sync.Mutex
	told    []engine.ProbeRun
	claimer *engine.Claimer
	deliver *engine.Deliverer
}

func newProbeFixture(t *testing.T, s lapse.Store) *probeFixture {
	t.Helper()
	f := &probeFixture{store: s, watch: &probeWatch{Store: s}, clk: lapse.NewManualClock(t0), reg: prometheus.NewRegistry()}
	var err error
	f.eng, err = engine.New(f.watch, flows.Builtin(), engine.Config{Clock: f.clk, StockLedger: true, CouponLedger: true})
	if err != nil {
		t.Fatal(err)
	}
	f.prober, err = engine.NewProber(f.eng, engine.ProberConfig{Interval: time.Minute, Poll: 2 * time.Millisecond, Registerer: f.reg,
		Notify: func(_ context.Context, run engine.ProbeRun) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.told = append(f.told, run)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.claimer = engine.NewClaimer(f.eng, engine.ClaimerConfig{})
	f.deliver = engine.NewDeliverer(f.eng, engine.DelivererConfig{})
	return f
}

// probeWatch is a store that tells when a probe's order was first read by
// number, as the prober reads it, to see whether it closed, once its create
// step is over (it reads the clock for that step after the create
// returned, a moment after the order is there to be seen: a test that
// moved the clock as soon as it saw the order would make that step late).
type probeWatch struct {
	lapse.Store
	probeReads
}

func (w *probeWatch) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	w.saw(orderNo)
	return w.Store.OrderGet(ctx, orderNo)
}

// relayWatch is a probeWatch of the store that relays, which it stays
// (lapse.Relayer).
type relayWatch struct {
	*postgres.Store
	probeReads
}

func (w *relayWatch) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	w.saw(orderNo)
	return w.Store.OrderGet(ctx, orderNo)
}

// probeReads are the probe orders read by number.
type probeReads struct {
	mu   sync.Mutex
	read map[string]bool
}

func (r *probeReads) saw(orderNo string) {
	if !lapse.IsProbeOrderNo(orderNo) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.read == nil {
		r.read = map[string]bool{}
	}
	r.read[orderNo] = true
}

// awaited reports whether the probe's order orderNo was read by number.
func (r *probeReads) awaited(orderNo string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read[orderNo]
}

// start runs the probe beside the test, and returns its outcome once the
// probe's order exists and its create step is over.
func (f *probeFixture) start(t *testing.T) (<-chan *engine.ProbeRun, <-chan error) {
	t.Helper()
	runs, errs := make(chan *engine.ProbeRun, 1), make(chan error, 1)
	go func() {
		run, err := f.prober.RunOnce(t.Context())
		runs <- run
		errs <- err
	}()
	no := lapse.ProbeOrderPrefix + strconv.FormatInt(f.clk.Now().Truncate(time.Minute).UnixMilli(), 10)
	until := time.Now().Add(10 * time.Second)
	for {
		if f.watch.awaited(no) {
			return runs, errs
		}
		select {
		case run := <-runs:
			t.Fatalf("the run ended before its order %s was created: %+v, %v", no, run, <-errs)
		default:
		}
		if time.Now().After(until) {
			t.Fatalf("the probe's order %s was not created", no)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestProberWalksTheChain(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		f := newProbeFixture(t, open())
		runs, errs := f.start(t)
		ttl, _ := engine.ProbeBounds(time.Minute)
		f.clk.Advance(ttl + 30*time.Millisecond)
		if n, err := f.claimer.RunOnce(t.Context()); err != nil || n != 1 {
			t.Fatalf("claimer fired %d, %v; want the probe's order", n, err)
		}
		var run *engine.ProbeRun
		for run == nil {
			f.clk.Advance(time.Millisecond)
			if _, err := f.deliver.RunOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
			select {
			case run = <-runs:
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if run.Result != engine.ProbeOK || run.FailedStep != "" || run.Error != "" {
			t.Fatalf("run %+v, want ok", run)
		}
		var names []string
		for _, s := range run.Steps {
			names = append(names, s.Name)
		}
		if len(names) != 4 || names[0] != "create" || names[1] != "close" || names[2] != "release" || names[3] != "deliver" {
			t.Errorf("steps %v", names)
		}
		if close := run.Steps[1].Seconds; close < 0.030 || close > 0.031 {
			t.Errorf("close took %vs after the deadline, want the 30ms the clock moved", close)
		}
		if got := probeMetric(t, f.reg, "lapse_probe_last_success_timestamp_seconds", "", ""); got != float64(run.FinishedAt.UnixMicro())/1e6 {
			t.Errorf("last success %v, want %v", got, run.FinishedAt)
		}
		if n := probeSeries(t, f.reg, "lapse_probe_step_seconds"); n != 4 {
			t.Errorf("%d step histograms, want 4", n)
		}
		o, err := f.eng.Order(t.Context(), run.OrderNo)
		if err != nil || o.State != flows.Closed || o.FiredBy != lapse.FiredByTimer || !o.IsProbe() {
			t.Fatalf("probe order %+v, %v", o, err)
		}
		st, err := f.eng.Stock(t.Context(), engine.DefaultProbeSKU)
		if err != nil || st.Reserved != 0 {
			t.Errorf("probe stock %+v, %v: want nothing reserved", st, err)
		}
		listed, err := f.eng.Orders(t.Context(), &lapse.OrderListParams{Limit: 10})
		if err != nil || len(listed) != 0 {
			t.Errorf("default listing: %d orders, %v; want none", len(listed), err)
		}
		if len(f.told) != 0 {
			t.Errorf("the admins were told of %d failures", len(f.told))
		}
		if got := f.prober.Runs(); len(got) != 1 || got[0].OrderNo != run.OrderNo {
			t.Errorf("Runs() = %+v", got)
		}
	})
}

// TestProberFailsWhenNothingCloses: without a deadline engine the run fails
// at the close once its bound has passed, counted, logged and told.
func TestProberFailsWhenNothingCloses(t *testing.T) {
	t.Parallel()
	f := newProbeFixture(t, openSQLite(t))
	runs, errs := f.start(t)
	ttl, bound := engine.ProbeBounds(time.Minute)
	f.clk.Advance(ttl + bound - time.Millisecond)
	select {
	case run := <-runs:
		t.Fatalf("the run ended within its bound: %+v, %v", run, <-errs)
	case <-time.After(50 * time.Millisecond):
	}
	f.clk.Advance(2 * time.Millisecond)
	run := <-runs
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if run.Result != engine.ProbeFailed || run.FailedStep != engine.ProbeStepClose || run.Error == "" || len(run.Steps) != 1 {
		t.Fatalf("run %+v, want failed at close after create", run)
	}
	if n := probeSeries(t, f.reg, "lapse_probe_failures_total"); n != 4 {
		t.Errorf("%d failure series; want one per step", n)
	}
	if got := probeMetric(t, f.reg, "lapse_probe_failures_total", "step", "close"); got != 1 {
		t.Errorf("close failures %v", got)
	}
	if got := probeMetric(t, f.reg, "lapse_probe_runs_total", "result", "failed"); got != 1 {
		t.Errorf("failed runs %v", got)
	}
	if got := probeMetric(t, f.reg, "lapse_probe_last_success_timestamp_seconds", "", ""); got != 0 {
		t.Errorf("last success %v, want none", got)
	}
	if len(f.told) != 1 || f.told[0].OrderNo != run.OrderNo || f.told[0].FailedStep != engine.ProbeStepClose {
		t.Errorf("told %+v", f.told)
	}
	// A stuck probe is a due order like any other.
	if n, err := f.store.OrderCountDue(t.Context(), f.clk.Now()); err != nil || n != 1 {
		t.Errorf("due orders %d, %v; want the probe's", n, err)
	}
}

// TestProberOnePerInterval: of two processes probing one database, one runs
// each interval's probe; the other is told so and records nothing.
func TestProberOnePerInterval(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		f := newProbeFixture(t, open())
		other := newProbeFixture(t, open())     // another process on the database
		other.clk.Set(t0.Add(10 * time.Second)) // in the same interval, later
		runs, _ := f.start(t)
		if run, err := other.prober.RunOnce(t.Context()); !errors.Is(err, engine.ErrProbeTaken) || run != nil {
			t.Errorf("second prober: %+v, %v; want ErrProbeTaken", run, err)
		}
		if got := other.prober.Runs(); len(got) != 0 {
			t.Errorf("second prober recorded %+v", got)
		}
		if n := probeMetric(t, other.reg, "lapse_probe_runs_total", "result", "failed") + probeMetric(t, other.reg, "lapse_probe_runs_total", "result", "ok"); n != 0 {
			t.Errorf("second prober counted %v runs", n)
		}
		f.clk.Advance(time.Minute)
		if run := <-runs; run == nil || run.Result != engine.ProbeFailed {
			t.Errorf("first run %+v", run)
		}
		// The next interval is the next order's, whichever process asks first.
		other.clk.Set(t0.Add(time.Minute + time.Second))
		next, errs := other.start(t)
		other.clk.Advance(time.Minute)
		if run, err := <-next, <-errs; err != nil || run.OrderNo == "" || run.Result != engine.ProbeFailed {
			t.Errorf("second prober, next interval: %+v, %v", run, err)
		}
	})
}

func TestProberRefusesShortIntervals(t *testing.T) {
	t.Parallel()
	e := newEngine(t, openSQLite(t), lapse.NewManualClock(t0))
	if _, err := engine.NewProber(e, engine.ProberConfig{Interval: 500 * time.Millisecond}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("NewProber(500ms) = %v, want EINVALID", err)
	}
	if _, err := engine.NewProber(e, engine.ProberConfig{Interval: time.Minute, Flow: "groupbuy-nope"}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("NewProber(unknown flow) = %v, want EINVALID", err)
	}
	p, err := engine.NewProber(e, engine.ProberConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunOnce(t.Context()); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("RunOnce while off = %v, want EINVALID", err)
	}
	if err := p.SetInterval(time.Millisecond); lapse.ErrorCode(err) != lapse.EINVALID || p.Interval() != 0 {
		t.Errorf("SetInterval(1ms) = %v, interval %s", err, p.Interval())
	}
	if err := p.SetInterval(2 * time.Second); err != nil || p.Interval() != 2*time.Second {
		t.Errorf("SetInterval(2s) = %v, interval %s", err, p.Interval())
	}
}

// TestCreateOrderRefusesProbeNumbers: the probe's order numbers are the
// probe's alone.
func TestCreateOrderRefusesProbeNumbers(t *testing.T) {
	t.Parallel()
	s := openSQLite(t)
	e := newEngine(t, s, lapse.NewManualClock(t0))
	_, _, err := e.CreateOrder(t.Context(), &lapse.OrderCreate{OrderNo: lapse.ProbeOrderPrefix + "1", Flow: "checkout", UserID: "u", Currency: "CNY"},
		engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"})
	if lapse.ErrorCode(err) != lapse.EINVALID {
		t.Fatalf("CreateOrder(%s1) = %v, want EINVALID", lapse.ProbeOrderPrefix, err)
	}
	if _, err := s.OrderGet(t.Context(), lapse.ProbeOrderPrefix+"1"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("the refused order exists: %v", err)
	}
}

func openSQLite(t *testing.T) lapse.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// probeMetric returns the value of the gauge or counter name gathered from
// g, of the series whose label has value (the first series when label is
// empty).
func probeMetric(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matches := label == ""
			for _, l := range m.GetLabel() {
				matches = matches || (l.GetName() == label && l.GetValue() == value)
			}
			if !matches {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, label, value)
	return 0
}

// probeSeries counts the series of the metric family name gathered from g.
func probeSeries(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// TestProberWaitsForRelayedEvents: an event relayed to its subscriber
// without a delivery row (Subscription.Relay) is delivered once its relay
// has handed it over, not before: while the relay does not pass the probe's
// events the run fails at deliver, and once it does the next run succeeds.
func TestProberWaitsForRelayedEvents(t *testing.T) {
	t.Parallel()
	s := &relayWatch{Store: relayStore(t)}
	clk := lapse.NewManualClock(t0)
	reg := prometheus.NewRegistry()
	sink := &batchRecorder{}
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk,
		Subscriptions: []engine.Subscription{{Name: "sink", Handler: sink, Concurrency: 8, Relay: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.NewProber(e, engine.ProberConfig{Interval: time.Minute, Poll: 2 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	claimer := engine.NewClaimer(e, engine.ClaimerConfig{})
	d := engine.NewDeliverer(e, engine.DelivererConfig{})
	relayReady(t, d)
	ttl, bound := engine.ProbeBounds(time.Minute)

	// run walks one run: the claimer closes the order at its deadline, and
	// relay says whether the relay runs while the probe waits.
	run := func(relay bool) *engine.ProbeRun {
		t.Helper()
		runs, errs := make(chan *engine.ProbeRun, 1), make(chan error, 1)
		go func() {
			run, err := p.RunOnce(t.Context())
			runs <- run
			errs <- err
		}()
		no := lapse.ProbeOrderPrefix + strconv.FormatInt(clk.Now().Truncate(time.Minute).UnixMilli(), 10)
		for until := time.Now().Add(10 * time.Second); !s.awaited(no); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(until) {
				t.Fatalf("the probe's order %s was not created", no)
			}
		}
		clk.Advance(ttl + 10*time.Millisecond)
		if n, err := claimer.RunOnce(t.Context()); err != nil || n != 1 {
			t.Fatalf("claimer fired %d, %v; want the probe's order", n, err)
		}
		for step := time.Duration(0); ; step += 100 * time.Millisecond {
			if relay {
				if _, err := d.RunOnce(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case r := <-runs:
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
				return r
			case <-time.After(10 * time.Millisecond):
			}
			if step > 2*bound {
				t.Fatalf("the run did not end %s after its close", step)
			}
			clk.Advance(100 * time.Millisecond)
		}
	}

	stuck := run(false)
	if stuck.Result != engine.ProbeFailed || stuck.FailedStep != engine.ProbeStepDeliver || !strings.Contains(stuck.Error, "sink") {
		t.Fatalf("run while the relay hands nothing over: %+v; want failed at deliver, naming the sink", stuck)
	}
	if n := len(sink.received()); n != 0 {
		t.Fatalf("the sink got %d events while the relay did not run", n)
	}

	clk.Set(t0.Add(time.Minute))
	ok := run(true)
	if ok.Result != engine.ProbeOK || len(ok.Steps) != 3 || ok.Steps[2].Name != engine.ProbeStepDeliver {
		t.Fatalf("run with the relay running: %+v; want ok, delivered", ok)
	}
	if !slices.ContainsFunc(sink.received(), func(dl *lapse.Delivery) bool {
		return dl.OrderNo == ok.OrderNo && dl.EventType == flows.EventOrderClosed
	}) {
		t.Errorf("the sink did not get the close of %s", ok.OrderNo)
	}
}

// TestProberIntervalMetric: lapse_probe_interval_seconds is the interval
// as it is now, 0 once a reload turns the probe off, so that an alert on a
// stale probe scales with it and stays silent while it is off.
func TestProberIntervalMetric(t *testing.T) {
	t.Parallel()
	f := newProbeFixture(t, openSQLite(t))
	if got := probeMetric(t, f.reg, "lapse_probe_interval_seconds", "", ""); got != 60 {
		t.Errorf("interval %v, want 60", got)
	}
	if err := f.prober.SetInterval(0); err != nil {
		t.Fatal(err)
	}
	if got := probeMetric(t, f.reg, "lapse_probe_interval_seconds", "", ""); got != 0 {
		t.Errorf("interval once off %v, want 0", got)
	}
}
