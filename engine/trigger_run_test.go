package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// manualTriggerEngine is an engine on a fresh SQLite store with the shared
// trigger tr and a manual clock, and a Claimer that is never started.
func manualTriggerEngine(t *testing.T, tr engine.SharedTrigger) (*engine.Engine, lapse.Store, *lapse.ManualClock, *engine.Claimer) {
	t.Helper()
	s := openSQLite(t)
	clock := lapse.NewManualClock(time.Now())
	e, err := engine.New(s, flows.Builtin(), engine.Config{Trigger: tr, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e, s, clock, engine.NewClaimer(e, engine.ClaimerConfig{Batch: 2})
}

func runTrigger(t *testing.T, c *engine.Claimer, want int) {
	t.Helper()
	n, err := c.RunTriggerOnce(context.Background())
	if err != nil || n != want {
		t.Fatalf("RunTriggerOnce = %d, %v; want %d, nil", n, err, want)
	}
}

// closings counts the transitions of each order into CLOSED.
func closings(t *testing.T, s lapse.Store, nos []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, no := range nos {
		log, err := s.TransitionList(context.Background(), idOf(t, s, no))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range log {
			if r.ToState == flows.Closed {
				out[no]++
			}
		}
	}
	return out
}

// TestRunTriggerOnceLostData: RunTriggerOnce hands the deadlines this
// engine set to the shared trigger; once the trigger has lost its data, the
// next call seeds it from the database (orders set by other processes
// included) and fires what is due in the same call, through path redis,
// each order once.
func TestRunTriggerOnceLostData(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, s, clock, c := manualTriggerEngine(t, tr)
	local := create(t, e, checkout("RT-local", 2*time.Minute))
	others := insertDue(t, s, "RT", 3, clock.Now().Add(time.Minute)) // another process's: the trigger never heard of them
	runTrigger(t, c, 0)
	if !tr.has(local.ID) || tr.has(idOf(t, s, others[0])) {
		t.Fatalf("after a first call the trigger holds local %v, another process's %v; want true, false",
			tr.has(local.ID), tr.has(idOf(t, s, others[0])))
	}

	tr.flush()
	clock.Advance(90 * time.Second)
	runTrigger(t, c, 3) // seeded, then claimed, in two batches of 2
	tr.mu.Lock()
	seeds := tr.seeds
	tr.mu.Unlock()
	if seeds != 1 || !tr.has(local.ID) {
		t.Errorf("seeded %d times, local order in the trigger %v; want 1, true", seeds, tr.has(local.ID))
	}
	if got := firedBy(t, e, others); got[lapse.FiredByRedis] != 3 {
		t.Errorf("another process's orders fired by %v, want 3 by redis", got)
	}
	runTrigger(t, c, 0)

	clock.Advance(time.Minute)
	runTrigger(t, c, 1)
	runTrigger(t, c, 0)
	all := append([]string{local.OrderNo}, others...)
	for no, n := range closings(t, s, all) {
		if n != 1 {
			t.Errorf("%s closed %d times", no, n)
		}
	}
	if got := firedBy(t, e, all); got[lapse.FiredByRedis] != 4 {
		t.Errorf("fired by %v, want 4 by redis", got)
	}
}

// TestRunTriggerOnceDegrades: a trigger that fails degrades at once and
// RunTriggerOnce says so; the database fires meanwhile. Once it answers, the
// next call seeds it with what was set during the outage and it is in
// charge again.
func TestRunTriggerOnceDegrades(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, _, clock, c := manualTriggerEngine(t, tr)
	down := errors.New("redis: connection refused")
	tr.fail(down)
	if _, err := c.RunTriggerOnce(context.Background()); !errors.Is(err, down) {
		t.Fatalf("RunTriggerOnce on a failing trigger = %v", err)
	}
	if st := e.TriggerStatus(); !st.Degraded || st.Using != "database" {
		t.Fatalf("status %+v, want degraded, using the database", st)
	}
	o := create(t, e, checkout("RD-1", time.Minute))
	clock.Advance(2 * time.Minute)
	if _, err := c.RunTriggerOnce(context.Background()); !errors.Is(err, down) {
		t.Fatalf("RunTriggerOnce while down = %v", err)
	}
	if n, err := c.RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("RunOnce while degraded = %d, %v; want 1, nil", n, err)
	}

	later := create(t, e, checkout("RD-2", time.Minute)) // set while degraded: not queued for the trigger
	tr.fail(nil)
	runTrigger(t, c, 0)
	if st := e.TriggerStatus(); st.Degraded || st.Using != "redis" {
		t.Fatalf("status %+v once the trigger answers, want redis", st)
	}
	if !tr.has(later.ID) {
		t.Fatal("the deadline set during the outage was not seeded")
	}
	clock.Advance(2 * time.Minute)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, []string{o.OrderNo, later.OrderNo}); got[lapse.FiredByTimer] != 1 || got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want one by timer (degraded), one by redis", got)
	}
}

// addHook is a SharedTrigger that runs hook once, before the first Add it
// is asked for.
type addHook struct {
	*memTrigger
	hook func()
}

