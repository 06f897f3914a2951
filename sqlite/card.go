package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const cardCols = `id, order_id, order_no, user_id, product, visits, used, deducted, status, issued_at, revoked_at`

func scanCard(r scanner) (*lapse.Card, error) {
	var (
		c       lapse.Card
		issued  int64
		revoked sql.NullInt64
	)
	err := r.Scan(&c.ID, &c.OrderID, &c.OrderNo, &c.UserID, &c.Product, &c.Visits, &c.Used, &c.Deducted,
		(*string)(&c.Status), &issued, &revoked)
	if err != nil {
		return nil, err
	}
	c.IssuedAt, c.RevokedAt = column.Time(issued), column.NullTime(revoked)
	return &c, nil
}

// CardIssue inserts the cards of order p.OrderID, active and unused, in the
// order given, unless the order has cards: then it writes nothing and
// returns those, by id, with created=false. The single writer makes the
// check and the inserts one step, so of concurrent issuers exactly one
// creates. An order that does not exist is lapse.ErrOrderNotFound.
func (s *Store) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	orderID := p.OrderID
	var got []*lapse.Card
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = queryAll(ctx, w.tx, scanCard, `SELECT `+cardCols+` FROM cards WHERE order_id = ? ORDER BY id`, orderID)
		if err != nil || len(got) > 0 {
			return err
		}
		var n int
		if err := w.tx.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ?`, orderID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return lapse.Refine(lapse.ErrOrderNotFound, "no order with id %d", orderID)
		}
		for _, c := range p.Cards {
			x, err := scanCard(w.tx.QueryRowContext(ctx, `INSERT INTO cards (order_id, order_no, user_id, product,
				visits, status, issued_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING `+cardCols,
				orderID, c.OrderNo, c.UserID, c.Product, c.Visits, string(lapse.CardActive), column.Micros(c.IssuedAt)))
			if err != nil {
				return err
			}
			got = append(got, x)
		}
		created = true
		return nil
	})
	if err != nil {
		return nil, false, fail(err, "card issue %d", orderID)
	}
	return got, created, nil
}

// CardList returns the cards of an order, by id.
func (s *Store) CardList(ctx context.Context, orderID int64) ([]*lapse.Card, error) {
	cs, err := queryAll(ctx, s.db(), scanCard, `SELECT `+cardCols+` FROM cards WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: card list %d: %w", orderID, err)
	}
	return cs, nil
}

// CardGet returns a card, or an error that is lapse.ErrCardNotFound.
func (s *Store) CardGet(ctx context.Context, id int64) (*lapse.Card, error) {
	c, err := scanCard(s.db().QueryRowContext(ctx, `SELECT `+cardCols+` FROM cards WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCardNotFound, "no card with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: card get %d: %w", id, err)
	}
	return c, nil
}

// CardRevoke voids the active cards of an order, deducting the visits a
// count card has left, and returns them by id.
func (s *Store) CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*lapse.Card, error) {
	var got []*lapse.Card
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = queryAll(ctx, w.tx, scanCard, `UPDATE cards SET status = ?1, revoked_at = ?2,
			deducted = CASE WHEN visits > 0 THEN visits - used ELSE 0 END
			WHERE order_id = ?3 AND status = ?4 RETURNING `+cardCols,
			string(lapse.CardVoided), column.Micros(at), orderID, string(lapse.CardActive))
		return err
	})
	if err != nil {
		return nil, fail(err, "card revoke %d", orderID)
	}
	// RETURNING promises no order.
	slices.SortFunc(got, func(a, b *lapse.Card) int { return cmp.Compare(a.ID, b.ID) })
	return got, nil
}

// CardUse counts one visit of an active card that has visits left (or is
// not a count card) and records it, in one transaction (a savepoint inside
// Tx). It returns lapse.ErrStale, writing nothing, when the card is voided
// or used up, lapse.ErrCardVisitExists when p.Key is taken, and
// lapse.ErrCardNotFound.
func (s *Store) CardUse(ctx context.Context, p *lapse.CardUseParams) (*lapse.Card, error) {
	var got *lapse.Card
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanCard(w.tx.QueryRowContext(ctx, `UPDATE cards SET used = used + 1
			WHERE id = ? AND status = ? AND (visits = 0 OR used < visits) RETURNING `+cardCols,
			p.CardID, string(lapse.CardActive)))
		if errors.Is(err, sql.ErrNoRows) {
			var n int
			if err := w.tx.QueryRowContext(ctx, `SELECT count(*) FROM cards WHERE id = ?`, p.CardID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return lapse.Refine(lapse.ErrCardNotFound, "no card with id %d", p.CardID)
			}
			return lapse.ErrStale
		}
		if err != nil {
			return err
		}
		res, err := w.tx.ExecContext(ctx, `INSERT INTO card_visits (card_id, key, used, visited_at)
			VALUES (?, NULLIF(?, ''), ?, ?) ON CONFLICT (key) DO NOTHING`, got.ID, p.Key, got.Used, column.Micros(p.At))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return lapse.Refine(lapse.ErrCardVisitExists, "a visit was counted under idempotency key %s", p.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fail(err, "card use %d", p.CardID)
	}
	return got, nil
}

// CardVisitGet returns the visit counted under key, or an error that is
// lapse.ErrCardVisitNotFound.
func (s *Store) CardVisitGet(ctx context.Context, key string) (*lapse.CardVisit, error) {
	var (
		v  lapse.CardVisit
		at int64
	)
	err := s.db().QueryRowContext(ctx, `SELECT id, card_id, key, used, visited_at FROM card_visits WHERE key = ?`, key).
		Scan(&v.ID, &v.CardID, &v.Key, &v.Used, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCardVisitNotFound, "no visit under idempotency key %s", key)
	}
	if err != nil {
		return nil, fail(err, "card visit get %s", key)
	}
	v.At = column.Time(at)
	return &v, nil
}
