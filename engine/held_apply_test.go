package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestApplyHeldPayment: a held payment in review whose order exists,
// created no later than its provider time, can be neither refunded nor
// dismissed; an operator applies it to its order through the payment path:
// the order is paid through its flow, with the payment, audited with that
// change, and the held payment is applied, by the operator. One whose order
// does not exist or cannot take it (closed, paid, another amount) is
// refused with ECONFLICT, and nothing changes; one not in review is
// refused too.
func TestApplyHeldPayment(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, s, clk, &fakeProvider{})
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		paidAt := t0.Add(4 * time.Minute) // the provider's clock is 4 minutes ahead
		for _, no := range []string{"AP-1", "AP-NONE", "AP-CLOSED", "AP-PAID", "AP-AMOUNT"} {
			n := heldNotice(no, "txn-"+no, paidAt)
			if no == "AP-AMOUNT" {
				n.Amount = 900
			}
			if _, err := e.ApplyPayment(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		if h, err := e.ApplyHeldPayment(ctx, helds(t, e)["txn-AP-1"].ID, operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("ApplyHeldPayment of one still waiting = %+v, %v; want ErrHeldNotInReview", h, err)
		}
		clk.Advance(time.Minute)
		if got, err := m.RunOnce(ctx); err != nil || got.Reviewed != 5 {
			t.Fatalf("a pass after the window = %+v, %v", got, err)
		}
		clk.Advance(time.Minute)
		for _, no := range []string{"AP-1", "AP-CLOSED", "AP-PAID", "AP-AMOUNT"} {
			create(t, e, checkout(no, 15*time.Minute))
		}
		if _, err := e.Fire(ctx, "AP-CLOSED", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if got, err := e.ApplyPayment(ctx, heldNotice("AP-PAID", "txn-other", clk.Now())); err != nil || got.Status != lapse.PaymentApplied {
			t.Fatalf("AP-PAID's own payment = %+v, %v", got, err)
		}
		clk.Advance(3 * time.Minute) // past the provider time
		hs := helds(t, e)
		if h, err := e.DismissHeldPayment(ctx, hs["txn-AP-1"].ID, "kept", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Fatalf("DismissHeldPayment of one whose order exists, created before its provider time = %+v, %v; want ECONFLICT", h, err)
		}

		// Refused: nothing changes, nothing is audited.
		for no, want := range map[string]string{"AP-NONE": "no order AP-NONE exists", "AP-CLOSED": "CLOSED", "AP-PAID": "PAID",
			"AP-AMOUNT": "the payment is 9.00 CNY; order AP-AMOUNT is 10.00 CNY"} {
			actx := engine.WithAudit(ctx, auditEntry("held_payment.apply", fmt.Sprintf("held_payment:%d", hs["txn-"+no].ID)))
			h, err := e.ApplyHeldPayment(actx, hs["txn-"+no].ID, operator)
			if !errors.Is(err, engine.ErrHeldNotPayable) || lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(lapse.ErrorMessage(err), want) ||
				engine.AuditWritten(actx) {
				t.Errorf("ApplyHeldPayment for %s = %+v, %v; want ErrHeldNotPayable saying %q, not audited", no, h, err, want)
			}
			if h := helds(t, e)["txn-"+no]; h.Status != lapse.HeldReview || h.By != "" {
				t.Errorf("held %s after a refused apply: %+v; want in review as it was", no, h)
			}
			if _, err := e.Store().PaymentGet(ctx, "sandbox", "txn-"+no); !errors.Is(err, lapse.ErrPaymentNotFound) {
				t.Errorf("a refused apply of %s recorded a payment: %v", no, err)
			}
		}
		if o, err := e.Order(ctx, "AP-AMOUNT"); err != nil || o.State != flows.Unpaid {
			t.Errorf("AP-AMOUNT after a refused apply: %v, %v; want UNPAID", o, err)
		}
		if rows := auditRows(t, s); len(rows) != 0 {
			t.Errorf("audit rows after refused applies: %+v", rows)
		}

		// Applied: the order paid through its flow, audited with it.
		actx := engine.WithAudit(ctx, auditEntry("held_payment.apply", fmt.Sprintf("held_payment:%d", hs["txn-AP-1"].ID)))
		h, err := e.ApplyHeldPayment(actx, hs["txn-AP-1"].ID, operator)
		if err != nil || h.Status != lapse.HeldApplied || h.By != "operator:alice" || !strings.Contains(h.Reason, "applied to order AP-1") {
			t.Fatalf("ApplyHeldPayment = %+v, %v; want applied by the operator", h, err)
		}
		if rows := auditRows(t, s); !engine.AuditWritten(actx) || len(rows) != 1 || rows[0].Action != "held_payment.apply" {
			t.Errorf("audit rows = %+v", rows)
		}
		ps, err := e.Payments(ctx, "AP-1")
		if o, oerr := e.Order(ctx, "AP-1"); err != nil || oerr != nil || o.State != flows.Paid || len(ps) != 1 ||
			ps[0].Status != lapse.PaymentApplied || ps[0].TxnID != "txn-AP-1" || !ps[0].PaidAt.Equal(paidAt) {
			t.Errorf("AP-1 after the apply: %+v, %v, payments %+v, %v; want PAID by txn-AP-1", o, oerr, ps, err)
		}
		if into, _, trs := history(t, e, "AP-1"); into[flows.Paid] != 1 || trs[len(trs)-1].FiredBy != lapse.FiredByPayment ||
			trs[len(trs)-1].Actor != "operator:alice" {
			t.Errorf("AP-1 was not paid through its flow by the operator: %v, %+v", into, trs[len(trs)-1])
		}
		// Not twice; the callback again is a replay of the payment.
		if h, err := e.ApplyHeldPayment(ctx, h.ID, operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("ApplyHeldPayment again = %+v, %v; want ErrHeldNotInReview", h, err)
		}
		if got, err := e.ApplyPayment(ctx, heldNotice("AP-1", "txn-AP-1", paidAt)); err != nil || got.Status != lapse.PaymentApplied || got.ID != ps[0].ID {
			t.Errorf("AP-1's callback again = %+v, %v; want the payment applied", got, err)
		}
		if _, err := e.ApplyHeldPayment(ctx, 9999, operator); !errors.Is(err, lapse.ErrHeldPaymentNotFound) {
			t.Errorf("ApplyHeldPayment of none = %v; want ErrHeldPaymentNotFound", err)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; len(rec.Issues) != 0 || tot == nil || tot.Applied != 2000 || tot.Review != 3900 || tot.Captured != 5900 {
			t.Errorf("reconciliation %+v, totals %+v; want 20.00 applied, 39.00 in review", rec, tot)
		}
	})
}
