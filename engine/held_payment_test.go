package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// heldNotice is a paid notice of 10.00 CNY for order orderNo, which need
// not exist.
func heldNotice(orderNo, txn string, at time.Time) *lapse.PaymentNotice {
	return &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: txn, OrderNo: orderNo, Amount: 1000,
		Currency: "CNY", Merchant: "m-1", PaidAt: at, Raw: []byte(`{}`)}
}

// helds returns e's held payments by transaction.
func helds(t *testing.T, e *engine.Engine) map[string]*lapse.HeldPayment {
	t.Helper()
	hs, err := e.HeldPayments(ctxT(t), &lapse.HeldPaymentListParams{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*lapse.HeldPayment{}
	for _, h := range hs {
		if out[h.TxnID] != nil {
			t.Fatalf("transaction %s is held twice", h.TxnID)
		}
		out[h.TxnID] = h
	}
	return out
}

// TestHeldPayment: a verified capture for an order Lapse does not have is
// held, once however often it is reported, and acknowledged; a report that
// contradicts it puts it in review; once its order exists the matcher
// applies it through the payment path (paid, late, or in review as its
// callback would have been); with no order for the window it is in review.
func TestHeldPayment(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		run := func() engine.HeldMatched {
			t.Helper()
			got, err := m.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}

		// Held, and the same report 20 times at once: one row.
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				got, err := e.ApplyPayment(ctx, heldNotice("HP-1", "txn-h1", clk.Now()))
				if err != nil || got.Status != lapse.PaymentHeld || got.ID != 0 {
					t.Errorf("ApplyPayment for an unknown order = %+v, %v; want held", got, err)
				}
			})
		}
		wg.Wait()
		hs := helds(t, e)
		if h := hs["txn-h1"]; len(hs) != 1 || h == nil || h.Status != lapse.HeldWaiting || h.OrderNo != "HP-1" || h.Amount != 1000 ||
			!h.CreatedAt.Equal(clk.Now()) {
			t.Fatalf("held payments after 20 reports = %+v", hs)
		}
		if ps, _ := e.Store().PaymentList(ctx, &lapse.PaymentListParams{}); len(ps) != 0 {
			t.Fatalf("a held payment was recorded as a payment: %+v", ps)
		}

		// Contradictions: another amount, another order. In review, each
		// once however often it comes; the amount held stays.
		for range 2 {
			n := heldNotice("HP-1", "txn-h1", clk.Now())
			n.Amount = 999
			if _, err := e.ApplyPayment(ctx, n); err != nil {
				t.Fatal(err)
			}
			if _, err := e.ApplyPayment(ctx, heldNotice("HP-OTHER", "txn-h1", clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		h := helds(t, e)["txn-h1"]
		if h.Status != lapse.HeldReview || h.Amount != 1000 || strings.Count(h.Reason, "contradicted") != 2 ||
			!strings.Contains(h.Reason, "9.99 CNY for order HP-1") || !strings.Contains(h.Reason, "order HP-OTHER") {
			t.Errorf("held payment after contradictions = %+v", h)
		}

		// Overtaking: the callback first, its order after. The matcher pays
		// the order through its flow, judged at the provider's time, which
		// predates the order.
		if _, err := e.ApplyPayment(ctx, heldNotice("HP-2", "txn-h2", clk.Now())); err != nil {
			t.Fatal(err)
		}
		// And one whose order is closed before the matcher comes: late, refunded.
		if _, err := e.ApplyPayment(ctx, heldNotice("HP-3", "txn-h3", clk.Now())); err != nil {
			t.Fatal(err)
		}
		// And one of another amount than its order: in review.
		mism := heldNotice("HP-4", "txn-h4", clk.Now())
		mism.Amount = 900
		if _, err := e.ApplyPayment(ctx, mism); err != nil {
			t.Fatal(err)
		}
		// And one whose order never comes.
		if _, err := e.ApplyPayment(ctx, heldNotice("HP-5", "txn-h5", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if got := run(); got.Applied != 0 || got.Remaining != 4 || got.Reviewed != 0 {
			t.Errorf("a pass before any order exists = %+v", got)
		}
		clk.Advance(30 * time.Second)
		create(t, e, checkout("HP-2", 15*time.Minute))
		create(t, e, checkout("HP-3", 15*time.Minute))
		create(t, e, checkout("HP-4", 15*time.Minute))
		if _, err := e.Fire(ctx, "HP-3", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if got := run(); got.Applied != 3 || got.Remaining != 1 {
			t.Errorf("a pass once the orders exist = %+v", got)
		}
		want := map[string]struct {
			state lapse.State
			pay   lapse.PaymentStatus
		}{"HP-2": {flows.Paid, lapse.PaymentApplied}, "HP-3": {flows.Closed, lapse.PaymentLate}, "HP-4": {flows.Unpaid, lapse.PaymentReview}}
		for no, w := range want {
			o, err := e.Order(ctx, no)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := e.Payments(ctx, no)
			if err != nil {
				t.Fatal(err)
			}
			if o.State != w.state || len(ps) != 1 || ps[0].Status != w.pay || !ps[0].PaidAt.Equal(t0) {
				t.Errorf("%s after the matcher: %s, payments %+v; want %s, one %s", no, o.State, ps, w.state, w.pay)
			}
		}
		if into, _, trs := history(t, e, "HP-2"); into[flows.Paid] != 1 || trs[len(trs)-1].FiredBy != lapse.FiredByPayment {
			t.Errorf("HP-2 was not paid through its flow: %v", into)
		}
		hs = helds(t, e)
		for _, txn := range []string{"txn-h2", "txn-h3", "txn-h4"} {
			if hs[txn].Status != lapse.HeldApplied {
				t.Errorf("%s after the matcher: %+v", txn, hs[txn])
			}
		}
		// The callback again now that its order exists: a replay of the payment.
		if got, err := e.ApplyPayment(ctx, heldNotice("HP-2", "txn-h2", t0)); err != nil || got.Status != lapse.PaymentApplied {
			t.Errorf("the overtaking callback again = %+v, %v", got, err)
		}
		// The provider sends a held callback again once its order exists,
		// before the matcher comes: paid, its time (before the order) judged
		// against when it was held; the matcher then finds it paid.
		if _, err := e.ApplyPayment(ctx, heldNotice("HP-6", "txn-h6", clk.Now())); err != nil {
			t.Fatal(err)
		}
		clk.Advance(5 * time.Second)
		create(t, e, checkout("HP-6", 15*time.Minute))
		if got, err := e.ApplyPayment(ctx, heldNotice("HP-6", "txn-h6", clk.Now().Add(-5*time.Second))); err != nil || got.Status != lapse.PaymentApplied {
			t.Errorf("a held callback again once its order exists = %+v, %v", got, err)
		}
		if got := run(); got.Applied != 1 || got.Remaining != 1 {
			t.Errorf("a second pass = %+v", got)
		}
		if h := helds(t, e)["txn-h6"]; h.Status != lapse.HeldApplied || !strings.Contains(h.Reason, "applied to order HP-6") {
			t.Errorf("HP-6's held payment: %+v", h)
		}
		drain(t, d) // refunds HP-3's late payment

		// The window passes with no HP-5: in review.
		clk.Advance(engine.DefaultHeldWindow)
		if got := run(); got.Reviewed != 1 || got.Remaining != 0 {
			t.Errorf("a pass after the window = %+v", got)
		}
		if h := helds(t, e)["txn-h5"]; h.Status != lapse.HeldReview || !strings.Contains(h.Reason, "no order HP-5 appeared within 24h0m0s") {
			t.Errorf("HP-5 after the window: %+v", h)
		}
		// A callback that comes later still finds it held: one row.
		if got, err := e.ApplyPayment(ctx, heldNotice("HP-5", "txn-h5", t0)); err != nil || got.Status != lapse.PaymentHeld {
			t.Errorf("HP-5's callback after the window = %+v, %v", got, err)
		}

		// Reconcile: every cent captured is applied, refunded or in review.
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tot := rec.Totals["CNY"]
		if rec.Payments != 4 || rec.Held != 2 || len(rec.Issues) != 0 || tot == nil ||
			*tot != (engine.MoneyTotals{Captured: 1000 + 1000 + 900 + 1000 + 1000 + 1000, Applied: 2000, Refunded: 1000, Review: 900 + 2000}) {
			t.Errorf("reconciliation = %+v, totals %+v", rec, tot)
		}
	})
}

// TestHeldPaymentOperator: an operator refunds a held payment in review
// through its provider, or dismisses it with a note; each action is in the
// audit log with the change it made, and neither is taken twice.
func TestHeldPaymentOperator(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{lose: map[string]bool{"OP-3": true}}
		e := paymentEngine(t, s, clk, prov)
		m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for i := 1; i <= 4; i++ {
			if _, err := e.ApplyPayment(ctx, heldNotice(fmt.Sprintf("OP-%d", i), fmt.Sprintf("txn-o%d", i), clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		hs := helds(t, e)
		// Waiting for its order: not on the desk yet.
		if _, err := e.RefundHeldPayment(ctx, hs["txn-o1"].ID, operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("refund of a held payment still waiting = %v, want ErrHeldNotInReview", err)
		}
		if _, err := e.DismissHeldPayment(ctx, hs["txn-o1"].ID, "mine", operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("dismissal of a held payment still waiting = %v, want ErrHeldNotInReview", err)
		}
		clk.Advance(time.Hour)
		if got, err := m.RunOnce(ctx); err != nil || got.Reviewed != 4 {
			t.Fatalf("a pass after the window = %+v, %v", got, err)
		}
		if rows := auditRows(t, s); len(rows) != 0 {
			t.Fatalf("audit rows before any operator action: %+v", rows)
		}

		// Refunded: in full, under its key, audited.
		actx := engine.WithAudit(ctx, auditEntry("held_payment.refund", fmt.Sprintf("held_payment:%d", hs["txn-o1"].ID)))
		h, err := e.RefundHeldPayment(actx, hs["txn-o1"].ID, operator)
		if err != nil || h.Status != lapse.HeldRefunded || h.By != "operator:alice" || h.RefundID != "re-"+engine.HeldRefundKey(h) {
			t.Fatalf("RefundHeldPayment = %+v, %v", h, err)
		}
		if rows := auditRows(t, s); !engine.AuditWritten(actx) || len(rows) != 1 || rows[0].Action != "held_payment.refund" {
			t.Errorf("audit rows = %+v", rows)
		}
		if n, total := prov.refunded(); n != 1 || total != 1000 {
			t.Errorf("provider refunds = %d, %d", n, total)
		}
		if _, err := e.RefundHeldPayment(ctx, h.ID, operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("refunding twice = %v, want ErrHeldNotInReview", err)
		}
		// The provider's refund callback for it: a replay, acknowledged.
		refunded := func(txn, no string, amount int64) *lapse.PaymentNotice {
			return &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticeRefunded, TxnID: txn, RefundID: "re-x", OrderNo: no,
				Amount: amount, Currency: "CNY", PaidAt: clk.Now(), Raw: []byte(`{}`)}
		}
		if got, err := e.ApplyPayment(ctx, refunded("txn-o1", "OP-1", 1000)); err != nil || got.Status != lapse.PaymentHeld {
			t.Errorf("refund callback of a refunded held payment = %+v, %v", got, err)
		}
		if h := helds(t, e)["txn-o1"]; h.Status != lapse.HeldRefunded || strings.Contains(h.Reason, "contradicted") {
			t.Errorf("txn-o1 after its refund callback: %+v", h)
		}
		// One of part of it that Lapse did not ask for (made in the
		// provider's dashboard): on the desk with the payment, once however
		// often it comes. (One in full is the provider's word that the
		// money went back: TestHeldPaymentRefundedByProvider.)
		for range 2 {
			if _, err := e.ApplyPayment(ctx, refunded("txn-o4", "OP-4", 400)); err != nil {
				t.Fatal(err)
			}
		}
		if h := helds(t, e)["txn-o4"]; h.Status != lapse.HeldReview || strings.Count(h.Reason, "which Lapse did not ask for") != 1 {
			t.Errorf("txn-o4 after a refund callback Lapse did not ask for: %+v", h)
		}
		if _, err := e.ApplyPayment(ctx, refunded("txn-none", "OP-9", 1000)); lapse.ErrorCode(err) != lapse.ENOTFOUND {
			t.Errorf("refund callback of nothing = %v, want not_found", err)
		}

		// Refused by the provider: in review again, with why.
		prov.fail = fmt.Errorf("fake: %w: the payment is too old", lapse.ErrRefused)
		h, err = e.RefundHeldPayment(ctx, hs["txn-o2"].ID, operator)
		if err != nil || h.Status != lapse.HeldReview || !strings.Contains(h.Reason, "refund refused") {
			t.Errorf("a refused refund = %+v, %v", h, err)
		}
		prov.fail = nil

		// Its answer lost: refunding, and the matcher asks under the same key.
		h, err = e.RefundHeldPayment(ctx, hs["txn-o3"].ID, operator)
		if err != nil || h.Status != lapse.HeldRefunding {
			t.Fatalf("a refund whose answer was lost = %+v, %v", h, err)
		}
		if got, err := m.RunOnce(ctx); err != nil || got.Refunded != 1 {
			t.Errorf("a pass with a refund under way = %+v, %v", got, err)
		}
		if h := helds(t, e)["txn-o3"]; h.Status != lapse.HeldRefunded {
			t.Errorf("txn-o3 after the matcher asked = %+v", h)
		}
		if n, _ := prov.refunded(); n != 2 {
			t.Errorf("provider refunds = %d, want 2", n)
		}

		// Dismissed: a note is required; audited.
		if _, err := e.DismissHeldPayment(ctx, hs["txn-o4"].ID, "  ", operator); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("dismissal without a note = %v, want EINVALID", err)
		}
		actx = engine.WithAudit(ctx, auditEntry("held_payment.dismiss", fmt.Sprintf("held_payment:%d", hs["txn-o4"].ID)))
		h, err = e.DismissHeldPayment(actx, hs["txn-o4"].ID, "the customer's bank reversed it", operator)
		if err != nil || h.Status != lapse.HeldDismissed || h.Note != "the customer's bank reversed it" || h.By != "operator:alice" {
			t.Fatalf("DismissHeldPayment = %+v, %v", h, err)
		}
		if rows := auditRows(t, s); len(rows) != 2 || rows[1].Action != "held_payment.dismiss" {
			t.Errorf("audit rows = %+v", rows)
		}
		if _, err := e.DismissHeldPayment(ctx, h.ID, "again", operator); !errors.Is(err, engine.ErrHeldNotInReview) {
			t.Errorf("dismissing twice = %v, want ErrHeldNotInReview", err)
		}
		if _, err := e.DismissHeldPayment(ctx, 9999, "x", operator); !errors.Is(err, lapse.ErrHeldPaymentNotFound) {
			t.Errorf("dismissing a held payment that does not exist = %v", err)
		}

		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; rec.Held != 4 || tot == nil || *tot != (engine.MoneyTotals{Captured: 4000, Refunded: 2000, Review: 2000}) {
			t.Errorf("reconciliation = %+v, totals %+v", rec, tot)
		}
	})
}

// TestHeldPaymentRace: matchers in two processes and the overtaking
// callback sent again, all at once once the order exists: the order is
// paid once, by one payment, and the held payment is applied once.
func TestHeldPaymentRace(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		s := open()
		e1, e2 := paymentEngine(t, s, clk, prov), paymentEngine(t, s, clk, prov)
		ctx := ctxT(t)
		const n = 8
		for i := range n {
			if _, err := e1.ApplyPayment(ctx, heldNotice(fmt.Sprintf("HR-%d", i), fmt.Sprintf("txn-r%d", i), clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(10 * time.Second)
		for i := range n {
			create(t, e1, checkout(fmt.Sprintf("HR-%d", i), 15*time.Minute))
		}
		var wg sync.WaitGroup
		for _, e := range []*engine.Engine{e1, e2} {
			m, err := engine.NewHeldMatcher(e, engine.HeldMatcherConfig{Batch: 3})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if _, err := m.RunOnce(ctx); err != nil {
					t.Error(err)
				}
			})
			wg.Go(func() {
				for i := range n {
					if _, err := e.ApplyPayment(ctx, heldNotice(fmt.Sprintf("HR-%d", i), fmt.Sprintf("txn-r%d", i), t0)); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		m, _ := engine.NewHeldMatcher(e1, engine.HeldMatcherConfig{})
		if got, err := m.RunOnce(ctx); err != nil || got.Remaining != 0 {
			t.Errorf("a last pass = %+v, %v", got, err)
		}
		hs := helds(t, e1)
		for i := range n {
			no := fmt.Sprintf("HR-%d", i)
			o, _ := e1.Order(ctx, no)
			ps, _ := e1.Payments(ctx, no)
			if into, _, _ := history(t, e1, no); o.State != flows.Paid || into[flows.Paid] != 1 || len(ps) != 1 || ps[0].Status != lapse.PaymentApplied {
				t.Errorf("%s: %s, payments %+v", no, o.State, ps)
			}
			if h := hs[fmt.Sprintf("txn-r%d", i)]; h.Status != lapse.HeldApplied {
				t.Errorf("%s's held payment: %+v", no, h)
			}
		}
		rec, err := e1.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; rec.Held != 0 || len(rec.Issues) != 0 || *tot != (engine.MoneyTotals{Captured: n * 1000, Applied: n * 1000}) {
			t.Errorf("reconciliation = %+v, totals %+v", rec, tot)
		}
	})
}
