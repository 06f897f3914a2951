package engine_test

import (
	"errors"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestMembershipReviveIssueInReview: the issue delivery of a membership
// died and handed it to an operator. Reviving that dead delivery (the
// delivery's retry, not the order's) would run an issuer that, with the
// order in manual review, issues nothing and reports done, and would
// resolve the review with it: the customer paid, no card, and the order
// off the desk. The revive is refused, naming the order's retry, and
// nothing changes; the order's retry then issues.
func TestMembershipReviveIssueInReview(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		e := memberEngine(t, s, clk, &fakeProvider{}, &flakyCards{fails: 6})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		for _, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5)
			drain(t, d)
		}
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("M-1 is %s, want %s", st, flows.ManualReview)
		}
		rs := openReviews(t, e)
		if len(rs) != 1 || rs[0].DeliveryID == 0 {
			t.Fatalf("open reviews: %+v", rs)
		}
		dl, err := s.DeliveryGet(ctx, rs[0].DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Revivable(ctx, dl); !errors.Is(err, engine.ErrReviveIssue) {
			t.Errorf("Revivable of the dead issue delivery of an order in manual review = %v, want ErrReviveIssue", err)
		}
		_, err = e.RetryDelivery(ctx, rs[0].DeliveryID, operator)
		if !errors.Is(err, engine.ErrReviveIssue) || lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("reviving the dead issue delivery of an order in manual review = %v, want conflict", err)
		}
		drain(t, d)
		if got := openReviews(t, e); len(got) != 1 || got[0].ID != rs[0].ID {
			t.Errorf("open reviews after the revive: %+v, want %+v", got, rs)
		}
		hs, err := e.Deliveries(ctx, "M-1")
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Subscriber == engine.IssueSubscriber && h.Status != lapse.DeliveryDead {
				t.Errorf("issue delivery %d is %s after a refused revive", h.ID, h.Status)
			}
		}
		if _, err := e.Retry(ctx, "M-1", "card service fixed", operator); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.Issued {
			t.Errorf("after the order's retry: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardActive)
	})
}

// TestMembershipReviveIssueAfterRefund: every attempt to issue took effect
// and lost its answer, so the order went to manual review holding active
// cards; a partial refund then revoked them at a card service that had
// taken the refund's revoke key already (it came before the cards), so
// the cards stay active. Reviving the dead issue delivery is allowed
// there: a refund started, so the issuer revokes what the attempts
// issued, under a key of its own.
func TestMembershipReviveIssueAfterRefund(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		cards := &flakyCards{lose: 6, keyed: true, revokes: map[string]bool{"lapse-revoke-M-1": true}}
		s := open()
		e := memberEngine(t, s, clk, &fakeProvider{}, cards)
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		paidMembership(t, e, clk, "M-1")
		drain(t, d)
		for _, wait := range engine.DefaultIssueRetries {
			clk.Advance(wait + wait/5)
			drain(t, d)
		}
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("M-1 is %s, want %s", st, flows.ManualReview)
		}
		rs := openReviews(t, e)
		if len(rs) != 1 || rs[0].DeliveryID == 0 {
			t.Fatalf("open reviews: %+v", rs)
		}
		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 400, Reason: "one month back", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Fatalf("after the partial refund: %s", st)
		}
		wantCards(t, e, "M-1", 2, lapse.CardActive)

		dl, err := s.DeliveryGet(ctx, rs[0].DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Revivable(ctx, dl); err != nil {
			t.Errorf("Revivable of the dead issue delivery of a refunded membership = %v", err)
		}
		if _, err := e.RetryDelivery(ctx, rs[0].DeliveryID, operator); err != nil {
			t.Fatalf("reviving the dead issue delivery of a refunded membership = %v", err)
		}
		drain(t, d)
		wantCards(t, e, "M-1", 2, lapse.CardVoided)
		if st := orderState(t, e, "M-1"); st != flows.ManualReview {
			t.Errorf("after the revive: %s", st)
		}
	})
}
