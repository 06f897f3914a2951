package engine_test

import (
	"math"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// issuedMembership pays the membership order no (a 10-visit count card and
// a gym card) and issues its cards, which it returns.
func issuedMembership(t *testing.T, e *engine.Engine, clk lapse.Clock, d *engine.Deliverer, no string) []*lapse.Card {
	t.Helper()
	paidMembership(t, e, clk, no)
	drain(t, d)
	cs, err := e.Cards(ctxT(t), no)
	if err != nil || len(cs) != 2 || orderState(t, e, no) != flows.Issued {
		t.Fatalf("issued %s: %s, cards %+v, %v", no, orderState(t, e, no), cs, err)
	}
	return cs
}

// card returns card id of order no as the ledger holds it.
func card(t *testing.T, e *engine.Engine, no string, id int64) *lapse.Card {
	t.Helper()
	cs, err := e.Cards(ctxT(t), no)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("order %s has no card %d: %+v", no, id, cs)
	return nil
}

// TestCardVisitRefundStarted: once a refund of the order starts, its cards
// take no visit, though the revoke subscriber has not voided them yet: the
// member is being paid back for them. A visit was counted in that window,
// and the revoke then deducted one visit fewer than the card had left at
// the refund.
func TestCardVisitRefundStarted(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := memberEngine(t, open(), clk, &fakeProvider{}, &flakyCards{})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		cs := issuedMembership(t, e, clk, d, "M-1")
		if _, err := e.UseCard(ctx, cs[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 1000, Reason: "moved away", By: app}); err != nil {
			t.Fatal(err)
		}
		if st := orderState(t, e, "M-1"); st != flows.MembershipRefunding {
			t.Fatalf("after the refund started: %s", st)
		}
		for _, c := range cs {
			if _, err := e.UseCard(ctx, c.ID); lapse.ErrorCode(err) != lapse.ECONFLICT {
				t.Errorf("a visit of card %d of a refunding order = %v, want conflict", c.ID, err)
			}
		}
		if c := card(t, e, "M-1", cs[0].ID); c.Used != 1 || c.Status != lapse.CardActive {
			t.Errorf("count card before the revoke = %+v; want used 1, still active", c)
		}
		drain(t, d)
		if c := card(t, e, "M-1", cs[0].ID); c.Used != 1 || c.Deducted != 9 || c.Status != lapse.CardVoided {
			t.Errorf("count card after the refund = %+v; want used 1, deducted 9, voided", c)
		}
		// Voided, it takes none either, and nothing of it changes.
		if _, err := e.UseCard(ctx, cs[0].ID); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("a visit of a voided card = %v, want conflict", err)
		}
		if c := card(t, e, "M-1", cs[0].ID); c.Used != 1 || c.Deducted != 9 {
			t.Errorf("voided card after a refused visit = %+v", c)
		}
	})
}

// TestCardVisitID: a card id that no card can have is refused as invalid,
// not looked up; one that none has is not found.
func TestCardVisitID(t *testing.T) {
	t.Parallel()
	e := newEngine(t, openSQLite(t), lapse.NewManualClock(t0))
	for _, id := range []int64{0, -1, math.MinInt64} {
		if _, err := e.UseCard(ctxT(t), id); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("UseCard(%d) = %v, want invalid", id, err)
		}
	}
	if _, err := e.UseCard(ctxT(t), math.MaxInt64); lapse.ErrorCode(err) != lapse.ENOTFOUND {
		t.Errorf("UseCard(MaxInt64) = %v, want not found", err)
	}
}

// TestCardVisitLastConcurrent: visits that race for the last visit of a
// count card: exactly one is counted, the others are refused, and the card
// never goes past its visits.
func TestCardVisitLastConcurrent(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := memberEngine(t, open(), clk, &fakeProvider{}, &flakyCards{})
		ctx := ctxT(t)
		cs := issuedMembership(t, e, clk, engine.NewDeliverer(e, engine.DelivererConfig{}), "M-1")
		id := cs[0].ID
		for range 9 {
			if _, err := e.UseCard(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		const racers = 12
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() { _, errs[i] = e.UseCard(ctx, id) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case lapse.ErrorCode(err) != lapse.ECONFLICT:
				t.Errorf("a racing visit = %v, want conflict", err)
			}
		}
		if c := card(t, e, "M-1", id); won != 1 || c.Used != 10 {
			t.Errorf("%d of %d visits for the last one counted, card used %d of %d; want 1 and 10", won, racers, c.Used, c.Visits)
		}
	})
}
