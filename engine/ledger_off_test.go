package engine_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// switchedEngine returns an engine over s with the built-in ledgers on or
// off, the sandbox provider's payments, and its log in buf.
func switchedEngine(t *testing.T, s lapse.Store, clk lapse.Clock, on bool, buf *bytes.Buffer) *engine.Engine {
	t.Helper()
	cfg := engine.Config{Clock: clk, StockLedger: on, CouponLedger: on,
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &fakeProvider{}}, Merchants: map[string]string{"sandbox": "m-1"}}}
	if buf != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(buf, nil))
	}
	e, err := engine.New(s, flows.Builtin(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestLedgerOffGivesBackHolds: switching the ledgers off means that new
// orders hold nothing, never that what orders already hold is forgotten
// (S4). Orders created with the ledgers on, and still holding, give their
// stock and coupons back when they close and use them up when they are
// paid under an engine that has the ledgers off; and a release that was
// due before the switch is still made.
func TestLedgerOffGivesBackHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		s := open()
		clk := lapse.NewManualClock(t0)

		// Under the ledgers: A and B hold until they lapse or are paid; C
		// closes at once, its release still waiting for a deliverer.
		on := switchedEngine(t, s, clk, true, nil)
		if _, err := on.SetStock(ctx, "tea", 10); err != nil {
			t.Fatal(err)
		}
		for _, code := range []string{"CA", "CB", "CC"} {
			if _, err := on.CreateCoupon(ctx, code); err != nil {
				t.Fatal(err)
			}
		}
		hold := func(e *engine.Engine, no, coupon string, qty int64, ttl time.Duration) *lapse.Order {
			req := checkout(no, ttl)
			req.Items, req.Coupon = []lapse.Item{{SKU: "tea", Qty: qty}}, coupon
			return create(t, e, req)
		}
		hold(on, "A", "CA", 2, 15*time.Minute)
		b := hold(on, "B", "CB", 3, time.Hour)
		hold(on, "C", "CC", 1, 15*time.Minute)
		if _, err := on.Fire(ctx, "C", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}

		stock := func(when string, onHand, reserved int64) {
			t.Helper()
			st, err := s.StockGet(ctx, "tea")
			if err != nil {
				t.Fatal(err)
			}
			if st.OnHand != onHand || st.Reserved != reserved {
				t.Errorf("%s: tea %d on hand, %d reserved; want %d, %d", when, st.OnHand, st.Reserved, onHand, reserved)
			}
		}
		coupon := func(when, code string, status lapse.CouponStatus, holder string) {
			t.Helper()
			c, err := s.CouponGet(ctx, code)
			if err != nil {
				t.Fatal(err)
			}
			if c.Status != status || c.OrderNo != holder {
				t.Errorf("%s: coupon %s %s by %q; want %s by %q", when, code, c.Status, c.OrderNo, status, holder)
			}
		}
		stock("held", 10, 6)

		// The process stops; one starts with the ledgers off.
		var log bytes.Buffer
		off := switchedEngine(t, s, clk, false, &log)
		for _, want := range []string{"stock", "coupon", "given back"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("the start's log does not say %q about what orders hold:\n%s", want, log.String())
			}
		}
		d := engine.NewDeliverer(off, engine.DelivererConfig{})
		drain(t, d)
		stock("C's release delivered", 10, 5)
		coupon("C's release delivered", "CC", lapse.CouponAvailable, "")

		// Off means no new holds: D reserves and locks nothing, and its
		// close gives back nothing of what others hold.
		hold(off, "D", "CB", 100, 15*time.Minute)
		stock("D created", 10, 5)
		coupon("D created", "CB", lapse.CouponLocked, "B")

		// A's deadline passes.
		clk.Set(t0.Add(16 * time.Minute))
		c := engine.NewClaimer(off, engine.ClaimerConfig{})
		if fired, err := c.RunOnce(ctx); err != nil || fired != 2 {
			t.Fatalf("RunOnce = %d, %v; want A and D closed", fired, err)
		}
		drain(t, d)
		stock("A closed", 10, 3)
		coupon("A closed", "CA", lapse.CouponAvailable, "")
		coupon("D closed", "CB", lapse.CouponLocked, "B")

		// B, whose deadline is an hour away, is paid.
		if _, err := off.ApplyPayment(ctx, paid(b, "txn-b", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		stock("B paid", 7, 0)
		coupon("B paid", "CB", lapse.CouponUsed, "B")
	})
}

// TestLedgerOffNothingHeld: with the ledgers off and nothing held, the
// engine keeps no ledger subscription, so that the orders of those who
// never used the ledgers get no deliveries for them; with only stock held,
// only the stock subscription stays.
func TestLedgerOffNothingHeld(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		s := open()
		clk := lapse.NewManualClock(t0)
		names := func(e *engine.Engine) []string {
			var out []string
			for _, sub := range e.Subscriptions() {
				out = append(out, sub.Name)
			}
			return out
		}
		var log bytes.Buffer
		off := switchedEngine(t, s, clk, false, &log)
		if got := names(off); slices.Contains(got, engine.StockSubscriber) || slices.Contains(got, engine.CouponSubscriber) {
			t.Errorf("nothing held, ledgers off: subscriptions %v", got)
		}
		if strings.Contains(log.String(), "given back") {
			t.Errorf("nothing held, yet the start warns:\n%s", log.String())
		}

		on := switchedEngine(t, s, clk, true, nil)
		if _, err := on.SetStock(ctx, "tea", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := on.CreateCoupon(ctx, "FREE"); err != nil {
			t.Fatal(err)
		}
		create(t, on, checkout("E", 15*time.Minute))
		off = switchedEngine(t, s, clk, false, nil)
		if got := names(off); !slices.Contains(got, engine.StockSubscriber) || slices.Contains(got, engine.CouponSubscriber) {
			t.Errorf("stock held, no coupon locked, ledgers off: subscriptions %v; want stock's, not coupon's", got)
		}
	})
}

// countFails is a store that cannot say what the ledgers hold.
type countFails struct{ lapse.Store }

func (countFails) StockCountReserved(context.Context) (int64, error) {
	return 0, errors.New("test: stock count refused")
}

func (countFails) CouponCountLocked(context.Context) (int64, error) {
	return 0, errors.New("test: coupon count refused")
}

// TestLedgerOffCannotTell: when the store cannot say whether orders still
// hold what the ledgers gave them, an engine with the ledgers off keeps
// their subscriptions and says why: a delivery with nothing to give back
// costs a row, a hold never given back breaks S4.
func TestLedgerOffCannotTell(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		var log bytes.Buffer
		e := switchedEngine(t, countFails{open()}, lapse.NewManualClock(t0), false, &log)
		var names []string
		for _, sub := range e.Subscriptions() {
			names = append(names, sub.Name)
		}
		if !slices.Contains(names, engine.StockSubscriber) || !slices.Contains(names, engine.CouponSubscriber) {
			t.Errorf("the store cannot say what is held, ledgers off: subscriptions %v; want the ledgers' kept", names)
		}
		for _, want := range []string{"stock count refused", "coupon count refused"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("the start's log does not say %q:\n%s", want, log.String())
			}
		}
	})
}
