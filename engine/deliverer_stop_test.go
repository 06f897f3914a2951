package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// askingGate is a gate that can be asked: a call cut short had reached the
// subscriber, which applied it, and says so when asked.
type askingGate struct{ *gate }

func (g askingGate) Deliver(ctx context.Context, d *lapse.Delivery) error {
	if err := g.gate.Deliver(ctx, d); err != nil {
		return fmt.Errorf("no answer: %w: %w", lapse.ErrUnknownOutcome, err)
	}
	return nil
}

func (g askingGate) Query(context.Context, *lapse.Delivery) (bool, error) { return true, nil }

// TestDeliveryStopNeverKillsAnAttempt stops a Deliverer (lapse serve's
// SIGTERM) while the last attempt of a delivery's schedule hangs in its
// subscriber. The attempt was cut short by this process, not failed by the
// subscriber: the delivery stays pending, due at once, asked about first
// when its subscriber can be asked, and neither dies nor puts its order in
// review; another worker finishes it without sending it twice.
func TestDeliveryStopNeverKillsAnAttempt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(*gate) lapse.Handler
		unknown bool
	}{
		{"plain", func(g *gate) lapse.Handler { return g }, false},
		{"asking", func(g *gate) lapse.Handler { return askingGate{g} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open func() lapse.Store) {
				clk := lapse.NewManualClock(t0)
				s := open()
				single := lapse.Schedule{Base: time.Minute, MaxAttempts: 1} // the first attempt is the last
				sub := func(h lapse.Handler) engine.Config {
					return engine.Config{Clock: clk, Subscriptions: []engine.Subscription{{
						Name: "sink", Events: []string{lapse.EventOrderCreated}, Handler: h, Timeout: time.Hour, Schedule: single}}}
				}
				hang := newGate(t)
				ea, err := engine.New(s, flows.Builtin(), sub(tc.handler(hang)))
				if err != nil {
					t.Fatal(err)
				}
				da := engine.NewDeliverer(ea, engine.DelivererConfig{Owner: "worker-a", Poll: 10 * time.Millisecond})
				o := create(t, ea, checkout("ST-1", time.Hour))
				da.Start(context.Background())
				hang.waitEntered(t)
				da.Stop()

				h := sinkDelivery(t, ea, "ST-1")
				if h.Status != lapse.DeliveryPending || h.Unknown != tc.unknown || h.NextAttemptAt.After(clk.Now()) {
					t.Fatalf("after the stop: status %s, unknown %v, due %v (now %v); want pending, unknown %v, due now",
						h.Status, h.Unknown, h.NextAttemptAt, clk.Now(), tc.unknown)
				}
				if rs, err := ea.Reviews(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID, Limit: 10}); err != nil || len(rs) != 0 {
					t.Fatalf("reviews of the order after the stop = %+v, %v; want none", rs, err)
				}

				live := &recorder{}
				var next lapse.Handler = plainRecorder{live}
				wantCalls, wantOutcome := 1, lapse.OutcomeOK
				if tc.unknown {
					next = live
					live.applied = map[string]bool{h.EventID: true} // the call cut short had reached it
					wantCalls, wantOutcome = 0, lapse.OutcomeApplied
				}
				eb, err := engine.New(s, flows.Builtin(), sub(next))
				if err != nil {
					t.Fatal(err)
				}
				db := engine.NewDeliverer(eb, engine.DelivererConfig{Owner: "worker-b"})
				if n, err := db.RunOnce(ctxT(t)); n != 1 || err != nil {
					t.Fatalf("RunOnce after the stop = %d, %v; want the delivery taken at once", n, err)
				}
				h = sinkDelivery(t, eb, "ST-1")
				if last := h.History[len(h.History)-1]; h.Status != lapse.DeliveryDone || last.Outcome != wantOutcome || len(live.calls()) != wantCalls {
					t.Errorf("after the takeover: %+v %+v; %d calls, want %d", h.Delivery, h.History, len(live.calls()), wantCalls)
				}
			})
		})
	}
}
