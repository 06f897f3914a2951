package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const cardColumns = `id, order_id, order_no, user_id, product, visits, used, deducted, status, issued_at, revoked_at`

func scanCard(row pgx.Row, extra ...any) (*lapse.Card, error) {
	var c lapse.Card
	err := row.Scan(append([]any{&c.ID, &c.OrderID, &c.OrderNo, &c.UserID, &c.Product, &c.Visits, &c.Used, &c.Deducted,
		&c.Status, &c.IssuedAt, &c.RevokedAt}, extra...)...)
	if err != nil {
		return nil, err
	}
	c.IssuedAt, c.RevokedAt = c.IssuedAt.UTC(), utcPtr(c.RevokedAt)
	return &c, nil
}

func scanCards(rows pgx.Rows) ([]*lapse.Card, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Card, error) { return scanCard(row) })
}

// cardIssueSQL inserts the cards in the order given, so that their ids
// follow it, and returns them by id (RETURNING alone promises no order).
const cardIssueSQL = `WITH i AS (
	INSERT INTO cards (order_id, order_no, user_id, product, visits, status, issued_at)
	SELECT $1::bigint, c.order_no, c.user_id, c.product, c.visits, $2::text, c.issued_at
	FROM unnest($3::text[], $4::text[], $5::text[], $6::int[], $7::timestamptz[])
		WITH ORDINALITY AS c (order_no, user_id, product, visits, issued_at, n)
	ORDER BY c.n
	RETURNING ` + cardColumns + `
)
SELECT ` + cardColumns + ` FROM i ORDER BY id`

// CardIssue inserts the cards of order p.OrderID, active and unused, in the
// order given, unless the order has cards: then it writes nothing and
// returns those, by id, with created=false. An order that does not exist is
// lapse.ErrOrderNotFound.
//
// It runs in a transaction (the caller's, inside Tx) that first locks the
// order row, so that concurrent issuers for one order take turns and each
// later one, reading in a statement of its own, sees the cards of the first:
// exactly one creates. FOR NO KEY UPDATE is enough for that and, unlike FOR
// UPDATE, does not block inserts elsewhere that reference the order.
func (s *Store) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	orderID, cards := p.OrderID, p.Cards
	var got []*lapse.Card
	created := false
	err := s.Tx(ctx, func(tx lapse.Store) error {
		db := tx.(*Store).db
		var one int
		err := db.QueryRow(ctx, `SELECT 1 FROM orders WHERE id = $1 FOR NO KEY UPDATE`, orderID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return lapse.Refine(lapse.ErrOrderNotFound, "no order with id %d", orderID)
		}
		if err != nil {
			return err
		}
		rows, err := db.Query(ctx, `SELECT `+cardColumns+` FROM cards WHERE order_id = $1 ORDER BY id`, orderID)
		if err != nil {
			return err
		}
		if got, err = scanCards(rows); err != nil || len(got) > 0 {
			return err
		}
		orderNos, users, products := make([]string, len(cards)), make([]string, len(cards)), make([]string, len(cards))
		visits, issued := make([]int, len(cards)), make([]time.Time, len(cards))
		for i, c := range cards {
			orderNos[i], users[i], products[i], visits[i], issued[i] = c.OrderNo, c.UserID, c.Product, c.Visits, c.IssuedAt
		}
		rows, err = db.Query(ctx, cardIssueSQL, orderID, lapse.CardActive, orderNos, users, products, visits, issued)
		if err != nil {
			return err
		}
		if got, err = scanCards(rows); err != nil {
			return err
		}
		created = true
		return nil
	})
	var le *lapse.Error
	if errors.As(err, &le) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres: issue cards of order %d: %w", orderID, err)
	}
	return got, created, nil
}

// CardList returns the cards of an order, by id.
func (s *Store) CardList(ctx context.Context, orderID int64) ([]*lapse.Card, error) {
	rows, err := s.db.Query(ctx, `SELECT `+cardColumns+` FROM cards WHERE order_id = $1 ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list cards of %d: %w", orderID, err)
	}
	out, err := scanCards(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list cards of %d: %w", orderID, err)
	}
	return out, nil
}

// CardGet returns a card, or an error that is lapse.ErrCardNotFound.
func (s *Store) CardGet(ctx context.Context, id int64) (*lapse.Card, error) {
	c, err := scanCard(s.db.QueryRow(ctx, `SELECT `+cardColumns+` FROM cards WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCardNotFound, "no card with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get card %d: %w", id, err)
	}
	return c, nil
}

