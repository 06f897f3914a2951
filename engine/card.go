package engine

import (
	"context"
	"errors"

	"github.com/lapsehq/lapse"
)

// CardLedger is the built-in card issuer: cards and their visits in the
// engine's database.
type CardLedger struct{ e *Engine }

var _ lapse.CardIssuer = CardLedger{}

// NewCardLedger returns the built-in card issuer of e's database, for a
// CardIssuer that wraps it.
func NewCardLedger(e *Engine) CardLedger { return CardLedger{e} }

// Issue records the order's cards, once per order.
func (l CardLedger) Issue(ctx context.Context, r *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	o, err := l.e.store.OrderGet(ctx, r.OrderNo)
	if err != nil {
		return nil, err
	}
	now := l.e.clock.Now()
	cards := make([]*lapse.Card, len(r.Cards))
	for i, c := range r.Cards {
		cards[i] = &lapse.Card{OrderID: o.ID, OrderNo: o.OrderNo, UserID: r.UserID, Product: c.Product, Visits: c.Visits,
			Status: lapse.CardActive, IssuedAt: now}
	}
	got, _, err := l.e.store.CardIssue(ctx, &lapse.CardIssueParams{OrderID: o.ID, Cards: cards})
	return got, err
}

// Revoke voids the order's active cards.
func (l CardLedger) Revoke(ctx context.Context, r *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	o, err := l.e.store.OrderGet(ctx, r.OrderNo)
	if err != nil {
		return nil, err
	}
	return l.e.store.CardRevoke(ctx, o.ID, l.e.clock.Now())
}

// Cards returns the cards of an order of the built-in ledger.
func (e *Engine) Cards(ctx context.Context, orderNo string) ([]*lapse.Card, error) {
	return e.feat.cards.ledger.list(ctx, orderNo)
}

func (l CardLedger) list(ctx context.Context, orderNo string) ([]*lapse.Card, error) {
	o, err := l.e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	return l.e.store.CardList(ctx, o.ID)
}

// UseCard counts one visit of a card of the built-in ledger. Errors, with
// nothing counted: EINVALID for an id no card can have; ENOTFOUND;
// ECONFLICT when the card is voided or has no visits left, or a refund of
// its order started (its revoke may not have voided the card yet).
func (e *Engine) UseCard(ctx context.Context, id int64) (*lapse.Card, error) {
	return e.feat.cards.ledger.use(ctx, id)
}

// use counts the visit in a transaction that first locks the card's order,
// so that it commits before a refund of the order starts, and its revoke
// then deducts what the visit left, or after, and sees the refund in the
// order's log.
func (l CardLedger) use(ctx context.Context, id int64) (*lapse.Card, error) {
	if id <= 0 {
		return nil, lapse.FieldError("id", "must be a card id, a positive integer")
	}
	c, err := l.e.store.CardGet(ctx, id)
	if err != nil {
		return nil, err
	}
	var got *lapse.Card
	err = l.e.store.Tx(ctx, func(tx lapse.Store) error {
		o, err := tx.OrderLock(ctx, c.OrderNo)
		if err != nil {
			return err
		}
		flow, err := l.e.flows.of(o)
		if err != nil {
			return err
		}
		why, err := refundRevoked(ctx, tx, flow, o)
		if err != nil {
			return err
		}
		if why != "" {
			return lapse.Errorf(lapse.ECONFLICT, "card %d of order %s takes no visits: %s", id, o.OrderNo, why)
		}
		got, err = tx.CardUse(ctx, &lapse.CardUseParams{CardID: id, At: l.e.clock.Now()})
		return err
	})
	if errors.Is(err, lapse.ErrStale) {
		cur, gerr := l.e.store.CardGet(ctx, id)
		if gerr != nil {
			return nil, gerr
		}
		if cur.Status != lapse.CardActive {
			return nil, lapse.Errorf(lapse.ECONFLICT, "card %d is %s", id, cur.Status)
		}
		return nil, lapse.Errorf(lapse.ECONFLICT, "card %d has no visits left (%d of %d used)", id, cur.Used, cur.Visits)
	}
	return got, err
}
