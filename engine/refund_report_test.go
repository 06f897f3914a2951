package engine_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// refundDelivery returns the refund subscriber's delivery of order no.
func refundDelivery(t *testing.T, e *engine.Engine, no string) *lapse.Delivery {
	t.Helper()
	ds, err := e.Deliveries(ctxT(t), no)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Subscriber == engine.RefundSubscriber {
			return d.Delivery
		}
	}
	t.Fatalf("order %s has no refund delivery", no)
	return nil
}

// reviewSays reports whether an open review of order no names every one of
// says.
func reviewSays(t *testing.T, e *engine.Engine, no string, says ...string) bool {
	t.Helper()
	return slices.ContainsFunc(orderReviews(t, e, no), func(r *lapse.Review) bool {
		for _, s := range says {
			if !strings.Contains(r.Reason, s) {
				return false
			}
		}
		return true
	})
}

// TestRefundReportDisagreesLate: a provider reports the refund of a late
// payment for another amount (or none), currency or payment than Lapse
// asked for, in its answer to the refund, to the query-back after a lost
// answer, or to the follow-up of a refund still processing. None completes
// the refund: the payment is in review with a reason naming what the
// provider said and what Lapse asked, and the books reconcile.
func TestRefundReportDisagreesLate(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{lose: map[string]bool{"RL-5": true}}
		later := false // RL-6's refund, processing at first, has finished
		odd := map[string]func(*lapse.ProviderRefund){
			"RL-1": func(r *lapse.ProviderRefund) { r.Amount-- },
			"RL-2": func(r *lapse.ProviderRefund) { r.Currency = "USD" },
			"RL-3": func(r *lapse.ProviderRefund) { r.Amount = 0 },
			"RL-4": func(r *lapse.ProviderRefund) { r.TxnID = "txn-other" },
			"RL-5": func(r *lapse.ProviderRefund) { r.Amount *= 2 },
			"RL-6": func(r *lapse.ProviderRefund) {
				if !later {
					r.Status = lapse.RefundProcessing
				} else {
					r.Amount = 100
				}
			},
		}
		prov.answer = func(r *lapse.RefundRequest, ref *lapse.ProviderRefund) {
			if f := odd[r.OrderNo]; f != nil {
				f(ref)
			}
		}
		says := map[string][]string{
			"RL-1": {"9.99 CNY", "10.00 CNY"},
			"RL-2": {"10.00 USD", "10.00 CNY"},
			"RL-3": {"without an amount", "10.00 CNY"},
			"RL-4": {"txn-other", "txn-RL-4", "10.00 CNY"},
			"RL-5": {"20.00 CNY", "10.00 CNY"},
			"RL-6": {"1.00 CNY", "10.00 CNY"},
		}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		for _, no := range []string{"RL-0", "RL-1", "RL-2", "RL-3", "RL-4", "RL-5", "RL-6"} {
			o := create(t, e, checkout(no, time.Hour))
			if _, err := e.Fire(ctx, no, engine.Fire{Event: flows.Cancel, By: app}); err != nil {
				t.Fatal(err)
			}
			if p, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil || p.Status != lapse.PaymentLate {
				t.Fatalf("payment of %s = %+v, %v; want late", no, p, err)
			}
		}
		drain(t, d)
		if p, _ := e.Store().PaymentGet(ctx, "sandbox", "txn-RL-6"); p.Status != lapse.PaymentRefunding {
			t.Fatalf("RL-6's payment is %s, want refunding", p.Status)
		}
		prov.mu.Lock()
		later = true
		prov.mu.Unlock()
		clk.Advance(2 * time.Minute)
		drain(t, d)

		if p, _ := e.Store().PaymentGet(ctx, "sandbox", "txn-RL-0"); p.Status != lapse.PaymentRefunded {
			t.Errorf("RL-0's payment, refunded as asked, is %s", p.Status)
		}
		for no, said := range says {
			p, err := e.Store().PaymentGet(ctx, "sandbox", "txn-"+no)
			if err != nil || p.Status != lapse.PaymentReview || p.RefundedAt != nil {
				t.Errorf("%s's payment = %+v, %v; want it in review", no, p, err)
				continue
			}
			for _, s := range said {
				if !strings.Contains(p.Reason, s) {
					t.Errorf("%s's payment reason %q does not name %s", no, p.Reason, s)
				}
			}
			if !reviewSays(t, e, no, said...) {
				t.Errorf("no open review of %s names %q: %+v", no, said, orderReviews(t, e, no))
			}
			if dl := refundDelivery(t, e, no); dl.Status != lapse.DeliveryDone {
				t.Errorf("%s's refund delivery is %s, want done: the payment is on the desk", no, dl.Status)
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != 7000 || tot.Refunded != 1000 || tot.Review != 6000 {
			t.Errorf("totals %+v", tot)
		}
	})
}

