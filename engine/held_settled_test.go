package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestHeldPaymentSettledNotApplied: a payment held without its order that
// an operator has (in review, refunded, dismissed) is not applied again
// when its order appears later and its callback comes again: the order
// stays unpaid, the held payment keeps its status with the callback on its
// reason, and the capture is counted once (S3). A refunded one applied
// again would leave the order PAID with its money given back.
func TestHeldPaymentSettledNotApplied(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for _, no := range []string{"HS-1", "HS-2", "HS-3"} {
			if _, err := e.ApplyPayment(ctx, heldNotice(no, "txn-"+no, t0)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Hour)
		if got, err := m.RunOnce(ctx); err != nil || got.Reviewed != 3 {
			t.Fatalf("a pass after the window = %+v, %v", got, err)
		}
		hs := helds(t, e)
		if h, err := e.RefundHeldPayment(ctx, hs["txn-HS-1"].ID, operator); err != nil || h.Status != lapse.HeldRefunded {
			t.Fatalf("RefundHeldPayment = %+v, %v", h, err)
		}
		if h, err := e.DismissHeldPayment(ctx, hs["txn-HS-2"].ID, "kept by the shop", operator); err != nil || h.Status != lapse.HeldDismissed {
			t.Fatalf("DismissHeldPayment = %+v, %v", h, err)
		}
		// HS-3 stays in review. Now the orders appear, and the provider
		// sends each callback again: by its time, before its order, and
		// without a time.
		clk.Advance(time.Minute)
		want := map[string]lapse.HeldPaymentStatus{"HS-1": lapse.HeldRefunded, "HS-2": lapse.HeldDismissed, "HS-3": lapse.HeldReview}
		for no := range want {
			create(t, e, checkout(no, 15*time.Minute))
			for _, at := range []time.Time{t0, {}} {
				got, err := e.ApplyPayment(ctx, heldNotice(no, "txn-"+no, at))
				if err != nil || got.Status != lapse.PaymentHeld {
					t.Errorf("%s's held callback again once its order exists = %+v, %v; want held", no, got, err)
				}
			}
		}
		hs = helds(t, e)
		for no, st := range want {
			if o, err := e.Order(ctx, no); err != nil || o.State != flows.Unpaid {
				t.Errorf("%s after its held payment's callback again: %v, %v; want UNPAID", no, o, err)
			}
			if ps, err := e.Payments(ctx, no); err != nil || len(ps) != 0 {
				t.Errorf("%s's payments: %+v, %v; want none", no, ps, err)
			}
			if h := hs["txn-"+no]; h.Status != st || !strings.Contains(h.Reason, "order "+no+" exists now") {
				t.Errorf("%s's held payment: %+v; want %s, the callback on its reason", no, h, st)
			}
		}
		if got, err := m.RunOnce(ctx); err != nil || got.Applied != 0 {
			t.Errorf("a pass once the orders exist = %+v, %v; want nothing applied", got, err)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; tot == nil || tot.Captured != 3000 || tot.Applied != 0 || tot.Refunded != 1000 || len(rec.Issues) != 0 {
			t.Errorf("reconciliation = %+v, totals %+v", rec, tot)
		}
	})
}

// TestReconcileHeldSettledAndApplied: a held payment an operator settled
// (refunded, here) whose transaction is also applied to its order, as a
// callback again could do before the payment path knew better, is an
// issue of the reconciliation, not a payment quietly counted once.
func TestReconcileHeldSettledAndApplied(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		if _, err := e.ApplyPayment(ctx, heldNotice("HR-1", "txn-HR-1", t0)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		create(t, e, checkout("HR-1", 15*time.Minute))
		if got, err := e.ApplyPayment(ctx, heldNotice("HR-1", "txn-HR-1", t0)); err != nil || got.Status != lapse.PaymentApplied {
			t.Fatalf("the overtaking callback again = %+v, %v", got, err)
		}
		// As a store written before the fix holds it: the held payment
		// went to review and was refunded, its payment applied meanwhile.
		h := helds(t, e)["txn-HR-1"]
		for _, st := range [][2]lapse.HeldPaymentStatus{{lapse.HeldWaiting, lapse.HeldReview}, {lapse.HeldReview, lapse.HeldRefunding}, {lapse.HeldRefunding, lapse.HeldRefunded}} {
			if _, err := e.Store().HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: st[0], To: st[1], Reason: "test", At: clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Issues) != 1 || rec.Issues[0].TxnID != "txn-HR-1" || !strings.Contains(rec.Issues[0].Problem, "refunded, and also applied to order HR-1") {
			t.Errorf("reconciliation issues = %+v; want the held payment refunded and applied", rec.Issues)
		}
	})
}

