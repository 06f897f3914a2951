package engine_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestDeliveryOverrunDies: a delivery whose attempts never end, because
// each worker that claims it dies during the attempt, is claimed again
// after each lease, up to a few times past its schedule, and is attempted
// as usual until then; past that it dies with its review, for a single
// handler and a batch one alike, instead of going round the workers for
// ever.
func TestDeliveryOverrunDies(t *testing.T) {
	t.Parallel()
	clk := lapse.NewManualClock(t0)
	s := openSQLite(t)
	single, batch := &recorder{}, &batchRecorder{}
	one := lapse.Schedule{Steps: []time.Duration{time.Minute}} // 2 attempts
	e := subsEngine(t, s, clk,
		engine.Subscription{Name: "single", Events: []string{"order.closed"}, Handler: plainRecorder{single}, Schedule: one},
		engine.Subscription{Name: "batch", Events: []string{"order.closed"}, Handler: batch, Schedule: one})
	ctx := ctxT(t)
	closed := func(no string) {
		t.Helper()
		create(t, e, checkout(no, time.Hour))
		if _, err := e.Fire(ctx, no, engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
	}
	// crash makes claims that never finish, as workers that die during
	// their attempts do.
	crash := func(times int) {
		t.Helper()
		for range times {
			ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: clk.Now(), Owner: "dying", LeaseUntil: clk.Now().Add(time.Minute),
				Subscribers: []string{"single", "batch"}, Limit: 10})
			if err != nil || len(ds) == 0 {
				t.Fatalf("claim = %d, %v", len(ds), err)
			}
			clk.Advance(time.Minute)
		}
	}
	closed("OD-1")
	crash(1)
	closed("OD-2")
	crash(6) // OD-1's deliveries: claimed 7 times, 5 past the schedule; OD-2's: 6 times
	d := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "live", Lease: time.Minute})
	if n, err := d.RunOnce(ctx); n != 4 || err != nil {
		t.Fatalf("RunOnce = %d, %v; want 4", n, err)
	}
	if len(single.calls()) != 1 || len(batch.received()) != 1 || batch.received()[0].OrderNo != "OD-2" {
		t.Errorf("single got %d events, batch %d; want OD-2's alone, at its 7th claim", len(single.calls()), len(batch.received()))
	}
	for _, c := range []struct {
		no       string
		status   lapse.DeliveryStatus
		attempts int
	}{{"OD-1", lapse.DeliveryDead, 8}, {"OD-2", lapse.DeliveryDone, 7}} {
		for _, sub := range []string{"single", "batch"} {
			h := sinkOf(t, e, c.no, sub, flows.EventOrderClosed)
			if h.Status != c.status || h.Delivery.Attempts != c.attempts {
				t.Errorf("%s to %s: %+v; want %s", c.no, sub, h.Delivery, c.status)
			}
			if c.status == lapse.DeliveryDead && !strings.Contains(h.LastError, "never ended") {
				t.Errorf("%s to %s died of %q", c.no, sub, h.LastError)
			}
		}
	}
	reviews, _ := e.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 10})
	if len(reviews) == 0 || reviews[0].OrderNo != "OD-1" {
		t.Errorf("reviews: %+v; want OD-1's", reviews)
	}
}

// TestDeliveryOverrunHugeSchedule: a schedule of as many attempts as an int
// holds (exp:1s,1h,9223372036854775807, "retry for ever") attempts its
// deliveries; its bound of attempts past the schedule does not overflow
// into one that every delivery has passed at its first claim, which killed
// them all unattempted and put every order in review.
func TestDeliveryOverrunHugeSchedule(t *testing.T) {
	t.Parallel()
	clk := lapse.NewManualClock(t0)
	s := openSQLite(t)
	single, batch := &recorder{}, &batchRecorder{}
	forever := lapse.Schedule{Base: time.Second, Cap: time.Hour, MaxAttempts: math.MaxInt}
	e := subsEngine(t, s, clk,
		engine.Subscription{Name: "single", Events: []string{"order.closed"}, Handler: plainRecorder{single}, Schedule: forever},
		engine.Subscription{Name: "batch", Events: []string{"order.closed"}, Handler: batch, Schedule: forever})
	ctx := ctxT(t)
	create(t, e, checkout("OH-1", time.Hour))
	if _, err := e.Fire(ctx, "OH-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
		t.Fatal(err)
	}
	d := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "live", Lease: time.Minute})
	if n, err := d.RunOnce(ctx); n != 2 || err != nil {
		t.Fatalf("RunOnce = %d, %v; want 2", n, err)
	}
	for _, sub := range []string{"single", "batch"} {
		if h := sinkOf(t, e, "OH-1", sub, flows.EventOrderClosed); h.Status != lapse.DeliveryDone {
			t.Errorf("to %s: %s, %q; want done", sub, h.Status, h.LastError)
		}
	}
	if len(single.calls()) != 1 || len(batch.received()) != 1 {
		t.Errorf("single got %d events, batch %d; want one each", len(single.calls()), len(batch.received()))
	}
}
