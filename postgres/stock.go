package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// stockSetSQL creates a ledger line or sets its on-hand quantity, unless
// the line has reserved more: then it returns nothing, and raises no error
// that would abort a caller's transaction.
const stockSetSQL = `INSERT INTO stock (sku, on_hand, reserved, updated_at) VALUES ($1, $2, 0, $3)
ON CONFLICT (sku) DO UPDATE SET on_hand = excluded.on_hand, updated_at = excluded.updated_at
	WHERE excluded.on_hand >= stock.reserved
RETURNING sku, on_hand, reserved, updated_at`

// StockSet sets the on-hand quantity of a SKU, creating its ledger line (with
// nothing reserved) if needed. An on-hand below what is reserved is
// lapse.ErrStockReserved and writes nothing; inside Tx the transaction stays
// usable.
func (s *Store) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	st, err := scanStock(s.db.QueryRow(ctx, stockSetSQL, p.SKU, p.OnHand, p.At))
	if errors.Is(err, pgx.ErrNoRows) {
		// The line exists (the insert met it) and has more reserved. In
		// READ COMMITTED this read sees it as the insert did.
		var reserved int64
		if err := s.db.QueryRow(ctx, "SELECT reserved FROM stock WHERE sku = $1", p.SKU).Scan(&reserved); err != nil {
			return nil, fmt.Errorf("postgres: set stock of sku %q: %w", p.SKU, err)
		}
		return nil, lapse.StockSetRefusal(p.SKU, p.OnHand, reserved)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: set stock of sku %q: %w", p.SKU, err)
	}
	return st, nil
}

// StockGet returns the ledger line of a SKU, or lapse.ErrStockNotFound.
func (s *Store) StockGet(ctx context.Context, sku string) (*lapse.Stock, error) {
	st, err := scanStock(s.db.QueryRow(ctx, "SELECT sku, on_hand, reserved, updated_at FROM stock WHERE sku = $1", sku))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrStockNotFound, "no stock record for sku %q", sku)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get stock of sku %q: %w", sku, err)
	}
	return st, nil
}

// StockCountReserved returns how many SKUs have stock reserved.
func (s *Store) StockCountReserved(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, "SELECT count(*) FROM stock WHERE reserved > 0").Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count skus with stock reserved: %w", err)
	}
	return n, nil
}

func scanStock(row pgx.Row) (*lapse.Stock, error) {
	var st lapse.Stock
	if err := row.Scan(&st.SKU, &st.OnHand, &st.Reserved, &st.UpdatedAt); err != nil {
		return nil, err
	}
	st.UpdatedAt = st.UpdatedAt.UTC()
	return &st, nil
}

// stockMoveSQL moves every line or none, in one statement, so that a refused
// move leaves a caller's transaction usable. $1 and $2 are the lines, $3 and
// $4 the lapse.StockDelta of the move. k locks the lines' ledger rows in SKU
// order (bytewise, as Go sorts) before anything is decided, so that
// concurrent moves queue rather than deadlock, and reads them as they are
// once locked; c decides each line against those values by the ledger's
// invariant, 0 <= reserved <= on_hand after the move (written so that it
// cannot overflow); the update and the journal happen only when every line
// passed. The result says, line by line in the order given, what was found
// and whether it passed. The lines' unnest is bounded (see bounded): a move
// is about one order.
var stockMoveSQL = `WITH k AS MATERIALIZED (
	SELECT s.sku, s.on_hand, s.reserved FROM stock s
	WHERE s.sku = ANY($1::text[])
	ORDER BY s.sku COLLATE "C"
	FOR NO KEY UPDATE
), c AS (
	SELECT l.sku, l.qty, l.n, k.on_hand, k.reserved,
		coalesce(k.reserved >= -$4::bigint * l.qty AND k.on_hand - k.reserved >= ($4::bigint - $3::bigint) * l.qty, false) AS ok
	FROM ` + bounded("unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS l(sku, qty, n)", "l", "$1::text[]") + `
	LEFT JOIN k ON k.sku = l.sku
), g AS (
	SELECT bool_and(ok) AS ok FROM c
), u AS (
	UPDATE stock s SET on_hand = s.on_hand + $3::bigint * c.qty, reserved = s.reserved + $4::bigint * c.qty,
		updated_at = $7
	FROM c, g
	WHERE g.ok AND s.sku = c.sku
), m AS (
	INSERT INTO stock_moves (order_id, sku, qty, kind, created_at)
	SELECT $6, c.sku, c.qty, $5::text, $7 FROM c, g WHERE g.ok ORDER BY c.n
)
SELECT sku, qty, on_hand, reserved, ok FROM c ORDER BY n`

// StockMove applies one kind of move to every line of p, all or nothing, in
// one statement, and journals each line in the order given. The first line
// that fails gives the error, lapse.StockRefusal of what the move found. A
// refused move writes nothing and, inside Tx, leaves the transaction usable.
func (s *Store) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	d, _ := p.Kind.Delta()
	skus, qtys := make([]string, len(p.Lines)), make([]int64, len(p.Lines))
	for i, l := range p.Lines {
		skus[i], qtys[i] = l.SKU, l.Qty
	}
	rows, err := s.db.Query(ctx, stockMoveSQL, skus, qtys, d.OnHand, d.Reserved, p.Kind, p.OrderID, p.At)
	if err != nil {
		return fmt.Errorf("postgres: %s stock for order %d: %w", p.Kind, p.OrderID, err)
	}
	type line struct {
		item             lapse.Item
		onHand, reserved *int64
		ok               bool
	}
	res, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (line, error) {
		var l line
		err := row.Scan(&l.item.SKU, &l.item.Qty, &l.onHand, &l.reserved, &l.ok)
		return l, err
	})
	if err != nil {
		return fmt.Errorf("postgres: %s stock for order %d: %w", p.Kind, p.OrderID, err)
	}
	for _, l := range res {
		switch {
		case l.ok:
		case l.onHand == nil:
			return lapse.StockRefusal(p.Kind, l.item, nil)
		default:
			return lapse.StockRefusal(p.Kind, l.item, &lapse.Stock{SKU: l.item.SKU, OnHand: *l.onHand, Reserved: *l.reserved})
		}
	}
	return nil
}

// StockMoveList returns the stock journal of an order, oldest first.
func (s *Store) StockMoveList(ctx context.Context, orderID int64) ([]*lapse.StockMove, error) {
	rows, err := s.db.Query(ctx, `SELECT id, order_id, sku, qty, kind, created_at FROM stock_moves
		WHERE order_id = $1 ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list stock moves of order %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.StockMove, error) {
		var m lapse.StockMove
		if err := row.Scan(&m.ID, &m.OrderID, &m.SKU, &m.Qty, &m.Kind, &m.CreatedAt); err != nil {
			return nil, err
		}
		m.CreatedAt = m.CreatedAt.UTC()
		return &m, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list stock moves of order %d: %w", orderID, err)
	}
	return out, nil
}