// TestHeldPaymentInReviewButApplied: an operator cannot refund or dismiss
// a held payment in review whose transaction has paid its order meanwhile
// (its window passed as the order came): the money is the order's.
func TestHeldPaymentInReviewButApplied(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		ctx := ctxT(t)
		if _, err := e.ApplyPayment(ctx, heldNotice("HA-1", "txn-HA-1", t0)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		create(t, e, checkout("HA-1", 15*time.Minute))
		if got, err := e.ApplyPayment(ctx, heldNotice("HA-1", "txn-HA-1", t0)); err != nil || got.Status != lapse.PaymentApplied {
			t.Fatalf("the overtaking callback again = %+v, %v", got, err)
		}
		// The matcher's window passed as the order came: in review.
		h := helds(t, e)["txn-HA-1"]
		if _, err := e.Store().HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: lapse.HeldWaiting, To: lapse.HeldReview,
			Reason: "no order appeared", At: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		if got, err := e.RefundHeldPayment(ctx, h.ID, operator); !errors.Is(err, engine.ErrHeldNotInReview) || !strings.Contains(lapse.ErrorMessage(err), "order HA-1") {
			t.Errorf("refund of a held payment that paid its order = %+v, %v; want ErrHeldNotInReview naming the order", got, err)
		}
		if got, err := e.DismissHeldPayment(ctx, h.ID, "mine", operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("dismissal of a held payment that paid its order = %+v, %v; want ErrHeldNotInReview", got, err)
		}
		if n, _ := prov.refunded(); n != 0 {
			t.Errorf("the provider was asked for %d refunds", n)
		}
	})
}

// TestHeldPaymentOtherOrderNotApplied: a transaction held for one order
// that a callback then reports for another, existing order (paid before
// that order was created, as the held one was) pays neither: the capture
// is counted once, held, and in review with both orders named.
func TestHeldPaymentOtherOrderNotApplied(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		if _, err := e.ApplyPayment(ctx, heldNotice("HO-1", "txn-HO", t0)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		create(t, e, checkout("HO-2", 15*time.Minute))
		got, err := e.ApplyPayment(ctx, heldNotice("HO-2", "txn-HO", t0))
		if err != nil || got.Status != lapse.PaymentHeld {
			t.Errorf("the held transaction reported for another order = %+v, %v; want held", got, err)
		}
		if o, err := e.Order(ctx, "HO-2"); err != nil || o.State != flows.Unpaid {
			t.Errorf("HO-2: %v, %v; want UNPAID", o, err)
		}
		if h := helds(t, e)["txn-HO"]; h.Status != lapse.HeldReview || !strings.Contains(h.Reason, "order HO-2 exists now") {
			t.Errorf("the held payment: %+v; want in review, naming HO-2", h)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; tot == nil || tot.Captured != 1000 || tot.Review != 1000 {
			t.Errorf("reconciliation totals %+v; want 10.00 captured, in review", tot)
		}
	})
}

