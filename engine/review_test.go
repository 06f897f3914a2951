package engine_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
)

// operator is who resolves and retries in these tests.
var operator = engine.Actor{FiredBy: lapse.FiredByOperator, Name: "operator:alice"}

// auditRows returns the rows of the audit log of s.
func auditRows(t *testing.T, s lapse.Store) []*lapse.AuditEntry {
	t.Helper()
	rows, err := s.(lapse.AccessStore).AuditList(ctxT(t), &lapse.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func auditEntry(action, target string) *lapse.AuditEntry {
	return &lapse.AuditEntry{ActorKind: "operator", ActorID: "1", ActorName: "alice", Role: "operator", Action: action, Target: target}
}

// openReviews returns the open reviews of e.
func openReviews(t *testing.T, e *engine.Engine) []*lapse.Review {
	t.Helper()
	rs, err := e.Reviews(ctxT(t), &lapse.ReviewListParams{Open: true})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// wantResolved fails unless the review id is resolved at at by by with note.
func wantResolved(t *testing.T, e *engine.Engine, id int64, at time.Time, by, note string) {
	t.Helper()
	r, err := e.Review(ctxT(t), id)
	if err != nil || r.ResolvedAt == nil || !r.ResolvedAt.Equal(at) || r.ResolvedBy != by || r.Note != note {
		t.Errorf("review %d = %+v, %v; want resolved at %v by %q with note %q", id, r, err, at, by, note)
	}
}

// TestReviewRetryDelivery: an operator's retry of a dead delivery resolves
// its review in the retry's transaction, with the audit row; a second death
// is a second review, which the next retry resolves, leaving the first as
// it was resolved.
func TestReviewRetryDelivery(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sink := &recorder{fail: 4, err: errors.New("HTTP 503")}
		s := open()
		e := subsEngine(t, s, clk, engine.Subscription{Name: "sink", Events: []string{"order.closed"}, Handler: plainRecorder{sink},
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		create(t, e, checkout("RD-1", time.Hour))
		if _, err := e.Fire(ctx, "RD-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		die := func() *lapse.Review {
			t.Helper()
			drain(t, d) // fails
			clk.Advance(time.Minute)
			drain(t, d) // fails for good
			rs := openReviews(t, e)
			if len(rs) != 1 || rs[0].OrderNo != "RD-1" || rs[0].DeliveryID == 0 || rs[0].ResolvedAt != nil {
				t.Fatalf("open reviews after the death: %+v", rs)
			}
			return rs[0]
		}
		first := die()

		clk.Advance(time.Minute)
		actx := engine.WithAudit(ctx, auditEntry("delivery.retry", "delivery:1"))
		if _, err := e.RetryDelivery(actx, first.DeliveryID, operator); err != nil {
			t.Fatal(err)
		}
		retriedAt := clk.Now()
		wantResolved(t, e, first.ID, retriedAt, "operator:alice", "retried by operator:alice")
		if rs := openReviews(t, e); len(rs) != 0 {
			t.Errorf("open reviews after the retry: %+v", rs)
		}
		if rows := auditRows(t, s); !engine.AuditWritten(actx) || len(rows) != 1 || rows[0].Action != "delivery.retry" {
			t.Errorf("audit rows = %+v (written %v), want the retry's", rows, engine.AuditWritten(actx))
		}
		if _, err := e.RetryDelivery(ctx, first.DeliveryID, operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("retrying a pending delivery = %v, want conflict", err)
		}

		// It dies again: a new review, resolved by the next retry alone.
		second := die()
		if second.ID == first.ID || second.DeliveryID != first.DeliveryID {
			t.Fatalf("second review %+v, first %+v", second, first)
		}
		bob := engine.Actor{FiredBy: lapse.FiredByAPI, Name: "key:ops-bot"}
		clk.Advance(time.Minute)
		if _, err := e.RetryDelivery(ctx, second.DeliveryID, bob); err != nil {
			t.Fatal(err)
		}
		wantResolved(t, e, second.ID, clk.Now(), "key:ops-bot", "retried by key:ops-bot")
		wantResolved(t, e, first.ID, retriedAt, "operator:alice", "retried by operator:alice")
		drain(t, d)
		if got := sink.calls(); len(got) != 1 {
			t.Errorf("sink received %d events, want 1", len(got))
		}
	})
}

// TestReviewRetryMembership: an operator's retry of a membership in manual
// review resolves the order's open reviews with the transition that starts
// its compensation again; a retry that is refused resolves nothing, and the
// reviews of other orders stay open.
func TestReviewRetryMembership(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := memberEngine(t, open(), clk, &fakeProvider{}, &flakyCards{fails: 6})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})

		// M-2's payment is for the wrong amount: a review, no payment.
		o2 := create(t, e, &lapse.OrderCreate{OrderNo: "M-2", Flow: "membership", UserID: "u2", Amount: 1000, Currency: "CNY"})
		if _, err := e.Fire(ctx, "M-2", engine.Fire{Event: flows.Submit, By: app}); err != nil {
			t.Fatal(err)
		}
		wrong := paid(o2, "txn-M-2", clk.Now())
		wrong.Amount = 999
		if p, err := e.ApplyPayment(ctx, wrong); err != nil || p.Status != lapse.PaymentReview {
			t.Fatalf("a payment of the wrong amount = %+v, %v", p, err)
		}
		if _, err := e.Retry(ctx, "M-2", "try it", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("retrying a membership that waits for payment = %v, want conflict", err)
		}
		if rs := openReviews(t, e); len(rs) != 1 || rs[0].OrderNo != "M-2" {
			t.Fatalf("a refused retry resolved reviews: open %+v", rs)
		}

		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		for _, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5)
			drain(t, d)
		}
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("M-1 is %s, want %s", st, flows.ManualReview)
		}
		var review *lapse.Review
		for _, r := range openReviews(t, e) {
			if r.OrderNo == "M-1" {
				review = r
			}
		}
		if review == nil {
			t.Fatal("M-1 in manual review has no open review")
		}

		clk.Advance(time.Minute)
		if _, err := e.Retry(ctx, "M-1", "card service fixed", operator); err != nil {
			t.Fatal(err)
		}
		wantResolved(t, e, review.ID, clk.Now(), "operator:alice", "retried by operator:alice: card service fixed")
		if rs := openReviews(t, e); len(rs) != 1 || rs[0].OrderNo != "M-2" {
			t.Errorf("open reviews after M-1's retry: %+v; want M-2's alone", rs)
		}
		_, _, trs := history(t, e, "M-1")
		if last := trs[len(trs)-1]; last.FromState != flows.ManualReview || !last.CreatedAt.Equal(clk.Now()) || last.Actor != "operator:alice" {
			t.Errorf("the retry's transition = %+v", last)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Issued {
			t.Errorf("after the retry: %s", st)
		}
	})
}

