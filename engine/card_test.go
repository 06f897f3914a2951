package engine_test

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// cardEnv is an engine whose cards the built-in ledger issues, on a manual
// clock, with the deliverer that issues and revokes them.
func cardEnv(t *testing.T, s lapse.Store) (*engine.Engine, *lapse.ManualClock, *engine.Deliverer) {
	t.Helper()
	clk := lapse.NewManualClock(t0)
	e := memberEngine(t, s, clk, &fakeProvider{}, &flakyCards{})
	return e, clk, engine.NewDeliverer(e, engine.DelivererConfig{})
}

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
		e, clk, d := cardEnv(t, open())
		ctx := ctxT(t)
		cs := issuedMembership(t, e, clk, d, "M-1")
		if _, _, err := e.UseCard(ctx, cs[0].ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 1000, Reason: "moved away", By: app}); err != nil {
			t.Fatal(err)
		}
		if st := orderState(t, e, "M-1"); st != flows.MembershipRefunding {
			t.Fatalf("after the refund started: %s", st)
		}
		for _, c := range cs {
			if _, _, err := e.UseCard(ctx, c.ID, ""); lapse.ErrorCode(err) != lapse.ECONFLICT {
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
		if _, _, err := e.UseCard(ctx, cs[0].ID, ""); lapse.ErrorCode(err) != lapse.ECONFLICT {
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
		if _, _, err := e.UseCard(ctxT(t), id, ""); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("UseCard(%d) = %v, want invalid", id, err)
		}
	}
	if _, _, err := e.UseCard(ctxT(t), math.MaxInt64, ""); lapse.ErrorCode(err) != lapse.ENOTFOUND {
		t.Errorf("UseCard(MaxInt64) = %v, want not found", err)
	}
}

// TestCardVisitLastConcurrent: visits that race for the last visit of a
// count card: exactly one is counted, the others are refused, and the card
// never goes past its visits.
func TestCardVisitLastConcurrent(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		e, clk, d := cardEnv(t, open())
		ctx := ctxT(t)
		cs := issuedMembership(t, e, clk, d, "M-1")
		id := cs[0].ID
		for range 9 {
			if _, _, err := e.UseCard(ctx, id, ""); err != nil {
				t.Fatal(err)
			}
		}
		const racers = 12
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() { _, _, errs[i] = e.UseCard(ctx, id, "") })
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

// TestCardVisitKey: a visit retried under its Idempotency-Key counts
// nothing and answers the card as the first visit left it, whatever
// happened to the card since: more visits, a refund, the revoke. The key
// names one visit: for another card, or in another shape, it is refused and
// counts nothing.
func TestCardVisitKey(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		e, clk, d := cardEnv(t, open())
		ctx := ctxT(t)
		cs := issuedMembership(t, e, clk, d, "M-1")
		others := issuedMembership(t, e, clk, d, "M-2")
		count := cs[0].ID

		first, counted, err := e.UseCard(ctx, count, "visit-1")
		if err != nil || !counted || first.Used != 1 {
			t.Fatalf("UseCard under visit-1 = %+v, %v, %v", first, counted, err)
		}
		clk.Advance(time.Minute)
		if _, _, err := e.UseCard(ctx, count, "visit-2"); err != nil {
			t.Fatal(err)
		}
		again := func(when string) {
			t.Helper()
			c, counted, err := e.UseCard(ctx, count, "visit-1")
			if err != nil || counted || *c != *first {
				t.Errorf("retry of visit-1 %s = %+v, %v, %v\nwant %+v, not counted", when, c, counted, err, first)
			}
		}
		again("after another visit")
		for _, c := range []int64{cs[1].ID, others[0].ID} {
			if _, _, err := e.UseCard(ctx, c, "visit-1"); !errors.Is(err, lapse.ErrCardVisitExists) {
				t.Errorf("UseCard of card %d under the key of a visit of card %d = %v, want ErrCardVisitExists", c, count, err)
			}
		}
		for _, key := range []string{"two words", strings.Repeat("k", 101), "-dash-first", "ключ"} {
			if _, _, err := e.UseCard(ctx, count, key); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("UseCard under key %q = %v, want invalid", key, err)
			}
		}
		if _, _, err := e.RefundOrder(ctx, "M-1", engine.RefundRequest{Amount: 1000, Reason: "moved away", By: app}); err != nil {
			t.Fatal(err)
		}
		again("after the refund started")
		if _, _, err := e.UseCard(ctx, count, "visit-3"); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("a new visit after the refund started = %v, want conflict", err)
		}
		drain(t, d)
		again("after the revoke")
		if c := card(t, e, "M-1", count); c.Used != 2 || c.Deducted != 8 || c.Status != lapse.CardVoided {
			t.Errorf("count card = %+v; want used 2, deducted 8, voided", c)
		}
		if c := card(t, e, "M-2", others[0].ID); c.Used != 0 {
			t.Errorf("the other order's card = %+v; want it unused", c)
		}
	})
}

// TestCardVisitKeyConcurrent: calls under one key race, for a card and for
// a card of another order: one visit is counted; the other calls for its
// card answer the card as that visit left it, and those for the other card
// are refused.
func TestCardVisitKeyConcurrent(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		e, clk, d := cardEnv(t, open())
		ctx := ctxT(t)
		ids := []int64{issuedMembership(t, e, clk, d, "M-1")[0].ID, issuedMembership(t, e, clk, d, "M-2")[0].ID}
		const racers = 12
		type answer struct {
			c       *lapse.Card
			counted bool
			err     error
		}
		got := make([]answer, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				c, counted, err := e.UseCard(ctx, ids[i%2], "race")
				got[i] = answer{c, counted, err}
			})
		}
		wg.Wait()
		var winner *lapse.Card
		for _, a := range got {
			if a.counted {
				if winner != nil {
					t.Fatalf("two visits counted under one key: %+v and %+v", winner, a.c)
				}
				winner = a.c
			}
		}
		if winner == nil || winner.Used != 1 {
			t.Fatalf("no visit counted under the key: %+v", got)
		}
		for i, a := range got {
			switch {
			case a.counted:
			case ids[i%2] == winner.ID && (a.err != nil || *a.c != *winner):
				t.Errorf("retry %d for the winning card = %+v, %v; want %+v", i, a.c, a.err, winner)
			case ids[i%2] != winner.ID && !errors.Is(a.err, lapse.ErrCardVisitExists):
				t.Errorf("call %d for the other card = %+v, %v; want ErrCardVisitExists", i, a.c, a.err)
			}
		}
		if a, b := card(t, e, "M-1", ids[0]).Used, card(t, e, "M-2", ids[1]).Used; a+b != 1 {
			t.Errorf("cards used %d and %d; want one visit in all", a, b)
		}
	})
}