// TestRefundReportDisagreesOrder: the same for merchant refunds. A report
// for another amount (more, less, none), currency or payment, whatever its
// status, and whether it answers the refund, the query-back after a lost
// answer, or a refund still processing, neither ends the order REFUNDED nor
// makes it PAID again nor fails the refund: the refund is in review, on the
// desk naming both amounts, its delivery done, and the order waits,
// REFUNDING, for an operator. Reconcile counts the refund in review.
func TestRefundReportDisagreesOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{lose: map[string]bool{"RM-7": true}}
		odd := map[string]func(*lapse.ProviderRefund){
			"RM-1": func(r *lapse.ProviderRefund) { r.Amount = 1000 },
			"RM-2": func(r *lapse.ProviderRefund) { r.Amount = 400 },
			"RM-3": func(r *lapse.ProviderRefund) { r.Currency = "USD" },
			"RM-4": func(r *lapse.ProviderRefund) { r.Amount = 0 },
			"RM-5": func(r *lapse.ProviderRefund) { r.TxnID = "txn-other" },
			"RM-6": func(r *lapse.ProviderRefund) { r.Amount, r.Status = 1000, lapse.RefundFailed },
			"RM-7": func(r *lapse.ProviderRefund) { r.Amount = 1000 },
			"RM-8": func(r *lapse.ProviderRefund) { r.Amount, r.Status = 1000, lapse.RefundProcessing },
		}
		prov.answer = func(r *lapse.RefundRequest, ref *lapse.ProviderRefund) {
			if f := odd[r.OrderNo]; f != nil {
				f(ref)
			}
		}
		asked := map[string]int64{"RM-0": 400, "RM-2": 1000}
		says := map[string][]string{
			"RM-1": {"10.00 CNY", "4.00 CNY"},
			"RM-2": {"4.00 CNY", "10.00 CNY"},
			"RM-3": {"4.00 USD", "4.00 CNY"},
			"RM-4": {"without an amount", "4.00 CNY"},
			"RM-5": {"txn-other", "txn-RM-5", "4.00 CNY"},
			"RM-6": {"10.00 CNY", "4.00 CNY"},
			"RM-7": {"10.00 CNY", "4.00 CNY"},
			"RM-8": {"10.00 CNY", "4.00 CNY"},
		}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		for _, no := range []string{"RM-0", "RM-1", "RM-2", "RM-3", "RM-4", "RM-5", "RM-6", "RM-7", "RM-8"} {
			o := create(t, e, checkout(no, time.Hour))
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
			amount := asked[no]
			if amount == 0 {
				amount = 400
			}
			if _, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: amount, Reason: "damaged", Key: "k-" + no, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, d)
		clk.Advance(2 * time.Minute)
		drain(t, d)

		if o, _ := e.Order(ctx, "RM-0"); o.State != flows.Paid {
			t.Errorf("RM-0, refunded in part as asked, is %s", o.State)
		}
		for no, said := range says {
			o, _ := e.Order(ctx, no)
			rs, _ := e.OrderRefunds(ctx, no)
			if o.State != flows.Refunding || len(rs) != 1 || rs[0].Status != lapse.OrderRefundReview {
				t.Errorf("%s is %s with refunds %+v; want REFUNDING, its refund in review", no, o.State, rs)
			}
			if dl := refundDelivery(t, e, no); dl.Status != lapse.DeliveryDone {
				t.Errorf("%s's refund delivery is %s, want done: the refund is on the desk", no, dl.Status)
			}
			if rvs := orderReviews(t, e, no); len(rvs) != 1 || rvs[0].OrderRefundID != rs[0].ID || !reviewSays(t, e, no, said...) {
				t.Errorf("open reviews of %s = %+v; want one holding its refund, naming %q", no, rvs, said)
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		// In review: RM-2's 10.00 CNY and seven refunds of 4.00 CNY.
		if tot := rec.Totals["CNY"]; tot.Captured != 9000 || tot.Applied != 4800 || tot.Refunded != 400 || tot.Review != 3800 {
			t.Errorf("totals %+v", tot)
		}
	})
}