// TestRetryLeavesMoneyOnTheDesk: a retry resolves the reviews it takes
// over, the dead issue delivery's, and no other: a payment in review on
// the same order stays open, for an operator to settle (S3).
func TestRetryLeavesMoneyOnTheDesk(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := memberEngine(t, open(), clk, &fakeProvider{}, &flakyCards{fails: 6})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		o := paidMembership(t, e, clk, "MM-1")
		drain(t, d)
		for _, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5)
			drain(t, d)
		}
		if st := orderState(t, e, "MM-1"); st != flows.ManualReview {
			t.Fatalf("MM-1 is %s, want %s", st, flows.ManualReview)
		}
		// A second capture, in another currency, while it waits: money in
		// review on the order.
		wrong := paid(o, "txn-MM-1-usd", clk.Now())
		wrong.Currency = "USD"
		if p, err := e.ApplyPayment(ctx, wrong); err != nil || p.Status != lapse.PaymentReview {
			t.Fatalf("a second capture in another currency = %+v, %v", p, err)
		}
		var death, money *lapse.Review
		for _, r := range openReviews(t, e) {
			switch {
			case r.DeliveryID != 0:
				death = r
			case strings.Contains(r.Reason, "txn-MM-1-usd"):
				money = r
			}
		}
		if death == nil || money == nil {
			t.Fatalf("open reviews %+v: want the issue's death and the payment's", openReviews(t, e))
		}
		clk.Advance(time.Minute)
		if _, err := e.Retry(ctx, "MM-1", "card service fixed", operator); err != nil {
			t.Fatal(err)
		}
		wantResolved(t, e, death.ID, clk.Now(), "operator:alice", "retried by operator:alice: card service fixed")
		if rs := openReviews(t, e); len(rs) != 1 || rs[0].ID != money.ID {
			t.Errorf("open reviews after the retry: %+v; want the payment's alone", rs)
		}
	})
}

