package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// TestBurnsHold pins the bookkeeping of burns: overlapping burns hold from
// the start of the first, for at most the bound, and nothing holds once
// they have ended or with no bound.
func TestBurnsHold(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	var b burns
	if b.holds(t0, time.Minute) {
		t.Fatal("holds with no burn running")
	}
	end1 := b.begin(t0)
	end2 := b.begin(t0.Add(30 * time.Second))
	switch {
	case !b.holds(t0.Add(59*time.Second), time.Minute):
		t.Fatal("two burns, 59 s after the first began: does not hold; want it to, for a minute from the first")
	case b.holds(t0.Add(time.Minute), time.Minute):
		t.Fatal("a minute after the first burn began: holds; want the bound counted from the first")
	case b.holds(t0, -1):
		t.Fatal("holds with a negative bound; want never")
	}
	end1()
	end1() // an end twice is one end
	if !b.holds(t0.Add(40*time.Second), time.Minute) {
		t.Fatal("the second burn still runs: does not hold")
	}
	end2()
	if b.holds(t0.Add(40*time.Second), time.Minute) {
		t.Fatal("holds once every burn has ended")
	}
	b.begin(t0.Add(2 * time.Minute))
	if !b.holds(t0.Add(2*time.Minute+59*time.Second), time.Minute) {
		t.Fatal("a new burn does not hold for its own minute")
	}
}

// holdRecording records, at each claim, whether the burns then held.
type holdRecording struct {
	lapse.Store
	e     *Engine
	mu    sync.Mutex
	holds []bool
}

func (s *holdRecording) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(&holdRecordingTx{Store: tx, rec: s}) })
}

type holdRecordingTx struct {
	lapse.Store
	rec *holdRecording
}

func (s *holdRecordingTx) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	s.rec.mu.Lock()
	s.rec.holds = append(s.rec.holds, s.rec.e.burns.holds(s.rec.e.clock.Now(), time.Minute))
	s.rec.mu.Unlock()
	return s.Store.OrderClaimDue(ctx, p)
}

// TestBacklogBurnHolds pins when the Claimer's burns hold the streams
// back: from the first claim that comes back full until the burn ends, and
// not for a claim that finds less than a batch.
func TestBacklogBurnHolds(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, _, _ := lookEngines(t, clk)
	rec := &holdRecording{Store: e.work, e: e}
	e.work = rec
	ctx := context.Background()
	for i := range 25 {
		lookCreate(t, e, fmt.Sprintf("H-%02d", i), 10*time.Second)
	}
	clk.Set(t0.Add(time.Minute))
	c := NewClaimer(e, ClaimerConfig{Batch: 10, Workers: 1})
	if n, err := c.RunOnce(ctx); err != nil || n != 25 {
		t.Fatalf("RunOnce = %d, %v; want 25 closed", n, err)
	}
	if fmt.Sprint(rec.holds) != "[false true true]" || e.burns.holds(clk.Now(), time.Minute) {
		t.Fatalf("a backlog of 25 in claims of 10: held at each claim %v, after the burn %v; want [false true true], then not",
			rec.holds, e.burns.holds(clk.Now(), time.Minute))
	}
	rec.holds = nil
	for i := range 5 {
		lookCreate(t, e, fmt.Sprintf("S-%02d", i), 10*time.Second)
	}
	clk.Set(t0.Add(2 * time.Minute))
	if n, err := c.RunOnce(ctx); err != nil || n != 5 {
		t.Fatalf("RunOnce = %d, %v; want 5 closed", n, err)
	}
	if fmt.Sprint(rec.holds) != "[false]" {
		t.Fatalf("5 due in claims of 10: held at each claim %v; want [false]", rec.holds)
	}
}

// seenOrders is a subscriber that reports the order of each delivery.
type seenOrders chan string

func (s seenOrders) Deliver(_ context.Context, d *lapse.Delivery) error {
	s <- d.OrderNo
	return nil
}

// TestStreamsYieldToCloses pins the Deliverer's side: while a burn runs, a
// subscription that yields to closes claims nothing and one that does not
// delivers; the stream follows once the burn ends, or once the burn has
// run for CloseHold; lapse_delivery_held_seconds_total counts the time the
// stream was held, by the engine's clock, and none for the effect.
func TestStreamsYieldToCloses(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "lapse.db"))
	stream, effect := make(seenOrders, 10), make(seenOrders, 10)
	reg := prometheus.NewRegistry()
	e, err := New(s, flows.Builtin(), Config{Clock: clk, Registerer: reg, Subscriptions: []Subscription{
		{Name: "stream", Handler: stream, Events: []string{flows.EventOrderClosed}, YieldsToCloses: true},
		{Name: "effect", Handler: effect, Events: []string{flows.EventOrderClosed}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := NewClaimer(e, ClaimerConfig{})
	d := NewDeliverer(e, DelivererConfig{Poll: 20 * time.Millisecond})
	dctx, stop := context.WithCancel(ctx)
	defer d.Stop()
	defer stop()
	d.Start(dctx)

	// closeHeld closes orderNo while a burn runs, and checks that only the
	// effect has its event.
	closeHeld := func(orderNo string) (end func()) {
		t.Helper()
		lookCreate(t, e, orderNo, 10*time.Second)
		clk.Advance(time.Minute)
		end = e.burns.begin(clk.Now())
		if n, err := c.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("RunOnce = %d, %v; want %s closed", n, err, orderNo)
		}
		got(t, effect, orderNo)
		select {
		case no := <-stream:
			t.Fatalf("the stream had %s's close during a burn; want it held", no)
		case <-time.After(300 * time.Millisecond):
		}
		return end
	}
	end := closeHeld("Y-1")
	end()
	got(t, stream, "Y-1")

	heldSeconds := func(sub string) float64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				if f.GetName() == "lapse_delivery_held_seconds_total" && m.GetLabel()[0].GetValue() == sub {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no lapse_delivery_held_seconds_total{subscriber=%s}", sub)
		return 0
	}
	if h := heldSeconds("stream"); h != 0 {
		t.Fatalf("held for a burn that took no time on the engine's clock: %v s counted; want 0", h)
	}

	end = closeHeld("Y-2")
	defer end()
	clk.Advance(defaultCloseHold) // the burn has run for CloseHold
	got(t, stream, "Y-2")
	if h, want := heldSeconds("stream"), defaultCloseHold.Seconds(); h != want {
		t.Fatalf("lapse_delivery_held_seconds_total{subscriber=stream} = %v; want %v, the hold's length", h, want)
	}
	if h := heldSeconds("effect"); h != 0 {
		t.Fatalf("lapse_delivery_held_seconds_total{subscriber=effect} = %v; want 0, it does not yield", h)
	}
}

// got waits for the delivery of orderNo's event to sub.
func got(t *testing.T, sub seenOrders, orderNo string) {
	t.Helper()
	select {
	case no := <-sub:
		if no != orderNo {
			t.Fatalf("delivered %s; want %s", no, orderNo)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s's close was not delivered", orderNo)
	}
}
