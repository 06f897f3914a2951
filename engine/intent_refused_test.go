package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestIntentCloseRefusedForGood: a provider that refuses for good
// (lapse.ErrRefused, a 4xx) to close the payment a customer started is not
// asked again every askRetry for ever, the order left UNPAID past its
// PayBy: the deadline fires, an open review carries the provider's reason,
// and a payment that arrives after is late, never applied to the CLOSED
// order (S2).
func TestIntentCloseRefusedForGood(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{closeErr: fmt.Errorf("fake: 400 order_not_closable: %w", lapse.ErrRefused)}
		e := paymentEngine(t, open(), clk, prov)
		ctx := ctxT(t)
		o := create(t, e, checkout("IR-1", time.Minute))
		if _, err := e.StartPayment(ctx, "IR-1", "sandbox", app); err != nil {
			t.Fatal(err)
		}
		c := engine.NewClaimer(e, engine.ClaimerConfig{})
		clk.Set(t0.Add(time.Hour)) // past the deadline and its grace
		if _, err := c.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		for range 3 { // well past askRetry: nothing is asked again
			clk.Advance(time.Hour)
			if _, err := c.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		prov.mu.Lock()
		asked := prov.closes
		prov.mu.Unlock()
		if asked != 1 {
			t.Errorf("the provider was asked to close %d times after refusing for good; want 1", asked)
		}
		got, err := e.Order(ctx, "IR-1")
		if err != nil || got.State != flows.Closed {
			t.Fatalf("IR-1 after its provider refused the close for good: %+v, %v; want CLOSED by its deadline", got, err)
		}
		rs, err := e.Store().ReviewList(ctx, &lapse.ReviewListParams{OrderID: got.ID, Open: true})
		if err != nil || len(rs) != 1 || !strings.Contains(rs[0].Reason, "order_not_closable") {
			t.Errorf("open reviews of IR-1 = %+v, %v; want one with the provider's reason", rs, err)
		}
		late, err := e.ApplyPayment(ctx, paid(o, "txn-ir1", clk.Now()))
		if err != nil || late.Status != lapse.PaymentLate {
			t.Errorf("payment after the refused close = %+v, %v; want late", late, err)
		}
		if got, _ := e.Order(ctx, "IR-1"); got.State != flows.Closed {
			t.Errorf("IR-1 is %s after a late payment; want CLOSED (S2)", got.State)
		}
	})
}
