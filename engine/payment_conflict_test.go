package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// orderReviews returns the open reviews of order no.
func orderReviews(t *testing.T, e *engine.Engine, no string) []*lapse.Review {
	t.Helper()
	o, err := e.Order(ctxT(t), no)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := e.Store().ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestPaymentConflicts: a notice that reuses a provider transaction id with
// another order, amount or currency than the payment recorded under it is
// not taken for a replay: nothing moves, and it waits for an operator in a
// review. A true replay changes nothing and asks no one.
func TestPaymentConflicts(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		a := create(t, e, checkout("PC-1", 15*time.Minute))
		b := create(t, e, checkout("PC-2", 15*time.Minute))
		pay, err := e.ApplyPayment(ctx, paid(a, "tp-1", clk.Now()))
		if err != nil || pay.Status != lapse.PaymentApplied {
			t.Fatalf("ApplyPayment = %+v, %v", pay, err)
		}
		// A true replay: the payment as recorded, and no review.
		if again, err := e.ApplyPayment(ctx, paid(a, "tp-1", clk.Now().Add(time.Second))); err != nil || again.ID != pay.ID {
			t.Errorf("replay = %+v, %v", again, err)
		}
		if rs := orderReviews(t, e, "PC-1"); len(rs) != 0 {
			t.Errorf("a replay was put in review: %+v", rs)
		}

		// The same transaction for another order: PC-2 is not paid, and an
		// operator is told on PC-2, the order it claims to pay. Sent again,
		// it is the same review.
		for range 2 {
			if _, err := e.ApplyPayment(ctx, paid(b, "tp-1", clk.Now())); err != nil {
				t.Errorf("conflicting notice for another order = %v", err)
			}
		}
		if o, _ := e.Order(ctx, "PC-2"); o.State != flows.Unpaid {
			t.Errorf("PC-2 is %s after a conflicting notice", o.State)
		}
		if ps, _ := e.Payments(ctx, "PC-2"); len(ps) != 0 {
			t.Errorf("payments of PC-2: %+v", ps)
		}
		if rs := orderReviews(t, e, "PC-2"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "tp-1") || !strings.Contains(rs[0].Reason, "PC-1") {
			t.Errorf("reviews of PC-2 = %+v; want one naming tp-1 and PC-1", rs)
		}

		// The same transaction and order with another amount, or currency:
		// on PC-1's desk, PC-1 paid once.
		n := paid(a, "tp-1", clk.Now())
		n.Amount = 999
		if _, err := e.ApplyPayment(ctx, n); err != nil {
			t.Errorf("conflicting amount = %v", err)
		}
		n = paid(a, "tp-1", clk.Now())
		n.Currency = "USD"
		if _, err := e.ApplyPayment(ctx, n); err != nil {
			t.Errorf("conflicting currency = %v", err)
		}
		// For an order that does not exist: on the desk of the order the
		// transaction paid.
		n = paid(a, "tp-1", clk.Now())
		n.OrderNo = "PC-NOPE"
		if _, err := e.ApplyPayment(ctx, n); err != nil {
			t.Errorf("conflicting notice for an unknown order = %v", err)
		}
		rs := orderReviews(t, e, "PC-1")
		if len(rs) != 3 {
			t.Errorf("reviews of PC-1 = %+v; want 3", rs)
		}
		for _, want := range []string{"9.99 CNY", "10.00 USD", "PC-NOPE"} {
			if !slices.ContainsFunc(rs, func(r *lapse.Review) bool { return strings.Contains(r.Reason, want) }) {
				t.Errorf("no review of PC-1 names %s: %+v", want, rs)
			}
		}
		if into, _, _ := history(t, e, "PC-1"); into[flows.Paid] != 1 {
			t.Errorf("PC-1 moved: %v", into)
		}
		if got, err := e.Store().PaymentGet(ctx, "sandbox", "tp-1"); err != nil || got.OrderNo != "PC-1" || got.Amount != a.Amount ||
			got.Currency != a.Currency || got.Status != lapse.PaymentApplied {
			t.Errorf("tp-1 after the conflicts = %+v, %v", got, err)
		}

		// Refund notices: one for another order or amount than the late
		// payment's completes nothing and is on the desk; the refund
		// subscriber still refunds it, once, and its own notice is taken.
		c := create(t, e, checkout("PC-3", time.Minute))
		if _, err := e.Fire(ctx, "PC-3", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if late, err := e.ApplyPayment(ctx, paid(c, "tp-3", clk.Now())); err != nil || late.Status != lapse.PaymentLate {
			t.Fatalf("late payment = %+v, %v", late, err)
		}
		refund := func(o *lapse.Order, amount int64) *lapse.PaymentNotice {
			n := paid(o, "tp-3", clk.Now())
			n.Kind, n.RefundID, n.Amount = lapse.NoticeRefunded, "rf-3", amount
			return n
		}
		for _, n := range []*lapse.PaymentNotice{refund(b, c.Amount), refund(c, c.Amount/2)} {
			got, err := e.ApplyPayment(ctx, n)
			if err != nil || got.Status != lapse.PaymentLate {
				t.Errorf("conflicting refund notice (%s, %d) = %+v, %v; want the payment still late", n.OrderNo, n.Amount, got, err)
			}
		}
		if rs := orderReviews(t, e, "PC-3"); len(rs) != 2 {
			t.Errorf("reviews of PC-3 = %+v; want 2", rs)
		}
		drain(t, d)
		if got, err := e.ApplyPayment(ctx, refund(c, c.Amount)); err != nil || got.Status != lapse.PaymentRefunded {
			t.Errorf("the refund's own notice = %+v, %v", got, err)
		}
		if n, total := prov.refunded(); n != 1 || total != c.Amount {
			t.Errorf("provider refunded %d payments, %d in all; want 1, %d", n, total, c.Amount)
		}
		if rs := orderReviews(t, e, "PC-3"); len(rs) != 2 {
			t.Errorf("reviews of PC-3 after its refund = %+v; want 2", rs)
		}
	})
}

