package engine_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// wantCards fails unless order no has n cards in the built-in ledger, all
// of status st.
func wantCards(t *testing.T, e *engine.Engine, no string, n int, st lapse.CardStatus) {
	t.Helper()
	cs, err := e.Cards(ctxT(t), no)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != n {
		t.Fatalf("%s has %d cards, want %d: %+v", no, len(cs), n, cs)
	}
	for _, c := range cs {
		if c.Status != st {
			t.Errorf("card %d of %s is %s, want %s", c.ID, no, c.Status, st)
		}
	}
}

// TestMembershipRetryAfterPartialRefund: a partial refund revokes the
// cards and hands the order to an operator. Retrying the compensation then
// could only bring back the voided cards (issuing is idempotent per order),
// so the retry is refused and changes nothing: the order stays in manual
// review, claiming no benefits. Refunding the rest ends it.
func TestMembershipRetryAfterPartialRefund(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := memberEngine(t, open(), clk, &fakeProvider{}, &flakyCards{})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Issued {
			t.Fatalf("after payment: %s", st)
		}
		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 400, Reason: "one month back", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("after the partial refund: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardVoided)
		_, evBefore, before := history(t, e, "M-1")

		clk.Advance(time.Minute)
		_, err := e.Retry(ctx, "M-1", "the customer asks for the cards", operator)
		if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("retrying a partly refunded membership = %v, want a conflict saying its cards were revoked", err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Errorf("after the refused retry: %s, want %s", st, flows.ManualReview)
		}
		into, evAfter, after := history(t, e, "M-1")
		if len(after) != len(before) || into[flows.Issued] != 1 || !maps.Equal(evBefore, evAfter) {
			t.Errorf("the refused retry moved the order: %d transitions, then %d; into %v; events %v, then %v",
				len(before), len(after), into, evBefore, evAfter)
		}
		wantCards(t, e, "M-1", 2, lapse.CardVoided)

		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 600, Reason: "the rest", By: operator}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.MembershipRefunded {
			t.Errorf("after refunding the rest: %s", st)
		}
	})
}

// TestMembershipStaleIssueKeepsCards: every attempt to issue takes effect
// and loses its answer, so the order lands in manual review while its cards
// exist. An operator's retry of the dead issue delivery is refused (the
// order's retry is what issues it: TestMembershipReviveIssueInReview) and
// revokes nothing. The retry of the order then records those cards,
// active, as issued.
func TestMembershipStaleIssueKeepsCards(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		cards := &flakyCards{lose: 6}
		e := memberEngine(t, open(), clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		for _, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5)
			drain(t, d)
		}
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("after every answer was lost: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardActive)

		hs, err := e.Deliveries(ctx, "M-1")
		if err != nil {
			t.Fatal(err)
		}
		var dead int64
		for _, h := range hs {
			if h.Subscriber == engine.IssueSubscriber && h.Status == lapse.DeliveryDead {
				dead = h.ID
			}
		}
		if dead == 0 {
			t.Fatalf("no dead issue delivery: %+v", hs)
		}
		if _, err := e.RetryDelivery(ctx, dead, operator); !errors.Is(err, engine.ErrReviveIssue) {
			t.Fatalf("retrying the dead issue delivery = %v, want ErrReviveIssue", err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("after retrying the delivery: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardActive)

		if _, err := e.Retry(ctx, "M-1", "card service answers again", operator); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Issued {
			t.Errorf("after the operator's retry: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardActive)
	})
}

// TestMembershipIssueRefusesVoidedCards: the first attempt to issue takes
// effect and loses its answer; the cards are then voided outside the
// order's flow. The compensation gets them back from the ledger, voided:
// it does not record them as issued but hands the order to an operator,
// whose retry is refused, since it could only bring back the same cards.
func TestMembershipIssueRefusesVoidedCards(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := memberEngine(t, open(), clk, &fakeProvider{}, &flakyCards{lose: 1})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Compensating {
			t.Fatalf("after the lost answer: %s", st)
		}
		if _, err := engine.NewCardLedger(e).Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: "ops-void-M-1", OrderNo: "M-1"}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Errorf("after the compensation found the cards voided: %s, want %s", st, flows.ManualReview)
		}
		if into, _, _ := history(t, e, "M-1"); into[flows.Issued] != 0 {
			t.Errorf("voided cards were recorded as issued: %v", into)
		}
		var review *lapse.Review
		for _, r := range openReviews(t, e) {
			if r.OrderNo == "M-1" {
				review = r
			}
		}
		if review == nil || !strings.Contains(review.Reason, "voided") {
			t.Errorf("review of M-1 = %+v; want one saying its cards are voided", review)
		}
		if _, err := e.Retry(ctx, "M-1", "try again", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("retrying an order whose cards are voided = %v, want conflict", err)
		}
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Errorf("after the refused retry: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardVoided)
	})
}

// TestMembershipIssueAfterRefundRefused: an order whose refund revoked its
// cards is back in compensation (a retry recorded before retries of such
// orders were refused), and the card issuer is a merchant's service, which
// answers with no cards. The compensation issues nothing and records
// nothing as issued: the order goes back to an operator.
func TestMembershipIssueAfterRefundRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		cards := &flakyCards{bare: true}
		e := memberEngine(t, s, clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 400, By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		o, err := e.Order(ctx, "M-1")
		if err != nil || o.State != flows.ManualReview {
			t.Fatalf("after the partial refund: %+v, %v", o, err)
		}

		clk.Advance(time.Minute)
		p, err := flows.Membership().Plan(o, lapse.Firing{Event: flows.Retry, Now: clk.Now(), FiredBy: operator.FiredBy,
			Actor: operator.Name, Reason: "retried by an earlier version"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Outbox {
			p.Outbox[i].Subscribers = []string{engine.IssueSubscriber}
		}
		if _, err := s.OrderTransition(ctx, p); err != nil {
			t.Fatal(err)
		}
		cards.mu.Lock()
		issues := cards.issues
		cards.mu.Unlock()
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Errorf("after the compensation of a refunded order: %s, want %s", st, flows.ManualReview)
		}
		if into, _, _ := history(t, e, "M-1"); into[flows.Issued] != 1 {
			t.Errorf("a refunded order was issued again: %v", into)
		}
		cards.mu.Lock()
		if cards.issues != issues {
			t.Errorf("the card service was asked to issue %d more times, want none", cards.issues-issues)
		}
		cards.mu.Unlock()
		wantCards(t, e, "M-1", 2, lapse.CardVoided)
	})
}
