package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// Config is one simulation: a seed, how many steps, and a fresh, migrated
// store of its own.
type Config struct {
	Seed  uint64
	Steps int
	Store lapse.Store
	// Logf, when set, receives the step log (a replay's -v output).
	Logf func(format string, args ...any)
}

// Result is what a run did.
type Result struct {
	Steps          int
	Checks         int            // invariant checks made
	Faults         map[string]int // injected, by kind
	Orders         int
	Operators      int            // operator actions made
	OpErrCommitted int            // of them, failed and yet committed with their row
	OpLost         int            // of them, acknowledged without a row: no change to commit it with, and the caller's own did not commit
	States         map[string]int // orders by flow and final state, "checkout/CLOSED"
}

// Violation is an invariant that did not hold.
type Violation struct {
	Seed      uint64
	Step      int // 0: at the end
	Invariant string
	Detail    string
}

func (v *Violation) Error() string {
	at := fmt.Sprintf("step %d", v.Step)
	if v.Step == 0 {
		at = "the end"
	}
	return fmt.Sprintf("seed %d, %s: %s: %s", v.Seed, at, v.Invariant, v.Detail)
}

// start is the simulated clock's first reading.
var start = time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)

// world is one run: the real engine on the real store, the simulated clock,
// the fakes at the edges, and the simulator's record of what it did.
type world struct {
	cfg    Config
	ctx    context.Context
	rng    *rand.Rand
	clock  *lapse.ManualClock
	f      *faults
	prov   *provider
	cards  *cardPort
	notify *notifyPort
	trig   *trigger
	flows  []*lapse.Flow
	step   int
	checks int

	proc *process
	st   *faultStore // the process's store, as its callers (the HTTP layer's audit rows) see it
	eng  *engine.Engine
	cl   *engine.Claimer
	dl   *engine.Deliverer

	orders    []*simOrder
	byNo      map[string]*simOrder
	callbacks []*callback
	coupons   []string
	skus      []string

	seen   map[string]int64       // order_no → version last audited
	states map[string]lapse.State // order_no → state last audited
	failed error                  // a violation found during a step, reported by its audit

	opCalls   []*opCall           // the operators' actions, in the order they were made
	opChecked int                 // how many of them the auditor has checked
	rows      []*lapse.AuditEntry // the audit log, as the audit under way read it
}

// simOrder is what the simulator knows of an order it created.
type simOrder struct {
	no      string
	flow    string
	amount  int64
	items   []lapse.Item
	coupon  string
	members int // group buys: joins acknowledged
}

// callback is a provider callback waiting to be sent.
type callback struct {
	at time.Time
	n  *lapse.PaymentNotice
}

const (
	currency = "CNY"
	users    = 6
)

// Run runs one simulation and returns what it did, or a *Violation.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	w := &world{cfg: cfg, ctx: ctx, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), clock: lapse.NewManualClock(start),
		f: newFaults(cfg.Seed), byNo: map[string]*simOrder{}, seen: map[string]int64{},
		states: map[string]lapse.State{}}
	w.prov = newProvider(w.f, w.clock)
	w.cards = newCardPort(w.f, w.clock)
	w.notify = newNotifyPort(w.f)
	w.trig = newTrigger(w.clock)
	checkout := flows.Checkout()
	w.flows = []*lapse.Flow{checkout, flows.Groupbuy(), flows.Membership()}
	w.f.setOn(false)
	if err := w.boot(); err != nil {
		return nil, err
	}
	for i := range 3 {
		sku := fmt.Sprintf("sku-%d", i)
		if _, err := w.eng.SetStock(ctx, sku, int64(20+w.rng.IntN(30))); err != nil {
			return nil, err
		}
		w.skus = append(w.skus, sku)
	}
	for i := range 4 {
		code := fmt.Sprintf("CPN%d", i)
		if _, err := w.eng.CreateCoupon(ctx, code); err != nil {
			return nil, err
		}
		w.coupons = append(w.coupons, code)
	}
	w.f.setOn(true)
	for w.step = 1; w.step <= cfg.Steps; w.step++ {
		w.act()
		if w.proc.crashed.Load() {
			w.logf("  the process crashed; a new one starts on the store")
			if err := w.boot(); err != nil {
				return nil, err
			}
		}
		if err := w.audit(w.step%20 == 0); err != nil {
			return nil, err
		}
	}
	w.step = 0
	if err := w.drain(); err != nil {
		return nil, err
	}
	if err := w.final(); err != nil {
		return nil, err
	}
	states, err := w.finalStates()
	if err != nil {
		return nil, err
	}
	return &Result{Steps: cfg.Steps, Checks: w.checks, Faults: w.f.summary(), Orders: len(w.orders), Operators: len(w.opCalls), OpErrCommitted: w.opCount(func(c *opCall) bool { return c.committed }),
		OpLost: w.opCount(func(c *opCall) bool { return c.lost }), States: states}, nil
}

// finalStates counts the orders by flow and state.
func (w *world) finalStates() (map[string]int, error) {
	orders, err := w.cfg.Store.OrderList(w.ctx, &lapse.OrderListParams{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, o := range orders {
		out[o.Flow+"/"+string(o.State)]++
	}
	return out, nil
}

func (w *world) logf(format string, args ...any) {
	if w.cfg.Logf != nil {
		w.cfg.Logf(format, args...)
	}
}

// boot starts a process: a new engine, claimer and deliverer on the store,
// as a restarted lapse serve would have.
func (w *world) boot() error {
	n := 0
	if w.proc != nil {
		n = w.proc.n + 1
	}
	w.proc = &process{n: n}
	w.trig.boot(n)
	st := newFaultStore(w.cfg.Store, w.f, w.proc, false)
	w.st = st
	e, err := engine.New(st, w.flows, engine.Config{
		Clock: w.clock, Logger: slog.New(slog.DiscardHandler), Node: fmt.Sprintf("p%d", n),
		StockLedger: true, CouponLedger: true,
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{providerName: w.prov}},
		Cards:    w.cards,
		Trigger:  w.trig, TriggerMode: engine.TriggerAuto,
		Subscriptions: []engine.Subscription{{Name: notifySubscriber, Events: []string{"order.*", "group.*", "membership.*"},
			Handler: w.notify, Concurrency: 1}},
	})
	if err != nil {
		return err
	}
	// Retries without jitter: the jitter is drawn from the process's own
	// random source, not the seed's.
	for _, s := range e.Subscriptions() {
		sch := s.Schedule
		if len(sch.Steps) == 0 && sch.Base == 0 {
			sch = lapse.DefaultSchedule()
		}
		sch.Jitter = 0
		if err := e.SetSchedule(s.Name, sch); err != nil {
			return err
		}
	}
	w.eng = e
	w.cl = engine.NewClaimer(e, engine.ClaimerConfig{Batch: 3, Workers: 1, SweepGrace: time.Second, SweepBatch: 3})
	w.dl = engine.NewDeliverer(e, engine.DelivererConfig{Batch: 1, Lease: 30 * time.Second})
	return nil
}

// by is the simulated caller.
var by = engine.Actor{FiredBy: lapse.FiredByApp, Name: "sim"}

// opCount counts the operator actions that are.
func (w *world) opCount(are func(*opCall) bool) int {
	n := 0
	for _, c := range w.opCalls {
		if are(c) {
			n++
		}
	}
	return n
}