// TestPaymentConflictsRace sends, for each of several transactions, a
// notice for one order and a notice for another at once: one pays its
// order, and the other is in review on its own, whichever wins.
func TestPaymentConflictsRace(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		const n = 20
		var wg sync.WaitGroup
		for i := range n {
			txn := fmt.Sprintf("tr-%d", i)
			for _, no := range []string{txn + "-a", txn + "-b"} {
				o := create(t, e, checkout(no, 15*time.Minute))
				wg.Go(func() {
					if _, err := e.ApplyPayment(ctx, paid(o, txn, clk.Now())); err != nil {
						t.Errorf("ApplyPayment(%s, %s) = %v", txn, no, err)
					}
				})
			}
		}
		wg.Wait()
		for i := range n {
			txn := fmt.Sprintf("tr-%d", i)
			pay, err := e.Store().PaymentGet(ctx, "sandbox", txn)
			if err != nil || pay.Status != lapse.PaymentApplied {
				t.Fatalf("%s = %+v, %v", txn, pay, err)
			}
			for _, no := range []string{txn + "-a", txn + "-b"} {
				o, _ := e.Order(ctx, no)
				rs := orderReviews(t, e, no)
				switch {
				case no == pay.OrderNo && (o.State != flows.Paid || len(rs) != 0):
					t.Errorf("%s, paid by %s: %s with reviews %+v", no, txn, o.State, rs)
				case no != pay.OrderNo && (o.State != flows.Unpaid || len(rs) != 1):
					t.Errorf("%s, not paid by %s: %s with reviews %+v", no, txn, o.State, rs)
				}
			}
		}
	})
}

