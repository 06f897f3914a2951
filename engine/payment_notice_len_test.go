package engine_test

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestPaymentNoticeOverlong: a verified callback whose transaction, refund
// or order id is longer than any provider's (lapse.MaxTxnIDLen), or is not
// text a store keeps (NUL, which PostgreSQL refuses, or invalid UTF-8, which
// an Alipay form can carry), is refused as malformed (EINVALID, 400: it
// names nothing Lapse could find again), and one whose merchant account is
// such cannot confirm whom it paid: its payment is recorded in review, its
// merchant cut to what a store keeps. MySQL, whose columns are bounded,
// answered each with an internal error, and the provider sent it again for
// ever.
func TestPaymentNoticeOverlong(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		o := create(t, e, checkout("L-1", 0))
		long := strings.Repeat("x", 1500)

		if _, err := e.ApplyPayment(ctx, paid(o, long, t0)); lapse.ErrorCode(err) != lapse.EINVALID || field(err) != "txn_id" {
			t.Errorf("a paid notice of a long txn_id = %v, want invalid naming txn_id", err)
		}
		if _, err := e.ApplyPayment(ctx, paid(o, "t1", t0)); err != nil {
			t.Fatal(err)
		}
		refund := paid(o, "t1", t0)
		refund.Kind, refund.RefundID = lapse.NoticeRefunded, long
		if _, err := e.ApplyPayment(ctx, refund); lapse.ErrorCode(err) != lapse.EINVALID || field(err) != "refund_id" {
			t.Errorf("a refund notice of a long refund_id = %v, want invalid naming refund_id", err)
		}
		unreadable := paid(o, long, t0)
		unreadable.Kind, unreadable.Review = lapse.NoticeUnreadable, "amount \"x\""
		if _, err := e.ApplyPayment(ctx, unreadable); lapse.ErrorCode(err) != lapse.EINVALID || field(err) != "txn_id" {
			t.Errorf("an unreadable notice of a long txn_id = %v, want invalid naming txn_id", err)
		}

		for _, txn := range []string{"t\x00", "t\xff"} {
			if _, err := e.ApplyPayment(ctx, paid(o, txn, t0)); lapse.ErrorCode(err) != lapse.EINVALID || field(err) != "txn_id" {
				t.Errorf("a paid notice of txn_id %q = %v, want invalid naming txn_id", txn, err)
			}
		}
		nul := paid(o, "t9", t0)
		nul.OrderNo = "L-1\x00"
		if _, err := e.ApplyPayment(ctx, nul); lapse.ErrorCode(err) != lapse.EINVALID || field(err) != "order_no" {
			t.Errorf("a paid notice of order_no %q = %v, want invalid naming order_no", nul.OrderNo, err)
		}

		o2 := create(t, e, checkout("L-2", 0))
		n := paid(o2, "t2", t0)
		n.Merchant = long
		p, err := e.ApplyPayment(ctx, n)
		if err != nil || p.Status != lapse.PaymentReview || len(p.Merchant) > lapse.MaxReasonLen {
			t.Fatalf("a paid notice of a long merchant = %+v, %v; want it in review, its merchant cut", p, err)
		}
		if got, err := e.Order(ctx, "L-2"); err != nil || got.State != o2.State {
			t.Errorf("order L-2 = %+v, %v; want it %s still", got, err, o2.State)
		}
		n = paid(o2, "t3", t0)
		n.Merchant = "m-1\x00"
		if p, err := e.ApplyPayment(ctx, n); err != nil || p.Status != lapse.PaymentReview || !lapse.StorableText(p.Merchant) {
			t.Errorf("a paid notice of merchant %q = %+v, %v; want it in review, its merchant kept as text", n.Merchant, p, err)
		}
		pays, err := e.Payments(ctx, "L-1")
		if err != nil || len(pays) != 1 || pays[0].TxnID != "t1" {
			t.Errorf("payments of L-1 = %+v, %v; want t1 alone", pays, err)
		}
	})
}