// cardRevokeSQL voids the active cards of an order and returns them by id.
const cardRevokeSQL = `WITH u AS (
	UPDATE cards SET status = $1, revoked_at = $2,
		deducted = CASE WHEN visits > 0 THEN visits - used ELSE 0 END
	WHERE order_id = $3 AND status = $4
	RETURNING ` + cardColumns + `
)
SELECT ` + cardColumns + ` FROM u ORDER BY id`

// CardRevoke voids the active cards of an order, deducting the visits a
// count card has left, and returns them by id. A use of one of them that
// commits first is counted before its deduction.
func (s *Store) CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*lapse.Card, error) {
	rows, err := s.db.Query(ctx, cardRevokeSQL, lapse.CardVoided, at, orderID, lapse.CardActive)
	if err != nil {
		return nil, fmt.Errorf("postgres: revoke cards of order %d: %w", orderID, err)
	}
	out, err := scanCards(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: revoke cards of order %d: %w", orderID, err)
	}
	return out, nil
}

// cardUseSQL is the guarded use and the visit's row. When the guard fails
// the second branch tells whether the card exists; cards are never
// deleted, so the statement's snapshot is enough to tell missing from
// voided or used up. A key that a visit holds fails the insert, and with it
// the statement.
const cardUseSQL = `WITH u AS (
	UPDATE cards SET used = used + 1
	WHERE id = $1 AND status = $2 AND (visits = 0 OR used < visits)
	RETURNING ` + cardColumns + `
), v AS (
	INSERT INTO card_visits (card_id, key, used, visited_at)
	SELECT id, NULLIF($3::text, ''), used, $4 FROM u
)
SELECT ` + cardColumns + `, true FROM u
UNION ALL
SELECT ` + cardColumns + `, false FROM cards WHERE id = $1 AND NOT EXISTS (SELECT FROM u)`

// CardUse counts one visit of an active card that has visits left (or is
// not a count card) and records it, in one statement, inside a savepoint
// when the store is in a transaction, so that a key that a visit holds
// leaves the caller's transaction usable. It returns lapse.ErrStale,
// writing nothing, when the card is voided or used up,
// lapse.ErrCardVisitExists when p.Key is taken, and lapse.ErrCardNotFound.
func (s *Store) CardUse(ctx context.Context, p *lapse.CardUseParams) (*lapse.Card, error) {
	var c *lapse.Card
	err := s.Tx(ctx, func(tx lapse.Store) error {
		var used bool
		var err error
		c, err = scanCard(tx.(*Store).db.QueryRow(ctx, cardUseSQL, p.CardID, lapse.CardActive, p.Key, p.At), &used)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return lapse.Refine(lapse.ErrCardNotFound, "no card with id %d", p.CardID)
		case err != nil:
			return err
		case !used:
			return lapse.ErrStale
		}
		return nil
	})
	if _, taken := isUniqueViolation(err, "card_visits_key_key"); taken {
		return nil, lapse.Refine(lapse.ErrCardVisitExists, "a visit was counted under idempotency key %s", p.Key)
	}
	var le *lapse.Error
	if errors.As(err, &le) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: use card %d: %w", p.CardID, err)
	}
	return c, nil
}

// CardVisitGet returns the visit counted under key, or an error that is
// lapse.ErrCardVisitNotFound.
func (s *Store) CardVisitGet(ctx context.Context, key string) (*lapse.CardVisit, error) {
	var v lapse.CardVisit
	err := s.db.QueryRow(ctx, `SELECT id, card_id, key, used, visited_at FROM card_visits WHERE key = $1`, key).
		Scan(&v.ID, &v.CardID, &v.Key, &v.Used, &v.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCardVisitNotFound, "no visit under idempotency key %s", key)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get card visit %s: %w", key, err)
	}
	v.At = v.At.UTC()
	return &v, nil
}
