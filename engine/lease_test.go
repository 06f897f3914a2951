package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// gate is an outside subscriber whose calls hang: each call says so on
// entered, then waits until the test opens the gate or its context ends, as
// a slow call out would.
type gate struct {
	entered chan string // event ids, as calls begin
	open    chan struct{}
	opened  sync.Once
	mu      sync.Mutex
	cuts    []error // the causes of the calls cut short
}

// newGate returns a closed gate, opened when the test ends at the latest.
func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan string, 16), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

// release opens the gate: calls waiting, and later ones, succeed.
func (g *gate) release() { g.opened.Do(func() { close(g.open) }) }

func (g *gate) Deliver(ctx context.Context, d *lapse.Delivery) error {
	g.entered <- d.EventID
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		g.cuts = append(g.cuts, context.Cause(ctx))
		g.mu.Unlock()
		return ctx.Err()
	}
}

// cut returns the causes of the calls cut short so far.
func (g *gate) cut() []error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]error(nil), g.cuts...)
}

// ranOnce runs d.RunOnce in the background; wait returns what it returned.
func ranOnce(t *testing.T, d *engine.Deliverer) (wait func() int) {
	ran := make(chan int, 1)
	go func() {
		n, _ := d.RunOnce(context.Background())
		ran <- n
	}()
	return func() int {
		t.Helper()
		select {
		case n := <-ran:
			return n
		case <-time.After(30 * time.Second):
			t.Fatal("RunOnce did not return: the attempt was not cut short")
			return 0
		}
	}
}

// waitEntered waits for a call to begin.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the subscriber was never called")
	}
}

// faultyStore is a work store whose delivery calls a test can break: all of
// them when its process is dead, or only the renewals.
type faultyStore struct {
	lapse.Store
	dead       atomic.Bool // every delivery call fails, as with a process gone
	renewFails atomic.Bool // DeliveryRenew fails
}

var errGone = errors.New("the process is gone")

func (f *faultyStore) check() error {
	if f.dead.Load() {
		return errGone
	}
	return nil
}

func (f *faultyStore) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.DeliveryClaim(ctx, p)
}

func (f *faultyStore) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.DeliveryFinish(ctx, p)
}

func (f *faultyStore) DeliveryDoneMany(ctx context.Context, p *lapse.DeliveryDoneManyParams) ([]int64, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.DeliveryDoneMany(ctx, p)
}

func (f *faultyStore) DeliveryRenew(ctx context.Context, p *lapse.DeliveryRenewParams) ([]int64, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.renewFails.Load() {
		return nil, errors.New("statement timeout")
	}
	return f.Store.DeliveryRenew(ctx, p)
}

func (f *faultyStore) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Tx(ctx, fn)
}

