package engine_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/payment"
)

const disputeSecret = "whsec_dispute0123456789abcdef0123456789"

// stripeDisputeEvent is a charge.dispute.* event of type typ as Stripe sends
// it (abridged), for dispute id of payment intent pi, amount in minor units
// of cur, in status status.
func stripeDisputeEvent(typ, id, pi string, amount int64, cur, status string, created time.Time) string {
	return fmt.Sprintf(`{
  "id": "evt_%s_%s",
  "object": "event",
  "api_version": "2025-08-27.basil",
  "created": %d,
  "data": {
    "object": {
      "id": %q,
      "object": "dispute",
      "amount": %d,
      "balance_transactions": [],
      "charge": "ch_%s",
      "currency": %q,
      "evidence": {"customer_name": null},
      "is_charge_refundable": false,
      "livemode": true,
      "metadata": {},
      "payment_intent": %q,
      "reason": "fraudulent",
      "status": %q
    }
  },
  "livemode": true,
  "pending_webhooks": 1,
  "type": %q
}`, strings.ReplaceAll(typ, ".", "_"), id, created.Unix(), id, amount, pi, strings.ToLower(cur), pi, status, typ)
}

// stripeSigned is the Stripe-Signature header of body at t, by Stripe's
// published rule.
func stripeSigned(secret, body string, t time.Time) http.Header {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", t.Unix(), body)
	h := http.Header{}
	h.Set(payment.StripeSignatureHeader, fmt.Sprintf("t=%d,v1=%s", t.Unix(), hex.EncodeToString(m.Sum(nil))))
	return h
}

// disputeNotice verifies a signed dispute event, as the callback route does.
func disputeNotice(t *testing.T, now time.Time, typ, id, pi string, amount int64, cur, status string) *lapse.PaymentNotice {
	t.Helper()
	s := &payment.Stripe{Provider: "sandbox", Secrets: [][]byte{[]byte(disputeSecret)}}
	body := stripeDisputeEvent(typ, id, pi, amount, cur, status, now)
	n, err := s.Verify(stripeSigned(disputeSecret, body, now), []byte(body), now)
	if err != nil || n == nil {
		t.Fatalf("Verify(%s) = %+v, %v", typ, n, err)
	}
	return n
}