// TestPaymentForFlowWithoutPayments: a verified payment for an order whose
// flow takes no payments (a group buy, whose members are charged) is on the
// books, in review, not refused; the group does not move.
func TestPaymentForFlowWithoutPayments(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		g := create(t, e, groupReq("PG-1", time.Hour))
		for range 2 {
			pay, err := e.ApplyPayment(ctx, paid(g, "tg-1", clk.Now()))
			if err != nil || pay.Status != lapse.PaymentReview || !strings.Contains(pay.Reason, "takes no payments") {
				t.Fatalf("payment for a group buy = %+v, %v; want it in review", pay, err)
			}
		}
		if rs := orderReviews(t, e, "PG-1"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "tg-1") {
			t.Errorf("reviews of PG-1 = %+v", rs)
		}
		if o, _ := e.Order(ctx, "PG-1"); o.State != g.State || o.Version != g.Version {
			t.Errorf("PG-1 moved to %s (version %d)", o.State, o.Version)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals[g.Currency]; tot == nil || tot.Captured != g.Amount || tot.Review != g.Amount {
			t.Errorf("reconciliation totals = %+v; want %d captured, in review", tot, g.Amount)
		}
	})
}

// TestPaymentTimeContradictions: a payment's provider time that its order
// cannot have (before the order was created, or further ahead of Lapse's
// clock than clocks drift) is a contradiction: on the books in review, the
// order untouched. The same second as the order's creation is not (most
// providers report whole seconds), and a time a little ahead is judged as
// given: it can only make a payment later, never bring a late one in time.
func TestPaymentTimeContradictions(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		early := create(t, e, checkout("PT-EARLY", 15*time.Minute))
		ahead := create(t, e, checkout("PT-AHEAD", 15*time.Minute))
		drift := create(t, e, checkout("PT-DRIFT", 15*time.Minute))
		short := create(t, e, checkout("PT-SHORT", 2*time.Minute))
		clk.Set(t0.Add(500 * time.Millisecond))
		second := create(t, e, checkout("PT-SECOND", 15*time.Minute))
		clk.Set(t0.Add(time.Minute))

		for _, c := range []struct {
			o    *lapse.Order
			at   time.Time
			want lapse.PaymentStatus
			why  string
		}{
			{early, t0.Add(-time.Hour), lapse.PaymentReview, "before order PT-EARLY was created"},
			{ahead, clk.Now().Add(10 * time.Minute), lapse.PaymentReview, "ahead of"},
			{drift, clk.Now().Add(4 * time.Minute), lapse.PaymentApplied, ""},
			{short, clk.Now().Add(4 * time.Minute), lapse.PaymentLate, "deadline"},
			{second, t0, lapse.PaymentApplied, ""},
		} {
			for range 2 {
				pay, err := e.ApplyPayment(ctx, paid(c.o, "tt-"+c.o.OrderNo, c.at))
				if err != nil || pay.Status != c.want || !strings.Contains(pay.Reason, c.why) {
					t.Fatalf("%s paid at %s = %+v, %v; want %s (%q)", c.o.OrderNo, c.at.Format(time.RFC3339Nano), pay, err, c.want, c.why)
				}
			}
			o, _ := e.Order(ctx, c.o.OrderNo)
			rs := orderReviews(t, e, c.o.OrderNo)
			switch c.want {
			case lapse.PaymentReview:
				if o.State != flows.Unpaid || o.Version != c.o.Version || len(rs) != 1 || !strings.Contains(rs[0].Reason, c.why) {
					t.Errorf("%s: %s (version %d), reviews %+v; want it untouched, one review", c.o.OrderNo, o.State, o.Version, rs)
				}
			case lapse.PaymentApplied:
				if o.State != flows.Paid || len(rs) != 0 {
					t.Errorf("%s: %s, reviews %+v; want PAID", c.o.OrderNo, o.State, rs)
				}
			}
		}
	})
}