// TestRefundNoticeDisagreesOrder: a refund callback about a merchant refund
// that reports another amount than the refund Lapse asked for completes
// nothing: the refund is in review, on the desk once however often the
// callback comes, naming both amounts, and the order does not move. The
// refund's own notice does not complete it then; an operator settles it.
// A notice for another amount about a refund that succeeded is on the desk
// too, and moves nothing.
func TestRefundNoticeDisagreesOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{status: lapse.RefundProcessing}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RN-1", time.Hour))
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-RN-1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.RefundOrder(ctx, "RN-1", engine.RefundRequest{Amount: 400, Reason: "damaged", Key: "k-n1", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d) // processing: still requested
		notice := func(refundID string, amount int64) *lapse.PaymentNotice {
			return refundNotice(o, "txn-RN-1", refundID, amount, clk.Now())
		}
		state := func() (lapse.State, lapse.OrderRefundStatus) {
			o, _ := e.Order(ctx, "RN-1")
			rs, _ := e.OrderRefunds(ctx, "RN-1")
			return o.State, rs[0].Status
		}
		// Found by Lapse's key, then by the provider's refund id.
		for _, id := range []string{"k-n1", "re-k-n1"} {
			if p, err := e.ApplyPayment(ctx, notice(id, 500)); err != nil || p.Status != lapse.PaymentApplied {
				t.Errorf("a refund notice for another amount = %+v, %v", p, err)
			}
		}
		if st, rst := state(); st != flows.Refunding || rst != lapse.OrderRefundReview {
			t.Errorf("after notices for another amount RN-1 is %s, its refund %s; want REFUNDING, in review", st, rst)
		}
		rs := orderReviews(t, e, "RN-1")
		if len(rs) != 1 || rs[0].OrderRefundID == 0 || !reviewSays(t, e, "RN-1", "5.00 CNY", "4.00 CNY") {
			t.Fatalf("reviews of RN-1 = %+v; want one holding the refund, naming 5.00 CNY and 4.00 CNY", rs)
		}
		// The refund's own notice completes nothing now: an operator settles it.
		if _, err := e.ApplyPayment(ctx, notice("re-k-n1", 400)); err != nil {
			t.Fatal(err)
		}
		if st, rst := state(); st != flows.Refunding || rst != lapse.OrderRefundReview || len(orderReviews(t, e, "RN-1")) != 1 {
			t.Errorf("after the refund's notice RN-1 is %s, its refund %s; want REFUNDING, in review, one review", st, rst)
		}
		if _, err := e.SettleReview(ctx, rs[0].ID, lapse.OrderRefundSucceeded, "4.00 CNY went back, as the dashboard shows", operator); err != nil {
			t.Fatal(err)
		}
		if st, rst := state(); st != flows.Paid || rst != lapse.OrderRefundSucceeded {
			t.Errorf("after the operator settled it RN-1 is %s, its refund %s; want PAID, succeeded", st, rst)
		}
		// Another amount after that: on the desk, and nothing moves.
		if _, err := e.ApplyPayment(ctx, notice("k-n1", 300)); err != nil {
			t.Fatal(err)
		}
		if st, rst := state(); st != flows.Paid || rst != lapse.OrderRefundSucceeded {
			t.Errorf("after a late notice for another amount RN-1 is %s, its refund %s", st, rst)
		}
		if rs := orderReviews(t, e, "RN-1"); len(rs) != 1 || !reviewSays(t, e, "RN-1", "3.00 CNY", "4.00 CNY") {
			t.Errorf("reviews of RN-1 = %+v; want one naming 3.00 CNY and 4.00 CNY", rs)
		}

		// Providers whose notice carries what the payment has had refunded
		// in all (Stripe, Alipay): the second refund's is for both.
		if _, _, err := e.RefundOrder(ctx, "RN-1", engine.RefundRequest{Amount: 600, Reason: "damaged", Key: "k-n2", By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute) // the first refund's delivery, due again, goes first
		drain(t, d)
		total := func(refundID string, amount int64) *lapse.PaymentNotice {
			n := notice(refundID, amount)
			n.RefundedTotal = true
			return n
		}
		if _, err := e.ApplyPayment(ctx, total("re-k-n2", 1000)); err != nil {
			t.Fatal(err)
		}
		if o, _ := e.Order(ctx, "RN-1"); o.State != flows.Refunded {
			t.Errorf("after the second refund's notice RN-1 is %s, want REFUNDED", o.State)
		}
		// The first refund's notice, sent again late, says what was
		// refunded in all by then.
		if _, err := e.ApplyPayment(ctx, total("k-n1", 400)); err != nil {
			t.Fatal(err)
		}
		if rs := orderReviews(t, e, "RN-1"); len(rs) != 1 {
			t.Errorf("reviews of RN-1 = %+v; want still 1", rs)
		}
		// The second's, saying less than both: on the desk.
		if _, err := e.ApplyPayment(ctx, total("k-n2", 600)); err != nil {
			t.Fatal(err)
		}
		if rs := orderReviews(t, e, "RN-1"); len(rs) != 2 || !reviewSays(t, e, "RN-1", "6.00 CNY refunded of the payment in all", "10.00 CNY") {
			t.Errorf("reviews of RN-1 = %+v; want a second naming 6.00 CNY in all and 10.00 CNY", rs)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot.Applied != 0 || tot.Refunded != 1000 {
			t.Errorf("totals %+v", tot)
		}
	})
}

