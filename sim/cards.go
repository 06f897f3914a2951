package sim

import (
	"context"
	"fmt"
	"sync"

	"github.com/lapsehq/lapse"
)

// cardPort is a fake benefits service (lapse.CardIssuer): idempotent on the
// request's key as a real one is, and, as the seed draws, failing (nothing
// done) or timing out after it granted (ErrUnknownOutcome). It records every
// grant and revocation for the auditor.
type cardPort struct {
	mu      sync.Mutex
	f       *faults
	clock   lapse.Clock
	rate    float64
	byKey   map[string][]*lapse.Card
	keys    map[string]map[string]bool // order_no → keys it was issued under
	revoked map[string]int             // order_no → cards voided
	next    int64
}

func newCardPort(f *faults, clock lapse.Clock) *cardPort {
	return &cardPort{f: f, clock: clock, rate: 0.15, byKey: map[string][]*lapse.Card{}, keys: map[string]map[string]bool{}, revoked: map[string]int{}}
}

func (c *cardPort) fault(site string) string {
	switch {
	case c.f.draw(site, c.rate/2, FaultPortFail):
		return FaultPortFail
	case c.f.draw(site, c.rate/2, FaultPortLost):
		return FaultPortLost
	}
	return ""
}

func (c *cardPort) Issue(_ context.Context, r *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	kind := c.fault("issue " + r.IdempotencyKey)
	if kind == FaultPortFail {
		return nil, fmt.Errorf("%w: card service unavailable", errInjected)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cards := c.byKey[r.IdempotencyKey]
	if cards == nil {
		now := c.clock.Now()
		for _, s := range r.Cards {
			c.next++
			cards = append(cards, &lapse.Card{ID: c.next, OrderNo: r.OrderNo, UserID: r.UserID, Product: s.Product, Visits: s.Visits,
				Status: lapse.CardActive, IssuedAt: now})
		}
		c.byKey[r.IdempotencyKey] = cards
		if c.keys[r.OrderNo] == nil {
			c.keys[r.OrderNo] = map[string]bool{}
		}
		c.keys[r.OrderNo][r.IdempotencyKey] = true
	}
	if kind == FaultPortLost {
		return nil, fmt.Errorf("%w: card service timed out: %w", errInjected, lapse.ErrUnknownOutcome)
	}
	return cloneCards(cards), nil
}

func (c *cardPort) Revoke(_ context.Context, r *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	kind := c.fault("revoke " + r.OrderNo)
	if kind == FaultPortFail {
		return nil, fmt.Errorf("%w: card service unavailable", errInjected)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*lapse.Card
	for key := range c.keys[r.OrderNo] {
		for _, card := range c.byKey[key] {
			if card.Status == lapse.CardActive {
				now := c.clock.Now()
				card.Status, card.RevokedAt, card.Deducted = lapse.CardVoided, &now, card.Visits-card.Used
				c.revoked[r.OrderNo]++
				out = append(out, card)
			}
		}
	}
	if kind == FaultPortLost {
		return nil, fmt.Errorf("%w: card service timed out: %w", errInjected, lapse.ErrUnknownOutcome)
	}
	return cloneCards(out), nil
}

// grants returns the keys an order's cards were issued under, and whether
// any of its cards are active.
func (c *cardPort) grants(orderNo string) (keys int, active bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.keys[orderNo] {
		keys++
		for _, card := range c.byKey[key] {
			active = active || card.Status == lapse.CardActive
		}
	}
	return keys, active
}

func cloneCards(cs []*lapse.Card) []*lapse.Card {
	out := make([]*lapse.Card, len(cs))
	for i, c := range cs {
		cc := *c
		out[i] = &cc
	}
	return out
}
