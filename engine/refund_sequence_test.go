package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestRefundAfterRefundWaitsForNoRetry: a merchant refunds part of an order,
// the refund's callback settles it (the order is paid again) before the
// refund subscriber has the provider's answer, and the merchant refunds
// another part at once. The first refund's delivery found the second
// requested when it settled, failed ("still has refunds waiting") and
// waited for its retry, a minute, and the second refund's delivery, which
// comes after it, waited with it. The second refund has a delivery of its
// own: the first is done once its own refund is answered.
func TestRefundAfterRefundWaitsForNoRetry(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RS-1", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-rs1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		var once sync.Once
		prov.answer = func(r *lapse.RefundRequest, ref *lapse.ProviderRefund) {
			ref.RefundID = r.IdempotencyKey
			if r.IdempotencyKey != "k1" {
				return
			}
			once.Do(func() {
				n := paid(o, "txn-rs1", clk.Now())
				n.Kind, n.RefundID, n.Amount = lapse.NoticeRefunded, "k1", 300
				if _, err := e.ApplyPayment(ctx, n); err != nil {
					t.Errorf("the callback of refund k1: %v", err)
				}
				if _, _, err := e.RefundOrder(ctx, "RS-1", engine.RefundRequest{Amount: 200, Key: "k2", By: app}); err != nil {
					t.Errorf("refund k2: %v", err)
				}
			})
		}
		if _, _, err := e.RefundOrder(ctx, "RS-1", engine.RefundRequest{Amount: 300, Key: "k1", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d) // at the same time: no retry is due

		rs, err := e.OrderRefunds(ctx, "RS-1")
		if err != nil || len(rs) != 2 || rs[0].Status != lapse.OrderRefundSucceeded || rs[1].Status != lapse.OrderRefundSucceeded {
			t.Fatalf("refunds of RS-1 = %+v, %v; want k1 and k2 succeeded", rs, err)
		}
		if got, err := e.Order(ctx, "RS-1"); err != nil || got.State != flows.Paid {
			t.Errorf("order RS-1 = %+v, %v; want it paid again", got, err)
		}
		ds, err := e.Deliveries(ctx, "RS-1")
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ds {
			if x.Subscriber == engine.RefundSubscriber && (x.Status != lapse.DeliveryDone || x.LastError != "") {
				t.Errorf("refund delivery %d of %s: %s after %d attempts, %q; want done at once", x.ID, x.EventType, x.Status, x.Attempts, x.LastError)
			}
		}
	})
}