// TestStripeDisputeRecorded: a dispute's withdrawal of an applied payment's
// money (funds_withdrawn, or closed lost) is recorded once, as a refund in
// review of the amount withdrawn, naming the dispute; the order cannot be
// refunded again, and a later total of what the provider refunded is not
// taken as explained by it; reconcile adds up to the cent. A dispute opened, and its
// money given back, put the payment on the desk, naming the dispute.
func TestStripeDisputeRecorded(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{status: lapse.RefundSucceeded})
		ctx := ctxT(t)
		apply := func(n *lapse.PaymentNotice) {
			t.Helper()
			if _, err := e.ApplyPayment(ctx, n); err != nil {
				t.Fatalf("ApplyPayment(%s %s) = %v", n.Kind, n.RefundID, err)
			}
		}
		refunds := func(no string) []*lapse.OrderRefund {
			t.Helper()
			rs, err := e.OrderRefunds(ctx, no)
			if err != nil {
				t.Fatal(err)
			}
			return rs
		}
		a := create(t, e, checkout("DP-1", time.Hour)) // 10.00 CNY
		b := create(t, e, checkout("DP-2", time.Hour))
		apply(paid(a, "pi_DP1", clk.Now()))
		apply(paid(b, "pi_DP2", clk.Now()))
		clk.Advance(time.Minute)

		// Opened: on the desk, no money moved.
		apply(disputeNotice(t, clk.Now(), "charge.dispute.created", "dp_A", "pi_DP1", 1000, "CNY", "needs_response"))
		if !reviewSays(t, e, "DP-1", "dp_A", "opened") || len(refunds("DP-1")) != 0 {
			t.Fatalf("after the dispute opened: reviews %+v, refunds %+v", orderReviews(t, e, "DP-1"), refunds("DP-1"))
		}
		reviews := len(orderReviews(t, e, "DP-1"))
		apply(disputeNotice(t, clk.Now(), "charge.dispute.created", "dp_A", "pi_DP1", 1000, "CNY", "needs_response"))
		if got := len(orderReviews(t, e, "DP-1")); got != reviews {
			t.Fatalf("the same dispute opened again: %d reviews, want %d", got, reviews)
		}

		// Withdrawn (a part: 6.00 of 10.00), then replayed, then closed lost: one refund.
		apply(disputeNotice(t, clk.Now(), "charge.dispute.funds_withdrawn", "dp_A", "pi_DP1", 600, "CNY", "needs_response"))
		apply(disputeNotice(t, clk.Now(), "charge.dispute.funds_withdrawn", "dp_A", "pi_DP1", 600, "CNY", "needs_response"))
		apply(disputeNotice(t, clk.Now(), "charge.dispute.closed", "dp_A", "pi_DP1", 600, "CNY", "lost"))
		rs := refunds("DP-1")
		if len(rs) != 1 || rs[0].Amount != 600 || rs[0].Status != lapse.OrderRefundReview || rs[0].RefundID != "dp_A" {
			t.Fatalf("refunds of DP-1 after its dispute's withdrawal: %+v; want one of 6.00 CNY in review, refund id dp_A", rs)
		}
		if !reviewSays(t, e, "DP-1", "dp_A", "withdrew", "6.00 CNY", "must not be refunded again") {
			t.Fatalf("no review of DP-1 names the withdrawal: %+v", orderReviews(t, e, "DP-1"))
		}
		// A refund made at the provider later, reported as what the payment
		// has had refunded in all (which counts no dispute): 3.00 more went
		// back, which the dispute's 6.00 does not explain.
		total := refundNotice(a, "pi_DP1", "ch_DP1", 300, clk.Now())
		total.RefundedTotal = true
		apply(total)
		if rs := refunds("DP-1"); len(rs) != 2 || rs[1].Amount != 300 || rs[1].Status != lapse.OrderRefundReview {
			t.Fatalf("refunds of DP-1 after 3.00 refunded at the provider: %+v; want the dispute's and one of 3.00 CNY in review", rs)
		}
		// What is left (1.00) can be refunded; more cannot.
		if _, _, err := e.RefundOrder(ctx, "DP-1", engine.RefundRequest{Amount: 500, Reason: "again", Key: "k-DP-1", By: app}); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Fatalf("refunding 5.00 of DP-1, of which the dispute took 6.00: %v; want ECONFLICT", err)
		}

		// Closed lost with no withdrawal reported before: recorded then.
		apply(disputeNotice(t, clk.Now(), "charge.dispute.closed", "dp_B", "pi_DP2", 1000, "CNY", "lost"))
		apply(disputeNotice(t, clk.Now(), "charge.dispute.closed", "dp_B", "pi_DP2", 1000, "CNY", "lost"))
		if rs := refunds("DP-2"); len(rs) != 1 || rs[0].Amount != 1000 || rs[0].Status != lapse.OrderRefundReview {
			t.Fatalf("refunds of DP-2 after its dispute closed lost: %+v; want one of 10.00 CNY in review", rs)
		}

		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tot := rec.Totals["CNY"]
		if tot == nil || tot.Captured != 2000 || tot.Applied != 100 || tot.Refunded+tot.Review != 1900 ||
			tot.Captured != tot.Applied+tot.Refunded+tot.Review+tot.Open || len(rec.Issues) != 0 {
			t.Fatalf("reconcile: %+v, issues %+v; want 20.00 captured, 1.00 applied, 19.00 taken back by disputes and refunds", tot, rec.Issues)
		}

		// Won after the withdrawal: the money came back, on the desk.
		apply(disputeNotice(t, clk.Now(), "charge.dispute.funds_reinstated", "dp_A", "pi_DP1", 600, "CNY", "won"))
		if !reviewSays(t, e, "DP-1", "dp_A", "gave the withdrawn amount back") {
			t.Fatalf("no review of DP-1 says the money came back: %+v", orderReviews(t, e, "DP-1"))
		}
		if rs := refunds("DP-1"); len(rs) != 2 {
			t.Fatalf("refunds of DP-1 after the money came back: %+v", rs)
		}

		// A dispute of a payment Lapse does not have: not found, so that Stripe sends it again.
		if _, err := e.ApplyPayment(ctx, disputeNotice(t, clk.Now(), "charge.dispute.funds_withdrawn", "dp_C", "pi_none", 1000, "CNY", "lost")); lapse.ErrorCode(err) != lapse.ENOTFOUND {
			t.Fatalf("a dispute of an unknown payment: %v; want ENOTFOUND", err)
		}
	})
}

// TestStripeDisputeOfMemberCharge: a dispute of a group member's charge
// (which Lapse holds as the member's, not as a payment) is put on the
// group's desk, naming the dispute, once however often it comes: opened,
// and its withdrawal.
func TestStripeDisputeOfMemberCharge(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk})
		e := groupEngine(t, open(), clk, sb)
		ctx := ctxT(t)
		create(t, e, groupReq("G-DP", time.Minute))
		if _, _, err := e.JoinGroup(ctx, "G-DP", engine.JoinRequest{UserID: "u1", Method: "tok-u1", By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		m := members(t, e, "G-DP")["u1"]
		if m.Status != lapse.ChargeCharged || m.TxnID == "" {
			t.Fatalf("u1 after the group settled: %+v", m)
		}
		for _, typ := range []string{"charge.dispute.created", "charge.dispute.created", "charge.dispute.funds_withdrawn", "charge.dispute.funds_withdrawn"} {
			if _, err := e.ApplyPayment(ctx, disputeNotice(t, clk.Now(), typ, "dp_G", m.TxnID, m.Amount, "CNY", "needs_response")); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
		}
		rs := reviewReasons(t, e, "G-DP")
		opened := slices.ContainsFunc(rs, func(r string) bool { return strings.Contains(r, "dp_G") && strings.Contains(r, "opened") })
		withdrawn := slices.ContainsFunc(rs, func(r string) bool {
			return strings.Contains(r, "dp_G") && strings.Contains(r, "must not be refunded again")
		})
		if len(rs) != 2 || !opened || !withdrawn {
			t.Fatalf("reviews of G-DP after its member's charge was disputed: %q; want one for the dispute opened, one for its withdrawal", rs)
		}
	})
}

