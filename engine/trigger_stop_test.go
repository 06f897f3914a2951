package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// blockNext is a memTrigger whose next Next, once armed, says it was
// entered and waits to be released: the shared trigger's loop is then
// held in a step past its hand-over of the deadlines.
type blockNext struct {
	*memTrigger
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (b *blockNext) Next(ctx context.Context) (time.Time, bool, error) {
	if b.armed.CompareAndSwap(true, false) {
		close(b.entered)
		<-b.release
	}
	return b.memTrigger.Next(ctx)
}

// TestSharedTriggerStopHandsOver: a server shutting down ends the
// claimer's context first and lets its requests finish; a deadline such a
// request sets reaches the shared trigger by the time Stop returns, rather
// than staying in this process's queue while the other processes, their
// precise paths standing back, wait for their sweep.
func TestSharedTriggerStopHandsOver(t *testing.T) {
	t.Parallel()
	mem := newMemTrigger()
	mem.seeded = true
	tr := &blockNext{memTrigger: mem, entered: make(chan struct{}), release: make(chan struct{})}
	e, _ := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	t.Cleanup(c.Stop)
	before := create(t, e, checkout("SO-before", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return mem.has(before.ID) })

	tr.armed.Store(true)
	<-tr.entered // the loop is past its hand-over
	cancel()     // SIGTERM
	late := create(t, e, checkout("SO-late", time.Hour))
	close(tr.release)
	c.Stop()
	if !mem.has(late.ID) {
		t.Errorf("a deadline set while the server shut down did not reach the shared trigger")
	}
}

// TestSharedTriggerFeed: a process that fires no deadlines (StartFeed)
// still hands the deadlines it sets to the shared trigger, and after a
// failure of the trigger seeds it again from the database; it fires
// nothing itself.
func TestSharedTriggerFeed(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, _ := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.StartFeed(context.Background())
	t.Cleanup(c.Stop)

	o := create(t, e, checkout("FE-1", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return tr.has(o.ID) })

	tr.fail(errors.New("redis: i/o timeout"))
	down := create(t, e, checkout("FE-down", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return e.TriggerStatus().Degraded })
	tr.fail(nil)
	waitUntil(t, 30*time.Second, func() bool { return !e.TriggerStatus().Degraded && tr.has(down.ID) })

	// Due at once: handed over, not fired here.
	due := create(t, e, checkout("FE-due", time.Millisecond))
	waitUntil(t, 30*time.Second, func() bool { _, ok := tr.dueAt(due.ID); return ok })
	c.Stop()
	if got, err := e.Order(context.Background(), due.OrderNo); err != nil || got.State != flows.Unpaid {
		t.Errorf("a feeding process fired an order: %+v, %v", got, err)
	}
}

// holdClaim is a store whose next claim of the orders due by from on,
// once armed, says it started and waits to be released.
type holdClaim struct {
	lapse.Store
	from    time.Time
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *holdClaim) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return h.Store.Tx(ctx, func(tx lapse.Store) error { return fn(&holdClaimTx{Store: tx, h: h}) })
}

type holdClaimTx struct {
	lapse.Store
	h *holdClaim
}

func (tx *holdClaimTx) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	if !p.DueBy.Before(tx.h.from) && tx.h.armed.CompareAndSwap(true, false) {
		close(tx.h.entered)
		<-tx.h.release
	}
	return tx.Store.OrderClaimDue(ctx, p)
}

// TestSharedTriggerStopReleasesMembers: a stop cuts short the burn of a
// member's pass before it reached the member's order; the member is handed
// back to the shared trigger due at once, for any process to claim, rather
// than done with its order still open (left to a sweep).
func TestSharedTriggerStopReleasesMembers(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	at := time.Now().Add(-time.Second)
	hold := &holdClaim{Store: openSQLite(t), from: at, entered: make(chan struct{}), release: make(chan struct{})}
	e, err := engine.New(hold, flows.Builtin(), engine.Config{Trigger: tr})
	if err != nil {
		t.Fatal(err)
	}
	// Two orders a batch; the precise path stands back and the sweep
	// fires nothing this test makes.
	c := engine.NewClaimer(e, engine.ClaimerConfig{Batch: 2, MaxSleep: time.Hour, SweepInterval: time.Hour, SweepGrace: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	t.Cleanup(c.Stop)

	// Five orders due at the same time; the trigger holds the last, which
	// the burn reaches only after two full batches.
	nos := insertDue(t, hold.Store, "SR", 5, at)
	last := idOf(t, hold.Store, nos[4])
	hold.armed.Store(true)
	if err := tr.Add(context.Background(), []engine.TriggerDue{{OrderID: last, At: at}}); err != nil {
		t.Fatal(err)
	}
	<-hold.entered // the member's pass claims its first batch
	cancel()       // SIGTERM
	close(hold.release)
	c.Stop()
	o, err := e.Order(context.Background(), nos[4])
	if err != nil {
		t.Fatal(err)
	}
	if o.State != flows.Unpaid {
		t.Fatalf("the cut burn closed the member's order (%s); want it left open", o.State)
	}
	if !tr.has(last) {
		t.Errorf("the member of an order a stop left open is not due in the trigger")
	}
}