// TestApplyPaymentUnreadable: a verified notice Lapse cannot read in full
// records no money and moves nothing: it is on the desk of its order, or of
// its transaction's payment when that is recorded, once however often it
// comes; for an order that does not exist it is ENOTFOUND, sent again. A
// payment in a currency that is no code is recorded in review, its
// currency kept as sent within what a store keeps.
func TestApplyPaymentUnreadable(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		a := create(t, e, checkout("UR-1", time.Hour))
		b := create(t, e, checkout("UR-2", time.Hour))
		if _, err := e.ApplyPayment(ctx, paid(b, "txn-UR-2", clk.Now())); err != nil {
			t.Fatal(err)
		}
		odd := func(o *lapse.Order, txn, refundID, why string) *lapse.PaymentNotice {
			return &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticeUnreadable, TxnID: txn, RefundID: refundID, OrderNo: o.OrderNo,
				Currency: "CNY", Review: why, Raw: []byte(`{}`)}
		}
		for range 3 {
			if p, err := e.ApplyPayment(ctx, odd(a, "txn-UR-1", "", `amount "10.00" is not a positive integer number of minor units`)); err != nil || p != nil {
				t.Fatalf("an unreadable notice = %+v, %v; want it taken, with no payment", p, err)
			}
			if _, err := e.ApplyPayment(ctx, odd(b, "txn-UR-2", "re-9", `refund_fee "1,000.00" is not a positive amount`)); err != nil {
				t.Fatal(err)
			}
		}
		if rs := orderReviews(t, e, "UR-1"); len(rs) != 1 || !reviewSays(t, e, "UR-1", "txn-UR-1", `amount "10.00"`) {
			t.Errorf("reviews of UR-1 = %+v; want one naming the transaction and the amount as sent", rs)
		}
		if rs := orderReviews(t, e, "UR-2"); len(rs) != 1 || !reviewSays(t, e, "UR-2", "txn-UR-2", "re-9", `refund_fee "1,000.00"`) {
			t.Errorf("reviews of UR-2 = %+v; want one naming the payment, the refund and its amount as sent", rs)
		}
		if ps, _ := e.Payments(ctx, "UR-1"); len(ps) != 0 {
			t.Errorf("an unreadable notice recorded %+v", ps)
		}
		if o, _ := e.Order(ctx, "UR-1"); o.State != flows.Unpaid {
			t.Errorf("an unreadable notice moved UR-1 to %s", o.State)
		}
		if ps, _ := e.Payments(ctx, "UR-2"); len(ps) != 1 || ps[0].Status != lapse.PaymentApplied {
			t.Errorf("an unreadable refund notice changed UR-2's payment: %+v", ps)
		}
		nope := odd(a, "txn-NOPE", "", "kind \"x\"")
		nope.OrderNo = "NOPE"
		if _, err := e.ApplyPayment(ctx, nope); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("an unreadable notice of an unknown order = %v, want ErrOrderNotFound", err)
		}
		// A group member's charge, named by its charge key: on the group's desk.
		create(t, e, groupReq("UR-G", time.Hour))
		m, _, err := e.JoinGroup(ctx, "UR-G", engine.JoinRequest{UserID: "u1", Method: "tok", By: app})
		if err != nil {
			t.Fatal(err)
		}
		member := odd(a, "txn-UR-G", "", "success_time \"yesterday\" is not RFC 3339")
		member.OrderNo = m.Key
		if _, err := e.ApplyPayment(ctx, member); err != nil || !reviewSays(t, e, "UR-G", "txn-UR-G", "yesterday") {
			t.Errorf("an unreadable notice of a member's charge = %v; reviews of UR-G %+v", err, orderReviews(t, e, "UR-G"))
		}

		long := paid(a, "txn-UR-1b", clk.Now())
		long.Currency = strings.Repeat("€", 1000)
		p, err := e.ApplyPayment(ctx, long)
		if err != nil || p.Status != lapse.PaymentReview || len(p.Currency) > lapse.MaxReasonLen || !strings.HasPrefix(p.Currency, "€€€") ||
			!strings.Contains(p.Reason, "not a currency code") {
			t.Fatalf("a payment in a long odd currency = %+v, %v; want it in review, its currency bounded", p, err)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 || rec.Totals[p.Currency].Review != 1000 {
			t.Errorf("Reconcile = %+v, %v", rec, err)
		}
	})
}
