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

// UseCard counts one visit of a card of the built-in ledger and returns the
// card as the visit left it, with counted=true. key, when not "", makes the
// call idempotent: a visit counted under key already is not counted again,
// and the card comes back as that visit left it, with counted=false. Errors,
// with nothing counted: EINVALID for an id no card can have, or a key that
// is not 1 to 100 letters, digits, '.', '_', ':' or '-' (a refund's key
// has that shape too); ENOTFOUND; ECONFLICT when the card is
// voided or has no visits left, a refund of its order started (its revoke
// may not have voided the card yet), or key counted a visit of another card
// (lapse.ErrCardVisitExists).
func (e *Engine) UseCard(ctx context.Context, id int64, key string) (c *lapse.Card, counted bool, err error) {
	return e.feat.cards.ledger.use(ctx, id, key)
}

// use counts the visit in a transaction that first locks the card's order.
// A refund of the order starts with a transition of that row, so the visit
// either commits first, and the refund's revoke deducts what it left, or
// comes after, and finds the refund in the order's log. Visits of one
// order's cards take turns the same way, so a retry under a key finds the
// visit it repeats once that committed; visits of two orders under one key
// meet at the store's unique key instead (ErrCardVisitExists).
func (l CardLedger) use(ctx context.Context, id int64, key string) (*lapse.Card, bool, error) {
	if id <= 0 {
		return nil, false, lapse.FieldError("id", "must be a card id, a positive integer")
	}
	if err := checkIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	c, err := l.e.store.CardGet(ctx, id)
	if err != nil {
		return nil, false, err
	}
	var got *lapse.Card
	var done *lapse.CardVisit
	err = l.e.store.Tx(ctx, func(tx lapse.Store) error {
		o, err := tx.OrderLock(ctx, c.OrderNo)
		if err != nil {
			return err
		}
		if key != "" {
			done, err = tx.CardVisitGet(ctx, key)
			if !errors.Is(err, lapse.ErrCardVisitNotFound) {
				return err
			}
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
		got, err = tx.CardUse(ctx, &lapse.CardUseParams{CardID: id, Key: key, At: l.e.clock.Now()})
		return err
	})
	if errors.Is(err, lapse.ErrCardVisitExists) {
		done, err = l.e.store.CardVisitGet(ctx, key)
	}
	switch {
	case err == nil && done != nil:
		return l.visited(ctx, done, id)
	case errors.Is(err, lapse.ErrStale):
		return nil, false, l.unusable(ctx, id)
	case err != nil:
		return nil, false, err
	}
	return got, true, nil
}

// visited answers a visit of card id repeated under the key of visit v: the
// card as v left it, active and used v.Used times (a revoke since, or later
// visits, are not that answer). A key that counted a visit of another card
// is refused.
func (l CardLedger) visited(ctx context.Context, v *lapse.CardVisit, id int64) (*lapse.Card, bool, error) {
	if v.CardID != id {
		return nil, false, lapse.Refine(lapse.ErrCardVisitExists,
			"Idempotency-Key %s counted a visit of another card; use a key of its own for each visit", v.Key)
	}
	c, err := l.e.store.CardGet(ctx, id)
	if err != nil {
		return nil, false, err
	}
	c.Used, c.Status, c.Deducted, c.RevokedAt = v.Used, lapse.CardActive, 0, nil
	return c, false, nil
}

// unusable says why card id took no visit: it is voided, or used up.
func (l CardLedger) unusable(ctx context.Context, id int64) error {
	cur, err := l.e.store.CardGet(ctx, id)
	if err != nil {
		return err
	}
	if cur.Status != lapse.CardActive {
		return lapse.Errorf(lapse.ECONFLICT, "card %d is %s", id, cur.Status)
	}
	return lapse.Errorf(lapse.ECONFLICT, "card %d has no visits left (%d of %d used)", id, cur.Used, cur.Visits)
}
