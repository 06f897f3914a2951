package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// TestRefundCallbackBeforeItsAnswer: the provider made a merchant refund
// (the refund subscriber asked for it), the process stopped before it
// recorded the provider's answer, and the refund's callback comes first,
// naming the refund by the provider's id, which Lapse has not recorded.
// The provider, asked under the refund's key, names that refund: the
// callback completes Lapse's own refund, rather than be counted as a
// refund Lapse did not ask for beside it (the money counted twice). A
// provider that cannot say now makes the callback be sent again, and a
// refund of another id stays one Lapse did not ask for.
func TestRefundCallbackBeforeItsAnswer(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RO-1", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-ro1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if _, _, err := e.RefundOrder(ctx, "RO-1", engine.RefundRequest{Amount: 400, Key: "k1", By: app}); err != nil {
			t.Fatal(err)
		}
		// The refund subscriber's call, made; its answer never recorded.
		if _, err := prov.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "k1", OrderNo: "RO-1", TxnID: "txn-ro1", Amount: 400, Currency: o.Currency}); err != nil {
			t.Fatal(err)
		}
		notice := func(refundID string, amount int64) *lapse.PaymentNotice {
			n := paid(o, "txn-ro1", clk.Now())
			n.Kind, n.RefundID, n.Amount = lapse.NoticeRefunded, refundID, amount
			return n
		}

		// The provider cannot say now: sent again later, nothing written.
		// (A second engine on the same store, its provider not answering.)
		e2 := paymentEngine(t, open(), clk, &downQuery{fakeProvider: prov})
		if _, err := e2.ApplyPayment(ctx, notice("re-k1", 400)); lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
			t.Errorf("the callback while the provider cannot say = %v, want EUNAVAILABLE (sent again)", err)
		}
		if rs, _ := e.OrderRefunds(ctx, "RO-1"); len(rs) != 1 || rs[0].Status != lapse.OrderRefundRequested {
			t.Errorf("refunds of RO-1 after the callback was put off = %+v, want k1 alone, requested", rs)
		}

		if _, err := e.ApplyPayment(ctx, notice("re-k1", 400)); err != nil {
			t.Fatalf("the refund's callback before its answer: %v", err)
		}
		rs, err := e.OrderRefunds(ctx, "RO-1")
		if err != nil || len(rs) != 1 || rs[0].Key != "k1" || rs[0].Status != lapse.OrderRefundSucceeded || rs[0].RefundID != "re-k1" {
			t.Fatalf("refunds of RO-1 = %+v, %v; want k1 alone, succeeded as re-k1", rs, err)
		}
		drain(t, d) // the refund subscriber's delivery finds it answered
		if rs, _ := e.OrderRefunds(ctx, "RO-1"); len(rs) != 1 {
			t.Errorf("refunds of RO-1 after the deliveries = %+v, want k1 alone", rs)
		}

		// A refund the provider reports under another id is not Lapse's.
		if _, err := e.ApplyPayment(ctx, notice("re-dashboard", 100)); err != nil {
			t.Fatal(err)
		}
		rs, _ = e.OrderRefunds(ctx, "RO-1")
		if len(rs) != 2 || rs[1].Status != lapse.OrderRefundReview || rs[1].RefundID != "re-dashboard" {
			t.Errorf("refunds of RO-1 after a dashboard refund = %+v, want it in review beside k1", rs)
		}
	})
}

// downQuery is a provider that cannot answer a refund query now.
type downQuery struct{ *fakeProvider }

func (d *downQuery) RefundQuery(ctx context.Context, key string) (*lapse.ProviderRefund, error) {
	return nil, errors.New("fake: the provider does not answer")
}
