package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// waitErr is a subscriber's failure that asks for a wait (lapse.RetryAfter),
// as the webhook sink's 429 with Retry-After does.
type waitErr time.Duration

func (w waitErr) Error() string             { return fmt.Sprintf("HTTP 429, retry after %v", time.Duration(w)) }
func (w waitErr) RetryAfter() time.Duration { return time.Duration(w) }

// asking fails its calls with the waits given, in turn, then takes the event.
type asking struct {
	mu    sync.Mutex
	waits []time.Duration
	got   int
}

func (a *asking) Deliver(context.Context, *lapse.Delivery) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waits) > 0 {
		w := a.waits[0]
		a.waits = a.waits[1:]
		return fmt.Errorf("webhook: deliver: %w", waitErr(w))
	}
	a.got++
	return nil
}

// TestDeliveryRetryAfter: a subscriber that asks to be left alone for a
// while (a 429 with Retry-After) is not sent the event again before then,
// nor after the schedule's longest wait: the schedule alone decided, and a
// receiver that asked for three minutes was sent it again after one, its
// attempts spent while it said it could not take them.
func TestDeliveryRetryAfter(t *testing.T) {
	t.Parallel()
	clk := lapse.NewManualClock(t0)
	sink := &asking{waits: []time.Duration{3 * time.Minute, time.Hour, 10 * time.Second}}
	e, err := engine.New(openSQLite(t), flows.Builtin(), engine.Config{Clock: clk, Subscriptions: []engine.Subscription{
		{Name: "sink", Events: []string{"order.closed"}, Handler: sink,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute, 10 * time.Minute, time.Minute}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := engine.NewDeliverer(e, engine.DelivererConfig{})
	ctx := ctxT(t)
	create(t, e, checkout("RA-1", time.Hour))
	if _, err := e.Fire(ctx, "RA-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
		t.Fatal(err)
	}
	step := func(at time.Duration, want int) {
		t.Helper()
		clk.Set(t0.Add(at))
		if n, err := d.RunOnce(ctx); n != want || err != nil {
			t.Fatalf("RunOnce at +%v = %d, %v; want %d", at, n, err, want)
		}
	}
	step(0, 1)                          // asks for 3m, the schedule 1m: next at +3m
	step(3*time.Minute-time.Second, 0)  // not yet
	step(3*time.Minute, 1)              // asks for 1h, the schedule 10m, its longest: next at +13m
	step(13*time.Minute-time.Second, 0) // not yet
	step(13*time.Minute, 1)             // asks for 10s, the schedule 1m: next at +14m
	step(14*time.Minute-time.Second, 0) // not yet
	step(14*time.Minute, 1)             // taken
	if sink.got != 1 {
		t.Fatalf("the subscriber took %d events, want 1", sink.got)
	}
	hs, err := e.Deliveries(ctx, "RA-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Subscriber == "sink" && (h.Status != lapse.DeliveryDone || len(h.History) != 4) {
			t.Errorf("delivery %+v with %d attempts; want done after 4", h.Delivery, len(h.History))
		}
	}
}
