package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestLatePaymentWithoutPort: payment callbacks are taken (a Stripe or
// HMAC secret) but no provider port is configured, so nothing can refund a
// late payment. It must not stay late for good, neither refunded nor on an
// operator's desk (S3): it goes to review, naming why.
func TestLatePaymentWithoutPort(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Merchants: map[string]string{"sandbox": "m-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("NP-1", time.Hour))
		if _, err := e.Fire(ctx, "NP-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if p, err := e.ApplyPayment(ctx, paid(o, "txn-NP-1", clk.Now())); err != nil || p.Status != lapse.PaymentReview {
			t.Fatalf("late payment of a cancelled order with no port to refund it = %+v, %v; want it in review", p, err)
		}
		drain(t, d)
		p, err := e.Store().PaymentGet(ctx, "sandbox", "txn-NP-1")
		if err != nil || p.Status != lapse.PaymentReview || !strings.Contains(p.Reason, "CLOSED") {
			t.Fatalf("late payment with no port to refund it = %+v, %v; want it in review, saying why it was late", p, err)
		}
		if !reviewSays(t, e, "NP-1", "no payment provider port") {
			t.Errorf("no open review of NP-1 says why: %+v", orderReviews(t, e, "NP-1"))
		}
	})
}

// TestRefundPortRemoved: a merchant refund requested while its provider had
// a port, whose port was then taken out of the configuration before the
// refund was asked for, may or may not have reached the provider (an
// attempt whose answer was lost). Lapse cannot ask, so it must not record
// it failed (the order paid again, the money perhaps gone back): the
// refund goes to review, and the order waits, refunding, for an operator.
func TestRefundPortRemoved(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		ctx := ctxT(t)
		with := paymentEngine(t, open(), clk, &fakeProvider{})
		o := create(t, with, checkout("RP-1", time.Hour))
		if p, err := with.ApplyPayment(ctx, paid(o, "txn-RP-1", clk.Now())); err != nil || p.Status != lapse.PaymentApplied {
			t.Fatalf("payment = %+v, %v", p, err)
		}
		if _, _, err := with.RefundOrder(ctx, "RP-1", engine.RefundRequest{Amount: o.Amount, Reason: "customer asked", By: app}); err != nil {
			t.Fatal(err)
		}

		without, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Merchants: map[string]string{"sandbox": "m-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(without, engine.DelivererConfig{}))
		refs, err := without.Store().OrderRefundList(ctx, o.ID)
		if err != nil || len(refs) != 1 {
			t.Fatalf("refunds of RP-1 = %+v, %v", refs, err)
		}
		if refs[0].Status != lapse.OrderRefundReview {
			t.Errorf("refund whose port was removed is %s, want review", refs[0].Status)
		}
		if got, _ := without.Order(ctx, "RP-1"); got.State != flows.Refunding {
			t.Errorf("RP-1 is %s, want it waiting, REFUNDING, for an operator", got.State)
		}
		if !reviewSays(t, without, "RP-1", "no payment provider port") {
			t.Errorf("no open review of RP-1 says why: %+v", orderReviews(t, without, "RP-1"))
		}
	})
}