// worker is one process's engine and Deliverer on a shared store, with a
// subscriber "sink" of order.created events.
func worker(t *testing.T, s, work lapse.Store, clk lapse.Clock, owner string, h lapse.Handler) (*engine.Engine, *engine.Deliverer) {
	t.Helper()
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, WorkStore: work, Subscriptions: []engine.Subscription{{
		Name: "sink", Events: []string{lapse.EventOrderCreated}, Handler: h, Timeout: time.Hour,
		Schedule: lapse.Schedule{Steps: []time.Duration{24 * time.Hour}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return e, engine.NewDeliverer(e, engine.DelivererConfig{Owner: owner, Poll: 10 * time.Millisecond})
}

// sinkDelivery returns the order's delivery to "sink" with its attempts.
func sinkDelivery(t *testing.T, e *engine.Engine, orderNo string) engine.DeliveryHistory {
	t.Helper()
	hs, err := e.Deliveries(ctxT(t), orderNo)
	if err != nil || len(hs) != 1 {
		t.Fatalf("deliveries of %s = %d, %v; want 1", orderNo, len(hs), err)
	}
	return hs[0]
}

// TestDeliveryDeadWorkerTakenOver kills a worker in the middle of an
// attempt: its store calls fail from then on, so it neither renews nor
// finishes. Another worker on the same store takes the delivery over when
// the short lease ends, ten seconds after the claim, not a minute.
func TestDeliveryDeadWorkerTakenOver(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		dying := &faultyStore{Store: s}
		hang := newGate(t)
		ea, da := worker(t, s, dying, clk, "worker-a", hang)
		create(t, ea, checkout("DW-1", time.Hour))
		da.Start(context.Background())
		hang.waitEntered(t)
		dying.dead.Store(true)
		hang.release() // its answer comes to a process that is gone
		da.Stop()

		live := &recorder{}
		eb, db := worker(t, s, s, clk, "worker-b", plainRecorder{live})
		clk.Advance(10*time.Second - time.Millisecond)
		if n, err := db.RunOnce(ctxT(t)); n != 0 || err != nil {
			t.Fatalf("RunOnce before the dead worker's lease ended = %d, %v; want 0", n, err)
		}
		clk.Advance(time.Millisecond)
		if n, err := db.RunOnce(ctxT(t)); n != 1 || err != nil {
			t.Fatalf("RunOnce 10s after the dead worker's claim = %d, %v; want the delivery taken over", n, err)
		}
		if got := live.calls(); len(got) != 1 {
			t.Errorf("the live worker delivered %d times, want 1", len(got))
		}
		h := sinkDelivery(t, eb, "DW-1")
		if h.Status != lapse.DeliveryDone || h.Attempts != 2 || len(h.History) != 1 || h.History[0].Worker != "worker-b" || h.History[0].Attempt != 2 {
			t.Errorf("after the takeover: %+v %+v", h.Delivery, h.History)
		}
	})
}

// TestDeliveryLongAttemptKeepsLease runs an attempt for a minute of injected
// time, six leases, while another worker keeps looking for due work: the
// heartbeat keeps the lease with the worker that has it, no second attempt
// starts, and the long attempt finishes the delivery.
func TestDeliveryLongAttemptKeepsLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		slow := newGate(t)
		ea, da := worker(t, s, s, clk, "worker-a", slow)
		create(t, ea, checkout("LA-1", time.Hour))
		ran := ranOnce(t, da)
		slow.waitEntered(t)

		other := &recorder{}
		_, db := worker(t, s, s, clk, "worker-b", plainRecorder{other})
		for range 30 {
			clk.Advance(2 * time.Second)
			if err := da.Renew(ctxT(t)); err != nil {
				t.Fatalf("Renew at %v: %v", clk.Now().Sub(t0), err)
			}
			if n, err := db.RunOnce(ctxT(t)); n != 0 || err != nil {
				t.Fatalf("at %v into the attempt another worker claimed %d, %v", clk.Now().Sub(t0), n, err)
			}
		}
		slow.release()
		if n := ran(); n != 1 {
			t.Fatalf("RunOnce = %d, want 1", n)
		}
		if len(slow.entered) != 0 || len(other.calls()) != 0 || len(slow.cut()) != 0 {
			t.Errorf("a second attempt started (%d more calls, %d elsewhere) or the first was cut short (%v)",
				len(slow.entered), len(other.calls()), slow.cut())
		}
		h := sinkDelivery(t, ea, "LA-1")
		if h.Status != lapse.DeliveryDone || h.Attempts != 1 || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeOK {
			t.Errorf("after the long attempt: %+v %+v", h.Delivery, h.History)
		}
	})
}

