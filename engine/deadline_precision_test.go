package engine_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestDeadlineFinerThanKept: a deadline given finer than the microsecond a
// store keeps (deadline_at with nanoseconds, a ttl or extend_by of 1.5µs)
// is kept rounded up, never down: the order does not close before the time
// its caller named, and a payment made before that time, by a provider
// that reports nanoseconds, is applied rather than refunded as late.
func TestDeadlineFinerThanKept(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		ctx := ctxT(t)
		asked := t0.Add(10*time.Minute + 500*time.Nanosecond)
		req := func(no string) *lapse.OrderCreate {
			return &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: "u1", Amount: 1000, Currency: "CNY", DeadlineAt: &asked}
		}
		a := create(t, e, req("DP-1"))
		if want := t0.Add(10*time.Minute + time.Microsecond); !a.DeadlineAt.Equal(want) {
			t.Errorf("deadline_at %s kept as %s; want %s, rounded up", asked.Format(time.RFC3339Nano),
				a.DeadlineAt.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
		}
		if o, created, err := e.CreateOrder(ctx, req("DP-1"), app); err != nil || created || o.ID != a.ID {
			t.Errorf("the same request again = %+v, created %v, %v; want the order", o, created, err)
		}

		// Nothing closes before the deadline asked for.
		create(t, e, req("DP-2"))
		clk.Set(asked) // t0+10m, the microsecond below it
		c := engine.NewClaimer(e, engine.ClaimerConfig{})
		if _, err := c.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		for _, no := range []string{"DP-1", "DP-2"} {
			if o, _ := e.Order(ctx, no); o.State != flows.Unpaid {
				t.Errorf("at %s, before its deadline_at %s, %s is %s", clk.Now().Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano), no, o.State)
			}
		}
		// Paid 200 ns before the deadline asked for: in time.
		if p, err := e.ApplyPayment(ctx, paid(a, "dp-1", asked.Add(-200*time.Nanosecond))); err != nil || p.Status != lapse.PaymentApplied {
			t.Errorf("a payment before deadline_at = %+v, %v; want applied", p, err)
		}

		// A move to a time with nanoseconds, and an extension of 1.5µs,
		// keep no less than asked either.
		to := t0.Add(20*time.Minute + 1*time.Nanosecond)
		o, _, err := e.SetDeadline(ctx, "DP-2", engine.DeadlineChange{At: &to, Reason: "r", By: app})
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(20*time.Minute + time.Microsecond); !o.DeadlineAt.Equal(want) {
			t.Errorf("SetDeadline(%s) = %v, %v; want %s", to.Format(time.RFC3339Nano), o.DeadlineAt, err, want.Format(time.RFC3339Nano))
		}
		o, _, err = e.SetDeadline(ctx, "DP-2", engine.DeadlineChange{ExtendBy: 1500 * time.Nanosecond, Reason: "r", By: app})
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(20*time.Minute + 3*time.Microsecond); !o.DeadlineAt.Equal(want) {
			t.Errorf("extend_by 1.5µs = %v, %v; want %s", o.DeadlineAt, err, want.Format(time.RFC3339Nano))
		}
		ttl := create(t, e, &lapse.OrderCreate{OrderNo: "DP-3", Flow: "checkout", UserID: "u1", Amount: 1000, Currency: "CNY",
			TTL: time.Minute + 1500*time.Nanosecond})
		if want := clk.Now().Add(time.Minute + 2*time.Microsecond); !ttl.DeadlineAt.Equal(want) {
			t.Errorf("ttl 1m1.5µs from %s = %s; want %s", clk.Now().Format(time.RFC3339Nano), ttl.DeadlineAt.Format(time.RFC3339Nano),
				want.Format(time.RFC3339Nano))
		}
	})
}