// TestRefundNoticeOfFailedRefund: a refund the provider refused is recorded
// failed and its order paid again; a later callback saying that refund went
// through after all contradicts the books, and is on the desk.
func TestRefundNoticeOfFailedRefund(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{fail: lapse.ErrRefused}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RF-1", time.Hour))
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-RF-1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.RefundOrder(ctx, "RF-1", engine.RefundRequest{Amount: 400, Reason: "damaged", Key: "k-f1", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if rs, _ := e.OrderRefunds(ctx, "RF-1"); rs[0].Status != lapse.OrderRefundFailed {
			t.Fatalf("refund %+v, want failed", rs[0])
		}
		n := paid(o, "txn-RF-1", clk.Now())
		n.Kind, n.RefundID, n.Amount = lapse.NoticeRefunded, "k-f1", 400
		if _, err := e.ApplyPayment(ctx, n); err != nil {
			t.Fatal(err)
		}
		if o, _ := e.Order(ctx, "RF-1"); o.State != flows.Paid {
			t.Errorf("RF-1 is %s", o.State)
		}
		if !reviewSays(t, e, "RF-1", "k-f1", "failed", "4.00 CNY") {
			t.Errorf("no open review of RF-1 names the failed refund: %+v", orderReviews(t, e, "RF-1"))
		}
	})
}
