package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestDeliveryScheduleShrunk: a schedule shortened under pending deliveries
// (a reload, or a restart, with fewer attempts) gives each of them, however
// far past the new length, its next attempt: one that succeeds is done,
// and one that fails dies of having run out of retries, its true reason.
// Each had been claimed past the new schedule's attempts plus the bound of
// attempts that never end, and was killed unattempted "for attempts that
// never ended (their workers died)", which never happened: every attempt
// of it had ended, in a failure recorded.
func TestDeliveryScheduleShrunk(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		long := lapse.Schedule{Steps: []time.Duration{time.Minute, time.Minute, time.Minute, time.Minute, time.Minute,
			time.Minute, time.Minute, time.Minute, time.Minute, time.Minute, time.Minute, time.Minute}} // 13 attempts
		heals := &recorder{fail: 9, err: errors.New("HTTP 503")}
		broken := &recorder{fail: 100, err: errors.New("HTTP 502")}
		e := subsEngine(t, open(), clk,
			engine.Subscription{Name: "heals", Events: []string{"order.closed"}, Handler: plainRecorder{heals}, Schedule: long},
			engine.Subscription{Name: "broken", Events: []string{"order.closed"}, Handler: plainRecorder{broken}, Schedule: long})
		d := engine.NewDeliverer(e, engine.DelivererConfig{Lease: 30 * time.Second})
		ctx := ctxT(t)
		create(t, e, checkout("SS-1", time.Hour))
		if _, err := e.Fire(ctx, "SS-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		for i := range 9 { // 9 attempts of each, each failed and recorded
			clk.Set(t0.Add(time.Duration(i) * time.Minute))
			if n, err := d.RunOnce(ctx); n != 2 || err != nil {
				t.Fatalf("RunOnce %d = %d, %v; want 2", i+1, n, err)
			}
		}
		short := lapse.Schedule{Steps: []time.Duration{time.Minute, time.Minute}} // 3 attempts
		for _, sub := range []string{"heals", "broken"} {
			if err := e.SetSchedule(sub, short); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(9 * time.Minute))
		if n, err := d.RunOnce(ctx); n != 2 || err != nil {
			t.Fatalf("RunOnce under the short schedule = %d, %v; want 2", n, err)
		}
		if got := len(heals.calls()); got != 1 {
			t.Errorf("heals took %d events; want 1, at its 10th attempt", got)
		}
		if h := sinkOf(t, e, "SS-1", "heals", flows.EventOrderClosed); h.Status != lapse.DeliveryDone || h.Delivery.Attempts != 10 {
			t.Errorf("to heals: %s after %d attempts, %q; want done after 10", h.Status, h.Delivery.Attempts, h.LastError)
		}
		h := sinkOf(t, e, "SS-1", "broken", flows.EventOrderClosed)
		if h.Status != lapse.DeliveryDead || h.Delivery.Attempts != 10 || h.LastError != "HTTP 502" || len(h.History) != 10 {
			t.Errorf("to broken: %s after %d attempts (%d recorded), %q; want dead of its 10th attempt's HTTP 502",
				h.Status, h.Delivery.Attempts, len(h.History), h.LastError)
		}
		if broken.fail != 100-10 {
			t.Errorf("broken was sent the event %d times; want 10", 100-broken.fail)
		}
		reviews, _ := e.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 10})
		if len(reviews) != 1 || !strings.Contains(reviews[0].Reason, " to broken ran out of retries after 10 attempts: HTTP 502") ||
			strings.Contains(reviews[0].Reason, "never ended") {
			t.Errorf("reviews: %+v; want broken's, out of retries", reviews)
		}
	})
}

// hangs blocks each call until its context ends, and signals each call it
// takes.
type hangs struct{ entered chan struct{} }

func (h hangs) Deliver(ctx context.Context, _ *lapse.Delivery) error {
	h.entered <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestDeliveryCutShortOverrunDies: attempts cut short every time (the
// worker stops during each) are recorded, yet count as attempts that never
// ended: past the schedule and the bound of those, the delivery dies of
// them, rather than going round the workers for ever.
func TestDeliveryCutShortOverrunDies(t *testing.T) {
	t.Parallel()
	clk := lapse.NewManualClock(t0)
	h := hangs{entered: make(chan struct{})}
	e := subsEngine(t, openSQLite(t), clk,
		engine.Subscription{Name: "hangs", Events: []string{"order.closed"}, Handler: h,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}}) // 2 attempts
	d := engine.NewDeliverer(e, engine.DelivererConfig{})
	create(t, e, checkout("CS-1", time.Hour))
	if _, err := e.Fire(ctxT(t), "CS-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
		t.Fatal(err)
	}
	// 2 within the schedule, 5 past it, each cut short; the 8th claim is
	// not attempted (and were it, it would be cut short too).
	for i := range 8 {
		ctx, stop := context.WithCancel(ctxT(t))
		ran := make(chan struct{})
		go func() {
			select {
			case <-h.entered:
				stop()
			case <-ran:
			}
		}()
		// The claims of other subscribers after the stop fail with it.
		n, err := d.RunOnce(ctx)
		close(ran)
		stop()
		if n != 1 || (err != nil && !errors.Is(err, context.Canceled)) {
			t.Fatalf("RunOnce %d = %d, %v; want 1", i+1, n, err)
		}
	}
	got := sinkOf(t, e, "CS-1", "hangs", flows.EventOrderClosed)
	if got.Status != lapse.DeliveryDead || got.Delivery.Attempts != 8 || !strings.Contains(got.LastError, "its last 7 attempts never ended") {
		t.Errorf("after 7 attempts cut short: %s after %d attempts, %q; want dead at the 8th claim, of attempts that never ended",
			got.Status, got.Delivery.Attempts, got.LastError)
	}
}
