package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
// returns those, with created=false. Either way the cards come back by id,
// which follows the order of the inserts. An order that does not exist is
// lapse.ErrOrderNotFound.
//
// It runs in a transaction (a savepoint inside Tx) that first locks the
// order's row, so that concurrent issuers for one order take turns and each
// later one, reading in a statement of its own, sees the cards of the first:
// exactly one creates.
func (s *Store) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	type result struct {
		cards   []*lapse.Card
		created bool
	}
	got, err := write(ctx, s, func(w *Store) (result, error) {
		var one int
		err := w.queryRow(ctx, `SELECT 1 FROM orders WHERE id = ? FOR UPDATE`, p.OrderID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return result{}, lapse.Refine(lapse.ErrOrderNotFound, "no order with id %d", p.OrderID)
		}
		if err != nil {
			return result{}, err
		}
		had, err := w.cardList(ctx, p.OrderID)
		if err != nil || len(had) > 0 {
			return result{had, false}, err
		}
		ins := w.inserts(`INSERT INTO cards (order_id, order_no, user_id, product, visits, status, issued_at) VALUES `, values(7))
		for _, c := range p.Cards {
			if err := ins.add(ctx, p.OrderID, c.OrderNo, c.UserID, c.Product, c.Visits, string(lapse.CardActive), column.Micros(c.IssuedAt)); err != nil {
				return result{}, err
			}
		}
		if err := ins.flush(ctx); err != nil {
			return result{}, err
		}
		issued, err := w.cardList(ctx, p.OrderID)
		return result{issued, true}, err
	})
	if err != nil {
		return nil, false, fail(err, "issue cards of order %d", p.OrderID)
	}
	return got.cards, got.created, nil
}

func (s *Store) cardList(ctx context.Context, orderID int64) ([]*lapse.Card, error) {
	return queryAll(ctx, s, scanCard, `SELECT `+cardCols+` FROM cards WHERE order_id = ? ORDER BY id`, orderID)
}

// CardList returns the cards of an order, by id.
func (s *Store) CardList(ctx context.Context, orderID int64) ([]*lapse.Card, error) {
	cs, err := s.cardList(ctx, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list cards of %d: %w", orderID, err)
	}
	return cs, nil
}

// CardGet returns a card, or an error that is lapse.ErrCardNotFound.
func (s *Store) CardGet(ctx context.Context, id int64) (*lapse.Card, error) {
	c, err := scanCard(s.queryRow(ctx, `SELECT `+cardCols+` FROM cards WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCardNotFound, "no card with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get card %d: %w", id, err)
	}
	return c, nil
}

// CardRevoke voids the active cards of an order, deducting the visits a
// count card has left, and returns them by id. It locks them first, so that
// a use of one of them that commits first is counted before its deduction.
func (s *Store) CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*lapse.Card, error) {
	got, err := write(ctx, s, func(w *Store) ([]*lapse.Card, error) {
		ids, err := queryAll(ctx, w, scanInt64, `SELECT id FROM cards WHERE order_id = ? AND status = ? ORDER BY id FOR UPDATE`,
			orderID, string(lapse.CardActive))
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		if _, err := w.exec(ctx, `UPDATE cards SET status = ?, revoked_at = ?,
			deducted = IF(visits > 0, visits - used, 0) WHERE id IN (`+marks(len(ids))+`)`,
			append([]any{string(lapse.CardVoided), column.Micros(at)}, int64Args(ids)...)...); err != nil {
			return nil, err
		}
		return queryAll(ctx, w, scanCard, `SELECT `+cardCols+` FROM cards WHERE id IN (`+marks(len(ids))+`) ORDER BY id`, int64Args(ids)...)
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: revoke cards of order %d: %w", orderID, err)
	}
	return got, nil
}

// CardUse counts one visit of an active card that has visits left (or is
// not a count card) and records it, in one transaction (a savepoint inside
// Tx). It returns lapse.ErrStale, writing nothing, when the card is voided
// or used up, lapse.ErrCardVisitExists when p.Key is taken, and
// lapse.ErrCardNotFound. An insert that meets a concurrent one of the key
// waits for it, and fails once it commits.
func (s *Store) CardUse(ctx context.Context, p *lapse.CardUseParams) (*lapse.Card, error) {
	got, err := write(ctx, s, func(w *Store) (*lapse.Card, error) {
		res, err := w.exec(ctx, `UPDATE cards SET used = used + 1 WHERE id = ? AND status = ? AND (visits = 0 OR used < visits)`,
			p.CardID, string(lapse.CardActive))
		if err != nil {
			return nil, err
		}
		c, err := scanCard(w.queryRow(ctx, `SELECT `+cardCols+` FROM cards WHERE id = ?`, p.CardID))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil, lapse.Refine(lapse.ErrCardNotFound, "no card with id %d", p.CardID)
		case err != nil:
			return nil, err
		case affected(res) == 0:
			return nil, lapse.ErrStale
		}
		_, err = w.exec(ctx, "INSERT INTO card_visits (card_id, `key`, used, visited_at) VALUES (?, NULLIF(?, _binary''), ?, ?)",
			c.ID, p.Key, c.Used, column.Micros(p.At))
		if isDuplicateKey(err, "card_visits_key_key") {
			return nil, lapse.Refine(lapse.ErrCardVisitExists, "a visit was counted under idempotency key %s", p.Key)
		}
		return c, err
	})
	if err != nil {
		return nil, fail(err, "use card %d", p.CardID)
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
	err := s.queryRow(ctx, "SELECT id, card_id, `key`, used, visited_at FROM card_visits WHERE `key` = ?", key).
		Scan(&v.ID, &v.CardID, &v.Key, &v.Used, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCardVisitNotFound, "no visit under idempotency key %s", key)
	}
	if err != nil {
		return nil, fail(err, "get card visit %s", key)
	}
	v.At = column.Time(at)
	return &v, nil
}