// TestDeliveryRenewalFailureCutsAttempt breaks the renewals of a worker
// whose attempt is calling out: the attempt is cancelled while its lease
// still has time to run, so it has stopped before another worker can take
// the delivery over. A lease reported lost cuts its attempt at once.
func TestDeliveryRenewalFailureCutsAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		faulty := &faultyStore{Store: s}
		call := newGate(t)
		ea, da := worker(t, s, faulty, clk, "worker-a", call)
		ctx := ctxT(t)
		run := func(orderNo string) func() int {
			create(t, ea, checkout(orderNo, time.Hour))
			ran := ranOnce(t, da)
			call.waitEntered(t)
			return ran
		}

		ran := run("RF-1")
		clk.Advance(2 * time.Second)
		if err := da.Renew(ctx); err != nil { // leased until +12s
			t.Fatal(err)
		}
		faulty.renewFails.Store(true)
		for _, at := range []time.Duration{4 * time.Second, 6 * time.Second} {
			clk.Set(t0.Add(at))
			if err := da.Renew(ctx); err == nil {
				t.Fatal("Renew did not report the store's failure")
			}
			if cuts := call.cut(); len(cuts) != 0 {
				t.Fatalf("cut short at +%v with 12s-%v of lease left: %v", at, at, cuts)
			}
		}
		clk.Set(t0.Add(7 * time.Second)) // half the lease left
		if err := da.Renew(ctx); err == nil {
			t.Fatal("Renew did not report the store's failure")
		}
		if n := ran(); n != 1 {
			t.Fatalf("RunOnce = %d", n)
		}
		if cuts := call.cut(); len(cuts) != 1 || !strings.Contains(cuts[0].Error(), "could not be renewed") {
			t.Fatalf("causes of the cut = %v, want one for the renewal", cuts)
		}
		// Cut short for want of a lease, not by its subscriber: due again at
		// once rather than after the schedule's day.
		h := sinkDelivery(t, ea, "RF-1")
		if h.Status != lapse.DeliveryPending || h.NextAttemptAt.After(clk.Now()) || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeError ||
			!strings.Contains(h.History[0].Error, "could not be renewed") {
			t.Errorf("after the cut: %+v %+v", h.Delivery, h.History)
		}
		faulty.renewFails.Store(false)
		call.release()
		if n, err := da.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("RunOnce after the cut = %d, %v; want the delivery tried again at once", n, err)
		}
		if h := sinkDelivery(t, ea, "RF-1"); h.Status != lapse.DeliveryDone || h.Attempts != 2 {
			t.Errorf("after the retry: %+v", h.Delivery)
		}
		call = newGate(t)
		ea, da = worker(t, s, faulty, clk, "worker-a", call)

		// The lease runs out and another worker takes the delivery: the
		// first worker's next renewal finds it lost and cuts its attempt.
		clk.Set(t0.Add(time.Hour))
		ran = run("RF-2")
		other := &recorder{}
		_, db := worker(t, s, s, clk, "worker-b", plainRecorder{other})
		clk.Advance(10 * time.Second)
		if n, _ := db.RunOnce(ctx); n < 1 {
			t.Fatal("the other worker did not take over the expired lease")
		}
		if err := da.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		ran()
		if cuts := call.cut(); len(cuts) != 1 || !errors.Is(cuts[0], lapse.ErrLeaseLost) {
			t.Errorf("causes of the cuts = %v, want one for the lost lease", cuts)
		}

		// The worker's own lease runs out unrenewed and it claims the
		// delivery again: the earlier attempt is cut, not left running
		// beside the new one.
		clk.Set(t0.Add(2 * time.Hour))
		first := run("RF-3")
		clk.Advance(10 * time.Second)
		second := ranOnce(t, da)
		call.waitEntered(t)
		first()
		if cuts := call.cut(); len(cuts) != 2 || !errors.Is(cuts[1], lapse.ErrLeaseLost) {
			t.Errorf("causes of the cuts = %v, want the second for the lease taken again", cuts)
		}
		call.release()
		if n := second(); n != 1 {
			t.Errorf("the second claim's RunOnce = %d", n)
		}
		if h := sinkDelivery(t, ea, "RF-3"); h.Status != lapse.DeliveryDone || h.Attempts != 2 || len(h.History) != 1 || h.History[0].Attempt != 2 {
			t.Errorf("after the second attempt: %+v %+v", h.Delivery, h.History)
		}
	})
}
