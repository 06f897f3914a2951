package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
)

// unguardedPay is a flow written in YAML that takes payments and forgets
// the before_deadline guard on its PAY. S2 is the engine's, not the flow
// author's: a payment made after the deadline must not pay the order.
const unguardedPay = `
name: unguarded
initial: UNPAID
pays: PAY
states:
  - {name: UNPAID, deadline: {after: 15m, event: TIMEOUT}}
  - {name: PAID, terminal: true}
  - {name: CLOSED, terminal: true}
events:
  - {name: PAY, internal: true}
  - {name: TIMEOUT, internal: true}
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid]}
  - {from: UNPAID, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
`

func TestPaymentPastDeadlineWithoutGuard(t *testing.T) {
	f, err := flowfile.Parse("unguarded.yaml", []byte(unguardedPay))
	if err != nil {
		t.Fatal(err)
	}
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		req := func(no string) *lapse.OrderCreate {
			return &lapse.OrderCreate{OrderNo: no, Flow: "unguarded", UserID: "u1", Amount: 1000, Currency: "CNY",
				TTL: 15 * time.Minute}
		}
		// Paid at the provider after the deadline, reported before the
		// closer came by: late, and the order stays UNPAID for the closer.
		// With no provider port to refund it, a late payment is in review
		// from the start, saying why it was late.
		a := create(t, e, req("UG-1"))
		clk.Advance(20 * time.Minute)
		pay, err := e.ApplyPayment(ctx, paid(a, "ug-1", a.DeadlineAt.Add(time.Second)))
		if err != nil || pay.Status != lapse.PaymentReview || !strings.Contains(pay.Reason, "passed its deadline") {
			t.Fatalf("a payment past the deadline = %+v, %v; want it in review, saying it was late", pay, err)
		}
		if o, _ := e.Order(ctx, "UG-1"); o.State != "UNPAID" {
			t.Errorf("a payment past the deadline moved UG-1 to %s", o.State)
		}
		// A notice without a provider time is judged at now: past the
		// deadline, late.
		z := create(t, e, req("UG-0"))
		clk.Advance(20 * time.Minute)
		pay, err = e.ApplyPayment(ctx, paid(z, "ug-0", time.Time{}))
		if err != nil || pay.Status != lapse.PaymentReview || !strings.Contains(pay.Reason, "passed its deadline") {
			t.Fatalf("a payment without a time, past the deadline = %+v, %v; want it in review, as late", pay, err)
		}
		// Made in time, reported late: applied, by the provider's clock.
		b := create(t, e, req("UG-2"))
		clk.Advance(20 * time.Minute)
		pay, err = e.ApplyPayment(ctx, paid(b, "ug-2", b.DeadlineAt.Add(-time.Second)))
		if err != nil || pay.Status != lapse.PaymentApplied {
			t.Fatalf("a payment in time = %+v, %v; want applied", pay, err)
		}
	})
}
