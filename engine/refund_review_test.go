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

// refundNotice is a provider's callback that refund refundID of o's
// payment txn gave back amount.
func refundNotice(o *lapse.Order, txn, refundID string, amount int64, at time.Time) *lapse.PaymentNotice {
	n := paid(o, txn, at)
	n.Kind, n.RefundID, n.Amount = lapse.NoticeRefunded, refundID, amount
	return n
}

// TestRefundInReviewStays: once a report about a merchant refund disagreed
// with the refund Lapse asked for (its answer, or its callback), the refund
// is in review, and no later report completes it, however well it matches:
// neither its callback, nor the answer to the next attempt, nor the
// query-back after an answer was lost. The order waits, REFUNDING, for an
// operator.
func TestRefundInReviewStays(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{status: lapse.RefundProcessing, lose: map[string]bool{"RV-4": true}}
		odd := map[string]bool{"RV-3": true} // the provider's answer disagrees
		prov.answer = func(r *lapse.RefundRequest, ref *lapse.ProviderRefund) {
			if odd[r.OrderNo] {
				ref.Amount, ref.Status = 1000, lapse.RefundSucceeded
			}
		}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		orders := map[string]*lapse.Order{}
		for _, no := range []string{"RV-1", "RV-2", "RV-3", "RV-4"} {
			o := create(t, e, checkout(no, time.Hour))
			orders[no] = o
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: 400, Reason: "damaged", Key: "k-" + no, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, d) // RV-1 and RV-2 processing; RV-3's answer disagrees; RV-4's is lost
		// A callback for another amount puts RV-1's, RV-2's and RV-4's refunds in review.
		for _, no := range []string{"RV-1", "RV-2", "RV-4"} {
			if _, err := e.ApplyPayment(ctx, refundNotice(orders[no], "txn-"+no, "k-"+no, 500, clk.Now())); err != nil {
				t.Fatal(err)
			}
			if !reviewSays(t, e, no, "5.00 CNY", "4.00 CNY") {
				t.Fatalf("no open review of %s names both amounts: %+v", no, orderReviews(t, e, no))
			}
		}
		// Then the reports match: RV-1's callback, RV-2's next answer, RV-3's callback.
		for _, no := range []string{"RV-1", "RV-3"} {
			if _, err := e.ApplyPayment(ctx, refundNotice(orders[no], "txn-"+no, "k-"+no, 400, clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		prov.mu.Lock()
		prov.status, odd["RV-3"] = lapse.RefundSucceeded, false
		prov.mu.Unlock()
		for range 3 {
			clk.Advance(time.Hour)
			drain(t, d)
		}
		for _, no := range []string{"RV-1", "RV-2", "RV-3", "RV-4"} {
			o, _ := e.Order(ctx, no)
			rs, _ := e.OrderRefunds(ctx, no)
			if o.State != flows.Refunding || len(rs) != 1 || rs[0].Status != lapse.OrderRefundReview {
				t.Errorf("%s is %s with refunds %+v; want REFUNDING, its refund in review", no, o.State, rs)
			}
			if rvs := orderReviews(t, e, no); len(rvs) != 1 || rvs[0].OrderRefundID != rs[0].ID {
				t.Errorf("open reviews of %s = %+v; want the one that holds its refund", no, rvs)
			}
		}
	})
}

// TestRefundNoticeUnasked: a refund callback about a refund Lapse never
// asked for (one made in the provider's dashboard) is on the books: the
// refund is recorded in review with what the provider reported, on its
// order's desk, once however often the callback comes, and reconcile counts
// its money in review, not applied. A callback of what the payment has had
// refunded in all (Stripe's, Alipay's) is unasked only for what Lapse's own
// refunds do not explain.
func TestRefundNoticeUnasked(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		a := create(t, e, checkout("RU-1", time.Hour))
		b := create(t, e, checkout("RU-2", time.Hour))
		for _, o := range []*lapse.Order{a, b} {
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+o.OrderNo, clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		// RU-1: a refund of 3.00 made in the dashboard, reported three times.
		for range 3 {
			if _, err := e.ApplyPayment(ctx, refundNotice(a, "txn-RU-1", "re-dash-1", 300, clk.Now())); err != nil {
				t.Fatalf("an unasked refund's callback = %v, want it acknowledged", err)
			}
		}
		if rs := orderReviews(t, e, "RU-1"); len(rs) != 1 || !reviewSays(t, e, "RU-1", "re-dash-1", "3.00 CNY") {
			t.Errorf("reviews of RU-1 = %+v; want one naming re-dash-1 and 3.00 CNY", rs)
		}
		if o, _ := e.Order(ctx, "RU-1"); o.State != flows.Paid {
			t.Errorf("RU-1 is %s; an unasked refund moves no order", o.State)
		}

		// RU-2: Lapse's own refund of 4.00, then 3.00 more in the dashboard,
		// each reported as the payment's refunded total under the charge's id.
		if _, _, err := e.RefundOrder(ctx, "RU-2", engine.RefundRequest{Amount: 400, Reason: "damaged", Key: "k-RU-2", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		total := func(amount int64) *lapse.PaymentNotice {
			n := refundNotice(b, "txn-RU-2", "ch-RU-2", amount, clk.Now())
			n.RefundedTotal = true
			return n
		}
		if _, err := e.ApplyPayment(ctx, total(400)); err != nil {
			t.Fatal(err)
		}
		if rs := orderReviews(t, e, "RU-2"); len(rs) != 0 {
			t.Errorf("Lapse's own refund, reported in all, put RU-2 in review: %+v", rs)
		}
		for range 2 {
			if _, err := e.ApplyPayment(ctx, total(700)); err != nil {
				t.Fatal(err)
			}
		}
		if rs := orderReviews(t, e, "RU-2"); len(rs) != 1 || !reviewSays(t, e, "RU-2", "3.00 CNY", "7.00 CNY") {
			t.Errorf("reviews of RU-2 = %+v; want one naming 3.00 CNY unasked of 7.00 CNY in all", rs)
		}

		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != 2000 || tot.Applied != 1000 || tot.Refunded != 400 || tot.Review != 600 {
			t.Errorf("totals %+v; want 10.00 applied, 4.00 refunded, 6.00 in review", tot)
		}
	})
}

// TestSettleReview: an operator settles a refund in review through the
// review that holds it, which only that resolves: succeeded ends a full
// refund's order REFUNDED and a partial one's PAID; failed makes the order
// PAID again with what it captured left to refund; an unasked refund's order
// does not move for a part of what it captured, and for all of it ends
// REFUNDED, through the flow's refund path, as Lapse's own refund would. The resolution, the refund and the order's move are one
// change, in the audit log with it. Bad requests change nothing.
func TestSettleReview(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		prov.answer = func(r *lapse.RefundRequest, ref *lapse.ProviderRefund) { ref.Amount++ } // every answer disagrees
		s := open()
		e := paymentEngine(t, s, clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		orders := map[string]*lapse.Order{}
		for no, amount := range map[string]int64{"SR-1": 400, "SR-2": 1000, "SR-3": 400, "SR-4": 0, "SR-5": 0} {
			o := create(t, e, checkout(no, time.Hour))
			orders[no] = o
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
			if amount == 0 {
				continue
			}
			if _, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: amount, Reason: "damaged", Key: "k-" + no, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, d)
		if _, err := e.ApplyPayment(ctx, refundNotice(orders["SR-4"], "txn-SR-4", "re-dash-4", 300, clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ApplyPayment(ctx, refundNotice(orders["SR-5"], "txn-SR-5", "re-dash-5", 1000, clk.Now())); err != nil {
			t.Fatal(err)
		}
		if o, err := e.Order(ctx, "SR-5"); err != nil || o.State != flows.Paid {
			t.Fatalf("an unasked refund of all SR-5 captured, in review: SR-5 is %+v (%v), want PAID until an operator settles it", o, err)
		}
		held := func(no string) *lapse.Review {
			t.Helper()
			rs := orderReviews(t, e, no)
			if len(rs) != 1 || rs[0].OrderRefundID == 0 {
				t.Fatalf("open reviews of %s = %+v; want one that holds its refund", no, rs)
			}
			return rs[0]
		}
		state := func(no string) (lapse.State, *lapse.OrderRefund) {
			o, _ := e.Order(ctx, no)
			rs, _ := e.OrderRefunds(ctx, no)
			return o.State, rs[len(rs)-1]
		}
		rv := held("SR-1")

		// Refused, and nothing changes: resolving it alone, another status,
		// no note, a review that holds no refund.
		if _, err := e.ResolveReview(ctx, rv.ID, "done", operator); !errors.Is(err, engine.ErrReviewHoldsRefund) {
			t.Errorf("ResolveReview of a refund's review = %v, want ErrReviewHoldsRefund", err)
		}
		for _, c := range []struct {
			to   lapse.OrderRefundStatus
			note string
		}{{lapse.OrderRefundRequested, "ask again"}, {lapse.OrderRefundReview, "hm"}, {"", "x"}, {lapse.OrderRefundSucceeded, " \n "}} {
			if _, err := e.SettleReview(ctx, rv.ID, c.to, c.note, operator); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("SettleReview(%q, %q) = %v, want invalid", c.to, c.note, err)
			}
		}
		wrong := paid(orders["SR-1"], "txn-SR-1b", clk.Now())
		wrong.Currency = "USD"
		if _, err := e.ApplyPayment(ctx, wrong); err != nil {
			t.Fatal(err)
		}
		for _, r := range orderReviews(t, e, "SR-1") {
			if r.OrderRefundID == 0 {
				if _, err := e.SettleReview(ctx, r.ID, lapse.OrderRefundSucceeded, "ok", operator); !errors.Is(err, engine.ErrReviewHoldsNoRefund) {
					t.Errorf("SettleReview of a payment's review = %v, want ErrReviewHoldsNoRefund", err)
				}
			}
		}
		if _, err := e.SettleReview(ctx, rv.ID+1000, lapse.OrderRefundSucceeded, "ok", operator); !errors.Is(err, lapse.ErrReviewNotFound) {
			t.Errorf("SettleReview(missing) = %v, want ErrReviewNotFound", err)
		}
		if st, x := state("SR-1"); st != flows.Refunding || x.Status != lapse.OrderRefundReview || len(auditRows(t, s)) != 0 {
			t.Fatalf("refusals changed SR-1: %s, %+v", st, x)
		}

		// Succeeded, in part: PAID, with the audit row.
		clk.Advance(time.Minute)
		actx := engine.WithAudit(ctx, auditEntry("review.settle", "review:1"))
		got, err := e.SettleReview(actx, rv.ID, lapse.OrderRefundSucceeded, "the dashboard shows 4.00 CNY refunded", operator)
		if err != nil || got.ID != rv.ID || got.ResolvedAt == nil || !got.ResolvedAt.Equal(clk.Now()) || got.ResolvedBy != "operator:alice" {
			t.Fatalf("SettleReview = %+v, %v", got, err)
		}
		if st, x := state("SR-1"); st != flows.Paid || x.Status != lapse.OrderRefundSucceeded {
			t.Errorf("settled succeeded, SR-1 is %s, its refund %+v; want PAID, succeeded", st, x)
		}
		if rows := auditRows(t, s); !engine.AuditWritten(actx) || len(rows) != 1 || rows[0].Action != "review.settle" {
			t.Errorf("audit rows = %+v (written %v), want the settlement's", rows, engine.AuditWritten(actx))
		}
		if _, err := e.SettleReview(ctx, rv.ID, lapse.OrderRefundFailed, "no, it failed", operator); !errors.Is(err, lapse.ErrReviewResolved) {
			t.Errorf("settling twice = %v, want ErrReviewResolved", err)
		}
		if _, x := state("SR-1"); x.Status != lapse.OrderRefundSucceeded {
			t.Errorf("a refused second settlement moved the refund to %s", x.Status)
		}

		// Succeeded, in full: REFUNDED.
		if _, err := e.SettleReview(ctx, held("SR-2").ID, lapse.OrderRefundSucceeded, "all went back", operator); err != nil {
			t.Fatal(err)
		}
		if st, _ := state("SR-2"); st != flows.Refunded {
			t.Errorf("settled succeeded in full, SR-2 is %s, want REFUNDED", st)
		}

		// Failed: PAID again, the operator's note kept, all left to refund.
		if _, err := e.SettleReview(ctx, held("SR-3").ID, lapse.OrderRefundFailed, "the provider reversed it", operator); err != nil {
			t.Fatal(err)
		}
		if st, x := state("SR-3"); st != flows.Paid || x.Status != lapse.OrderRefundFailed || !strings.Contains(x.Failure, "the provider reversed it") {
			t.Errorf("settled failed, SR-3 is %s, its refund %+v", st, x)
		}
		if _, _, err := e.RefundOrder(ctx, "SR-3", engine.RefundRequest{Amount: 1000, Reason: "again", Key: "k-SR-3b", By: app}); err != nil {
			t.Errorf("refunding all of SR-3 after its refund failed = %v", err)
		}

		// An unasked refund: its order stays as it is.
		if _, err := e.SettleReview(ctx, held("SR-4").ID, lapse.OrderRefundSucceeded, "made in the dashboard by Bob", operator); err != nil {
			t.Fatal(err)
		}
		if st, x := state("SR-4"); st != flows.Paid || x.Status != lapse.OrderRefundSucceeded || x.Amount != 300 {
			t.Errorf("settled succeeded, SR-4 is %s, its refund %+v", st, x)
		}
		// An unasked refund of all it captured, settled succeeded: REFUNDED,
		// by the operator, through the refund path.
		if _, err := e.SettleReview(ctx, held("SR-5").ID, lapse.OrderRefundSucceeded, "the dashboard shows 10.00 CNY refunded", operator); err != nil {
			t.Fatal(err)
		}
		if st, x := state("SR-5"); st != flows.Refunded || x.Status != lapse.OrderRefundSucceeded || x.Amount != 1000 {
			t.Errorf("an unasked refund of all SR-5 captured, settled succeeded: SR-5 is %s, its refund %+v; want REFUNDED, succeeded", st, x)
		}
		ts, err := e.Transitions(ctx, "SR-5")
		if err != nil {
			t.Fatal(err)
		}
		last := ts[len(ts)-2:]
		if last[0].Event != flows.Refund || last[1].ToState != flows.Refunded || last[1].FiredBy != operator.FiredBy || last[1].Actor != operator.Name {
			t.Errorf("SR-5's last transitions %+v; want the refund path, fired by the operator", last)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// SR-3's second refund (k-SR-3b) is asked and not answered yet (no
		// deliverer ran since): its 10.00 may have gone back, so it is not
		// settled, and named as an issue, rather than counted applied.
		tot := rec.Totals["CNY"]
		if tot.Refunded != 400+1000+300+1000 || tot.Review != 0 || tot.Open != 1000 || tot.Applied != 5000-2700-1000 {
			t.Errorf("totals %+v", tot)
		}
		if len(rec.Issues) != 1 || rec.Issues[0].OrderNo != "SR-3" || !strings.Contains(rec.Issues[0].Problem, "k-SR-3b") {
			t.Errorf("issues %+v; want SR-3's refund k-SR-3b, asked and not answered", rec.Issues)
		}
		if tot := rec.Totals["USD"]; tot.Review != 1000 { // SR-1's second payment, on the desk
			t.Errorf("USD totals %+v", tot)
		}
	})
}

// TestRefundNoticeUnaskedSameID: providers number refunds per payment as
// often as not (Alipay's out_biz_no is unique within its trade only; a
// provider's own "r-1"), so the refunds Lapse never asked for of two
// payments may carry one refund id. Each is on the books, in review on its
// own order: the second was taken for the first reported again, acknowledged
// and recorded nowhere, its order still counted as holding all it captured.
func TestRefundNoticeUnaskedSameID(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		for _, no := range []string{"RS-1", "RS-2", "RS-3", "RS-4"} {
			o := create(t, e, checkout(no, time.Hour))
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
			n := refundNotice(o, "txn-"+no, "r-1", 300, clk.Now())
			n.RefundedTotal = no == "RS-3" || no == "RS-4" // Alipay's refund_fee, under the same out_biz_no
			for range 2 {
				if _, err := e.ApplyPayment(ctx, n); err != nil {
					t.Fatalf("%s: an unasked refund's callback = %v, want it acknowledged", no, err)
				}
			}
			rs, err := e.OrderRefunds(ctx, no)
			if err != nil || len(rs) != 1 || rs[0].Status != lapse.OrderRefundReview || rs[0].Amount != 300 {
				t.Errorf("refunds of %s = %+v, %v; want the unasked one of 3.00 in review", no, rs, err)
			}
			if rvs := orderReviews(t, e, no); len(rvs) != 1 || !reviewSays(t, e, no, "r-1", "3.00 CNY") {
				t.Errorf("reviews of %s = %+v; want one naming r-1 and 3.00 CNY", no, rvs)
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != 4000 || tot.Applied != 2800 || tot.Review != 1200 {
			t.Errorf("totals %+v; want 28.00 applied and 12.00 in review", tot)
		}
	})
}