// TestStripeDisputeOfLatePayment: a dispute's withdrawal of a late payment
// (one Lapse is to refund) refunds it, naming the dispute on the desk, so
// that Lapse does not refund it again; of one whose refund is under way it
// moves nothing and tells the operator the money may go back twice.
func TestStripeDisputeOfLatePayment(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{status: lapse.RefundProcessing}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		a := create(t, e, checkout("DL-1", time.Minute))
		b := create(t, e, checkout("DL-2", time.Minute))
		clk.Advance(time.Hour)
		for _, o := range []*lapse.Order{a, b} {
			if p, err := e.ApplyPayment(ctx, paid(o, "pi_"+o.OrderNo, clk.Now())); err != nil || p.Status != lapse.PaymentLate {
				t.Fatalf("paying %s an hour late = %+v, %v; want late", o.OrderNo, p, err)
			}
		}
		payOf := func(no string) *lapse.Payment {
			t.Helper()
			ps, err := e.Payments(ctx, no)
			if err != nil || len(ps) != 1 {
				t.Fatalf("payments of %s: %+v, %v", no, ps, err)
			}
			return ps[0]
		}
		for range 2 {
			if _, err := e.ApplyPayment(ctx, disputeNotice(t, clk.Now(), "charge.dispute.funds_withdrawn", "dp_L1", "pi_DL-1", 1000, "CNY", "needs_response")); err != nil {
				t.Fatal(err)
			}
		}
		if p := payOf("DL-1"); p.Status != lapse.PaymentRefunded || p.RefundID != "dp_L1" {
			t.Fatalf("DL-1's late payment after its dispute's withdrawal: %+v; want refunded by dp_L1", p)
		}
		if rs := orderReviews(t, e, "DL-1"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "dp_L1") {
			t.Fatalf("reviews of DL-1: %+v; want one naming dp_L1", rs)
		}
		drain(t, d) // DL-2's refund is accepted, processing; DL-1 is not refunded again
		if len(prov.refunds) != 1 {
			t.Fatalf("refunds asked of the provider: %+v; want DL-2's alone", prov.refunds)
		}
		if p := payOf("DL-2"); p.Status != lapse.PaymentRefunding {
			t.Fatalf("DL-2's payment after its refund was accepted: %+v", p)
		}
		if _, err := e.ApplyPayment(ctx, disputeNotice(t, clk.Now(), "charge.dispute.funds_withdrawn", "dp_L2", "pi_DL-2", 1000, "CNY", "needs_response")); err != nil {
			t.Fatal(err)
		}
		if p := payOf("DL-2"); p.Status != lapse.PaymentRefunding {
			t.Fatalf("DL-2's payment after its dispute's withdrawal: %+v; want still refunding", p)
		}
		if !reviewSays(t, e, "DL-2", "dp_L2", "go back twice") {
			t.Fatalf("reviews of DL-2: %+v; want one naming dp_L2 and the refund under way", orderReviews(t, e, "DL-2"))
		}
	})
}

// TestStripeDisputeOfHeldPayment: a dispute opened on a payment held
// without its order puts it in review, naming the dispute, so that it is
// not applied when its order comes.
func TestStripeDisputeOfHeldPayment(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		n := &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "pi_DH1", OrderNo: "DH-1", Amount: 1000,
			Currency: "CNY", Merchant: "m-1", PaidAt: clk.Now(), Raw: []byte(`{}`)}
		if p, err := e.ApplyPayment(ctx, n); err != nil || p.Status != lapse.PaymentHeld {
			t.Fatalf("a payment of no order = %+v, %v; want held", p, err)
		}
		for range 2 {
			if _, err := e.ApplyPayment(ctx, disputeNotice(t, clk.Now(), "charge.dispute.created", "dp_H1", "pi_DH1", 1000, "CNY", "needs_response")); err != nil {
				t.Fatal(err)
			}
		}
		hs, err := e.HeldPayments(ctx, &lapse.HeldPaymentListParams{Provider: "sandbox", TxnID: "pi_DH1"})
		if err != nil || len(hs) != 1 || hs[0].Status != lapse.HeldReview || strings.Count(hs[0].Reason, "dp_H1") != 1 {
			t.Fatalf("the held payment after a dispute opened: %+v, %v; want in review, naming dp_H1 once", hs, err)
		}
	})
}