// TestHeldPaymentAheadNotSettledEarly: a held payment whose provider time
// is ahead of its callback (by less than the drift clocks may have) can be
// on the desk before that time, with a window shorter than the drift or
// once a contradiction put it there. An order created before that time
// takes the callback again as an ordinary payment (its time is not before
// the order, so the held payment is not looked at): an operator who
// refunded or dismissed the held payment meanwhile would leave the order
// paid with money given back (S3). The operator's action waits until no
// order can be created before the provider time, and is refused while an
// order exists that the callback again would pay.
func TestHeldPaymentAheadNotSettledEarly(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		paidAt := t0.Add(4 * time.Minute) // the provider's clock is 4 minutes ahead
		for _, no := range []string{"HA-1", "HA-2"} {
			if _, err := e.ApplyPayment(ctx, heldNotice(no, "txn-"+no, paidAt)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
		if got, err := m.RunOnce(ctx); err != nil || got.Reviewed != 2 {
			t.Fatalf("a pass after the window = %+v, %v", got, err)
		}
		hs := helds(t, e)
		// Before the provider time, no operator action: an order created
		// now would be paid by the callback again.
		if h, err := e.RefundHeldPayment(ctx, hs["txn-HA-1"].ID, operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Fatalf("RefundHeldPayment before the held payment's provider time = %+v, %v; want ECONFLICT", h, err)
		}
		if h, err := e.DismissHeldPayment(ctx, hs["txn-HA-2"].ID, "kept", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Fatalf("DismissHeldPayment before the held payment's provider time = %+v, %v; want ECONFLICT", h, err)
		}
		// HA-2's order comes before the provider time: its callback again
		// pays it, and the held payment is the order's, never the desk's.
		clk.Advance(time.Minute)
		create(t, e, checkout("HA-2", 15*time.Minute))
		clk.Advance(3 * time.Minute) // past the provider time
		if h, err := e.DismissHeldPayment(ctx, hs["txn-HA-2"].ID, "kept", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Fatalf("DismissHeldPayment while an order exists that its callback would pay = %+v, %v; want ECONFLICT", h, err)
		}
		if got, err := e.ApplyPayment(ctx, heldNotice("HA-2", "txn-HA-2", paidAt)); err != nil || got.Status != lapse.PaymentApplied {
			t.Fatalf("HA-2's callback again = %+v, %v; want applied", got, err)
		}
		// HA-1's provider time has passed: it can be refunded, and its
		// order, created after, is not paid by the callback again.
		if h, err := e.RefundHeldPayment(ctx, hs["txn-HA-1"].ID, operator); err != nil || h.Status != lapse.HeldRefunded {
			t.Fatalf("RefundHeldPayment after the provider time = %+v, %v", h, err)
		}
		create(t, e, checkout("HA-1", 15*time.Minute))
		if got, err := e.ApplyPayment(ctx, heldNotice("HA-1", "txn-HA-1", paidAt)); err != nil || got.Status != lapse.PaymentHeld {
			t.Fatalf("HA-1's callback again once refunded = %+v, %v; want held", got, err)
		}
		if o, err := e.Order(ctx, "HA-1"); err != nil || o.State != flows.Unpaid {
			t.Errorf("HA-1 after its refunded held payment's callback again: %v, %v; want UNPAID", o, err)
		}
	})
}