// TestResolveReview: an operator resolves a review with a note, kept byte
// for byte, with the audit row; resolving it again is a conflict that says
// who did, and writes nothing, no audit row either.
func TestResolveReview(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		e := memberEngine(t, s, clk, &fakeProvider{}, &flakyCards{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RR-1", time.Hour))
		wrong := paid(o, "txn-RR-1", clk.Now())
		wrong.Currency = "USD"
		if p, err := e.ApplyPayment(ctx, wrong); err != nil || p.Status != lapse.PaymentReview {
			t.Fatalf("a payment in another currency = %+v, %v", p, err)
		}
		rs := openReviews(t, e)
		if len(rs) != 1 {
			t.Fatalf("open reviews: %+v", rs)
		}
		id := rs[0].ID

		for _, bad := range []string{"tab\there", strings.Repeat("长", lapse.MaxNoteLen/3+1)} {
			if _, err := e.ResolveReview(ctx, id, bad, operator); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("ResolveReview with note %.20q… = %v, want invalid", bad, err)
			}
		}
		if _, err := e.ResolveReview(ctx, 0, "", operator); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("ResolveReview(0) = %v, want invalid", err)
		}
		if _, err := e.ResolveReview(ctx, id+1000, "", operator); !errors.Is(err, lapse.ErrReviewNotFound) {
			t.Errorf("ResolveReview(missing) = %v, want ErrReviewNotFound", err)
		}
		if rs := openReviews(t, e); len(rs) != 1 {
			t.Fatalf("refused resolutions resolved it: %+v", rs)
		}

		clk.Advance(time.Minute)
		note := "客户改用人民币重新支付，已人工退款 USD。\nRefunded by hand, ticket #42."
		actx := engine.WithAudit(ctx, auditEntry("review.resolve", "review:1"))
		r, err := e.ResolveReview(actx, id, note, operator)
		if err != nil || r.ID != id || r.ResolvedAt == nil || !r.ResolvedAt.Equal(clk.Now()) || r.ResolvedBy != "operator:alice" || r.Note != note {
			t.Fatalf("ResolveReview = %+v, %v", r, err)
		}
		wantResolved(t, e, id, clk.Now(), "operator:alice", note)
		if rows := auditRows(t, s); !engine.AuditWritten(actx) || len(rows) != 1 || rows[0].Action != "review.resolve" || !rows[0].At.Equal(clk.Now()) {
			t.Errorf("audit rows = %+v (written %v), want the resolution's", rows, engine.AuditWritten(actx))
		}
		if rs := openReviews(t, e); len(rs) != 0 {
			t.Errorf("open reviews after resolving: %+v", rs)
		}

		// Twice: a conflict naming the first resolution, and nothing written.
		resolvedAt := clk.Now()
		clk.Advance(time.Minute)
		actx = engine.WithAudit(ctx, auditEntry("review.resolve", "review:1"))
		_, err = e.ResolveReview(actx, id, "me too", engine.Actor{FiredBy: lapse.FiredByOperator, Name: "operator:bob"})
		if !errors.Is(err, lapse.ErrReviewResolved) || lapse.ErrorCode(err) != lapse.ECONFLICT ||
			!strings.Contains(lapse.ErrorMessage(err), "already resolved at "+resolvedAt.Format(time.RFC3339Nano)+" by operator:alice") {
			t.Errorf("resolving twice = %v, want a conflict naming alice's resolution", err)
		}
		if engine.AuditWritten(actx) || len(auditRows(t, s)) != 1 {
			t.Error("a refused resolution wrote an audit row")
		}
		wantResolved(t, e, id, resolvedAt, "operator:alice", note)
		if since, err := e.Reviews(ctx, &lapse.ReviewListParams{Since: t0}); err != nil || len(since) != 1 {
			t.Errorf("reviews since t0 = %+v, %v", since, err)
		}
		if since, err := e.Reviews(ctx, &lapse.ReviewListParams{Since: t0.Add(time.Second)}); err != nil || len(since) != 0 {
			t.Errorf("reviews since t0+1s = %+v, %v", since, err)
		}
	})
}

// TestReviewOpenedOnce: the same contradicting report sent many times at
// once (a provider that retries in parallel, two nodes answering one
// callback) opens one review, however the reports interleave: of a
// member's charge reported with another amount, and of an order's payment
// reported for another amount.
func TestReviewOpenedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("group-secret"), Clock: clk, Merchant: "m-1"})
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}, Merchants: map[string]string{"sandbox": "m-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		create(t, e, groupReq("G-RO", time.Minute))
		if _, _, err := e.JoinGroup(ctx, "G-RO", engine.JoinRequest{UserID: "u1", Method: "tok-u1", By: app}); err != nil {
			t.Fatal(err)
		}
		o := create(t, e, checkout("C-RO", time.Hour))
		if _, err := e.ApplyPayment(ctx, paid(o, "t-ro", clk.Now())); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		charge := chargeNotice(t, sb, clk, members(t, e, "G-RO")["u1"])
		charge.Amount = 500
		pay := paid(o, "t-ro", clk.Now())
		pay.Amount = 700

		const n = 16
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 * n {
			nt := charge
			if i%2 == 1 {
				nt = pay
			}
			wg.Go(func() {
				<-start
				if _, err := e.ApplyPayment(ctx, nt); err != nil {
					t.Errorf("ApplyPayment(%s) = %v", nt.TxnID, err)
				}
			})
		}
		close(start)
		wg.Wait()
		for no, want := range map[string]string{"G-RO": "5.00 CNY", "C-RO": "7.00 CNY"} {
			if rs := orderReviews(t, e, no); len(rs) != 1 || !strings.Contains(rs[0].Reason, want) {
				t.Errorf("reviews of %s = %d: %+v; want one naming %s", no, len(rs), rs, want)
			}
		}
	})
}
