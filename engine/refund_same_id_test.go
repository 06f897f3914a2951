package engine_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestRefundReportOfAnotherRefund: a provider whose answer about a merchant
// refund is the answer about another refund of the same payment, for the
// same amount (a gateway that takes a second refund of the same amount for
// the first one again, or an adapter that mixes two keys up), reports one
// refund: its refund id is the one Lapse recorded for the first. It must
// not complete the second, which would count money gone back twice that
// went back once (S3), whether it answers the refund or the query-back
// after a lost answer, or says it is still processing. The second refund is in review naming the refund id,
// the order waits REFUNDING, and reconcile counts one refund.
func TestRefundReportOfAnotherRefund(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{lose: map[string]bool{}}
		prov.answer = func(r *lapse.RefundRequest, ref *lapse.ProviderRefund) {
			if r.IdempotencyKey == "k-"+r.OrderNo+"-2" {
				ref.RefundID = "re-k-" + r.OrderNo + "-1" // the first refund's
				if r.OrderNo == "RS-3" {
					ref.Status = lapse.RefundProcessing
				}
			}
		}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		for _, no := range []string{"RS-1", "RS-2", "RS-3"} {
			o := create(t, e, checkout(no, time.Hour))
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: 300, Reason: "damaged", Key: "k-" + no + "-1", By: app}); err != nil {
				t.Fatal(err)
			}
			drain(t, d)
			if o, _ := e.Order(ctx, no); o.State != flows.Paid {
				t.Fatalf("%s after its first refund is %s, want PAID", no, o.State)
			}
		}
		prov.mu.Lock()
		prov.lose["RS-2"] = true // RS-2's second answer is lost: asked after
		prov.mu.Unlock()
		for _, no := range []string{"RS-1", "RS-2", "RS-3"} {
			if _, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: 300, Reason: "damaged again", Key: "k-" + no + "-2", By: app}); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, d)
		clk.Advance(2 * time.Minute)
		drain(t, d)
		for _, no := range []string{"RS-1", "RS-2", "RS-3"} {
			o, _ := e.Order(ctx, no)
			rs, _ := e.OrderRefunds(ctx, no)
			if len(rs) != 2 || rs[0].Status != lapse.OrderRefundSucceeded || rs[1].Status != lapse.OrderRefundReview {
				t.Errorf("%s's refunds = %+v; want the first succeeded, the second in review", no, rs)
			}
			if o.State != flows.Refunding {
				t.Errorf("%s is %s, want REFUNDING while its second refund is in review", no, o.State)
			}
			if !reviewSays(t, e, no, "re-k-"+no+"-1") {
				t.Errorf("no open review of %s names the refund id reported twice: %+v", no, orderReviews(t, e, no))
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; tot.Refunded != 900 {
			t.Errorf("totals %+v; want 9.00 CNY refunded (one refund of each order)", tot)
		}
	})
}