// TestHeldPaymentOtherOrderLaterNotApplied: a transaction held for one
// order that a callback then reports for another, existing order, paid
// after that order was created (so that the payment path has no reason to
// look for a held payment), pays nothing: the payment's own write sees the
// held payment. Nor is it recorded as a late payment of a closed order
// (which would be refunded). The capture is counted once, held, in review
// with both orders named; the matcher and reconcile find nothing more.
func TestHeldPaymentOtherOrderLaterNotApplied(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for _, txn := range []string{"txn-HL-a", "txn-HL-b"} {
			if _, err := e.ApplyPayment(ctx, heldNotice("HL-1", txn, t0)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Second)
		create(t, e, checkout("HL-2", 15*time.Minute))
		create(t, e, checkout("HL-3", 15*time.Minute))
		if _, err := e.Fire(ctx, "HL-3", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		for no, txn := range map[string]string{"HL-2": "txn-HL-a", "HL-3": "txn-HL-b"} {
			for range 2 {
				got, err := e.ApplyPayment(ctx, heldNotice(no, txn, clk.Now()))
				if err != nil || got.Status != lapse.PaymentHeld {
					t.Errorf("%s, held for HL-1, reported for %s = %+v, %v; want held", txn, no, got, err)
				}
			}
			if ps, err := e.Payments(ctx, no); err != nil || len(ps) != 0 {
				t.Errorf("%s's payments: %+v, %v; want none", no, ps, err)
			}
			if h := helds(t, e)[txn]; h.Status != lapse.HeldReview || strings.Count(h.Reason, "order "+no+" exists now") != 1 {
				t.Errorf("the held payment %s: %+v; want in review, naming %s once", txn, h, no)
			}
		}
		if o, err := e.Order(ctx, "HL-2"); err != nil || o.State != flows.Unpaid {
			t.Errorf("HL-2: %v, %v; want UNPAID", o, err)
		}
		if got, err := m.RunOnce(ctx); err != nil || got != (engine.HeldMatched{}) {
			t.Errorf("a matcher pass = %+v, %v; want nothing to do", got, err)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; len(rec.Issues) != 0 || rec.Payments != 0 || tot == nil ||
			*tot != (engine.MoneyTotals{Captured: 2000, Review: 2000}) {
			t.Errorf("reconciliation %+v, totals %+v; want 20.00 captured, in review, no issue", rec, tot)
		}
	})
}

// TestHeldPaymentRefundedByProvider: the provider's refund callback for a
// held payment Lapse did not refund (from its dashboard, say), while it
// waits for its order or is in review, in full: the held payment is
// refunded, once however often the callback comes, and stays so. The
// matcher does not apply it once its order exists, nor does its paid
// callback again, whatever its time; reconcile counts it refunded. A
// refund of part of it is no such word: it is put in review.
func TestHeldPaymentRefundedByProvider(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		refunded := func(txn, no string, amount int64) *lapse.PaymentNotice {
			return &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticeRefunded, TxnID: txn, RefundID: "re-" + txn, OrderNo: no,
				Amount: amount, Currency: "CNY", PaidAt: clk.Now(), Raw: []byte(`{}`)}
		}
		for _, no := range []string{"HR-1", "HR-2", "HR-3"} {
			if _, err := e.ApplyPayment(ctx, heldNotice(no, "txn-"+no, t0)); err != nil {
				t.Fatal(err)
			}
		}
		// HR-2 waits out its window: in review when its refund comes.
		// (So do the others; HR-1 is put back to waiting below.)
		clk.Advance(time.Minute)
		if got, err := m.RunOnce(ctx); err != nil || got.Reviewed != 3 {
			t.Fatalf("a pass after the window = %+v, %v", got, err)
		}
		hs := helds(t, e)
		if _, err := e.Store().HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: hs["txn-HR-1"].ID, From: lapse.HeldReview,
			To: lapse.HeldWaiting, At: clk.Now()}); err != nil {
			t.Fatal(err) // HR-1 waiting again, as one whose refund comes within its window
		}
		for range 2 {
			for _, no := range []string{"HR-1", "HR-2"} {
				got, err := e.ApplyPayment(ctx, refunded("txn-"+no, no, 1000))
				if err != nil || got.Status != lapse.PaymentHeld {
					t.Errorf("the provider's refund callback of held %s = %+v, %v; want held", no, got, err)
				}
			}
			if _, err := e.ApplyPayment(ctx, refunded("txn-HR-3", "HR-3", 400)); err != nil {
				t.Fatal(err)
			}
		}
		hs = helds(t, e)
		for _, no := range []string{"HR-1", "HR-2"} {
			if h := hs["txn-"+no]; h.Status != lapse.HeldRefunded || h.RefundID != "re-txn-"+no || !strings.Contains(h.Reason, "refunded by sandbox") ||
				strings.Contains(h.Reason, "contradicted") {
				t.Errorf("held %s after the provider's refund callback: %+v; want refunded", no, h)
			}
		}
		if h := hs["txn-HR-3"]; h.Status != lapse.HeldReview || strings.Count(h.Reason, "4.00 CNY refunded") != 1 {
			t.Errorf("held HR-3 after a refund of part of it: %+v; want in review", h)
		}

		// Their orders come: neither the matcher nor the callback again
		// (before or after the order's creation) pays them.
		clk.Advance(time.Minute)
		create(t, e, checkout("HR-1", 15*time.Minute))
		create(t, e, checkout("HR-2", 15*time.Minute))
		if got, err := m.RunOnce(ctx); err != nil || got.Applied != 0 {
			t.Errorf("a matcher pass once the orders exist = %+v, %v; want nothing applied", got, err)
		}
		clk.Advance(time.Second)
		for _, no := range []string{"HR-1", "HR-2"} {
			for _, at := range []time.Time{t0, clk.Now()} {
				if got, err := e.ApplyPayment(ctx, heldNotice(no, "txn-"+no, at)); err != nil || got.Status != lapse.PaymentHeld {
					t.Errorf("%s's callback again, paid at %s, once refunded = %+v, %v; want held", no, at, got, err)
				}
			}
			if o, err := e.Order(ctx, no); err != nil || o.State != flows.Unpaid {
				t.Errorf("%s: %v, %v; want UNPAID", no, o, err)
			}
			if h := helds(t, e)["txn-"+no]; h.Status != lapse.HeldRefunded {
				t.Errorf("held %s after its callback again: %+v; want refunded still", no, h)
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; len(rec.Issues) != 0 || rec.Payments != 0 || rec.Held != 3 || tot == nil ||
			*tot != (engine.MoneyTotals{Captured: 3000, Refunded: 2000, Review: 1000}) {
			t.Errorf("reconciliation %+v, totals %+v; want 30.00 captured, 20.00 refunded, 10.00 in review", rec, tot)
		}
	})
}