func (h *addHook) Add(ctx context.Context, due []engine.TriggerDue) error {
	if f := h.hook; f != nil {
		h.hook = nil
		f()
	}
	return h.memTrigger.Add(ctx, due)
}

// TestRunTriggerOnceDeadlineSetWhileSeeding: an order created while the
// trigger is being seeded, after the seed read the database, still reaches
// the trigger, which fires it on time (path redis); the precise path stands
// back once the trigger is in charge, so without it only the sweep would.
func TestRunTriggerOnceDeadlineSetWhileSeeding(t *testing.T) {
	t.Parallel()
	tr := &addHook{memTrigger: newMemTrigger()} // unseeded: a fresh Redis
	e, s, clock, c := manualTriggerEngine(t, tr)
	insertDue(t, s, "SW", 3, clock.Now().Add(time.Hour))
	var during *lapse.Order
	tr.hook = func() { during = create(t, e, checkout("SW-during", time.Minute)) }
	runTrigger(t, c, 0)
	if during == nil || !tr.has(during.ID) {
		t.Fatal("the deadline set while the trigger was being seeded did not reach it")
	}
	clock.Advance(2 * time.Minute)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, []string{during.OrderNo}); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis", got)
	}
}

// TestRunTriggerOnceLostWhileSeeding: a trigger that loses its data (a
// flush, a restart without persistence) while it is being seeded is not
// marked seeded without the deadlines it lost: the seed fails, the trigger
// degrades, and it is seeded again before it is in charge, so that the
// orders are fired through it, not left to the sweep.
func TestRunTriggerOnceLostWhileSeeding(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	lost := false
	tr.onAdd = func(m *memTrigger) { // the first Add of the seed is lost right after it
		if !lost {
			lost = true
			m.flushLocked()
		}
	}
	e, s, clock, c := manualTriggerEngine(t, tr)
	nos := insertDue(t, s, "RS", 3, clock.Now().Add(time.Minute))
	for range 3 {
		if _, err := c.RunTriggerOnce(context.Background()); err == nil {
			break
		}
		clock.Advance(time.Second)
	}
	if !lost {
		t.Fatal("the seed added nothing")
	}
	if st := e.TriggerStatus(); st.Using != string(engine.TriggerShared) {
		t.Fatalf("the trigger is not in charge: %+v", st)
	}
	for _, no := range nos {
		if !tr.has(idOf(t, s, no)) {
			t.Errorf("the trigger is in charge without the deadline of %s, lost while it was being seeded", no)
		}
	}
	clock.Advance(90 * time.Second)
	runTrigger(t, c, 3)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 3 {
		t.Errorf("fired by %v, want 3 by redis", got)
	}
}

// TestRunTriggerOnceDroppedWhileSeeding: a deadline set while the trigger
// is being seeded, after the seed read past it, finds the queue full and is
// dropped; the seed that ends then does not put the trigger in charge
// without it: it is seeded again, and the order reaches it.
func TestRunTriggerOnceDroppedWhileSeeding(t *testing.T) {
	t.Parallel()
	tr := &addHook{memTrigger: newMemTrigger()} // unseeded: a fresh Redis
	e, s, clock, c := manualTriggerEngine(t, tr)
	insertDue(t, s, "DS", 3, clock.Now().Add(time.Hour))
	var during *lapse.Order
	tr.hook = func() {
		e.FillTriggerQueue()
		during = create(t, e, checkout("DS-during", time.Minute))
	}
	for range 3 {
		if _, err := c.RunTriggerOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if during == nil || !tr.has(during.ID) {
		t.Fatal("the deadline dropped while the trigger was being seeded never reached it")
	}
	if st := e.TriggerStatus(); st.Using != "redis" {
		t.Errorf("status %+v; want the trigger in charge", st)
	}
}

// TestRunTriggerOnceMemberBehindItsOrder: the trigger holds an earlier
// time for an order than the database (another process moved the deadline
// later, and a seed's page read before the move was added after it). The
// member claimed at that time is put back at the order's deadline rather
// than forgotten, and fires the order when it comes (path redis), not the
// sweep.
func TestRunTriggerOnceMemberBehindItsOrder(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, s, clock, c := manualTriggerEngine(t, tr)
	nos := insertDue(t, s, "MB", 1, clock.Now().Add(time.Hour))
	o, err := e.Order(context.Background(), nos[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Add(context.Background(), []engine.TriggerDue{{OrderID: o.ID, At: clock.Now().Add(-time.Second)}}); err != nil {
		t.Fatal(err)
	}
	runTrigger(t, c, 0)
	if at, ok := tr.dueAt(o.ID); !ok || !at.Equal(*o.DeadlineAt) {
		t.Fatalf("the member claimed early is due at %v, %v; want its order's deadline %v", at, ok, *o.DeadlineAt)
	}
	clock.Advance(time.Hour + time.Second)
	runTrigger(t, c, 1)
	if got := firedBy(t, e, nos); got[lapse.FiredByRedis] != 1 {
		t.Errorf("fired by %v, want redis", got)
	}
}
