package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// stockSetSQL creates a ledger line or sets its on-hand quantity. An on-hand
// below what is reserved fails stock_reserved_check.
const stockSetSQL = `INSERT INTO stock (sku, on_hand, reserved, updated_at) VALUES ($1, $2, 0, $3)
ON CONFLICT (sku) DO UPDATE SET on_hand = excluded.on_hand, updated_at = excluded.updated_at
RETURNING sku, on_hand, reserved, updated_at`

// StockSet sets the on-hand quantity of a SKU, creating its ledger line (with
// nothing reserved) if needed. A negative on-hand is an EINVALID error, an
// on-hand below what is reserved an ECONFLICT error; inside Tx the latter,
// like any failed statement, aborts the transaction.
func (s *Store) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	if p.OnHand < 0 {
		return nil, lapse.FieldError("on_hand", "must not be negative")
	}
	st, err := scanStock(s.db.QueryRow(ctx, stockSetSQL, p.SKU, p.OnHand, p.At))
	if isCheckViolation(err, "stock_reserved_check") {
		return nil, lapse.Errorf(lapse.ECONFLICT, "on-hand %d of sku %q is below what orders have reserved", p.OnHand, p.SKU)
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

func scanStock(row pgx.Row) (*lapse.Stock, error) {
	var st lapse.Stock
	if err := row.Scan(&st.SKU, &st.OnHand, &st.Reserved, &st.UpdatedAt); err != nil {
		return nil, err
	}
	st.UpdatedAt = st.UpdatedAt.UTC()
	return &st, nil
}

// stockMoveSQL moves every line or none, in one statement, so that a refused
// move leaves a caller's transaction usable. k locks the lines' ledger rows
// in SKU order (bytewise, as Go sorts) before anything is decided, so that
// concurrent moves queue rather than deadlock, and reads them as they are
// once locked; c decides each line against those values; the update and the
// journal happen only when every line passed. The result says, line by line,
// what was found and whether it passed.
const stockMoveSQL = `WITH k AS MATERIALIZED (
	SELECT s.sku, s.on_hand, s.reserved FROM stock s
	WHERE s.sku = ANY($1::text[])
	ORDER BY s.sku COLLATE "C"
	FOR NO KEY UPDATE
), c AS (
	SELECT l.sku, l.qty, l.n, k.on_hand, k.reserved, coalesce(CASE $3::text
		WHEN 'reserve' THEN k.on_hand - k.reserved >= l.qty
		WHEN 'release' THEN k.reserved >= l.qty
		WHEN 'consume' THEN k.reserved >= l.qty AND k.on_hand >= l.qty
	END, false) AS ok
	FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS l(sku, qty, n)
	LEFT JOIN k ON k.sku = l.sku
), g AS (
	SELECT bool_and(ok) AS ok FROM c
), u AS (
	UPDATE stock s SET
		reserved = CASE $3::text WHEN 'reserve' THEN s.reserved + c.qty ELSE s.reserved - c.qty END,
		on_hand = CASE $3::text WHEN 'consume' THEN s.on_hand - c.qty ELSE s.on_hand END,
		updated_at = $5
	FROM c, g
	WHERE g.ok AND s.sku = c.sku
), m AS (
	INSERT INTO stock_moves (order_id, sku, qty, kind, created_at)
	SELECT $4, c.sku, c.qty, $3::text, $5 FROM c, g WHERE g.ok ORDER BY c.n
)
SELECT sku, qty, on_hand, reserved, ok FROM c ORDER BY n`

// StockMove applies one kind of move to every line of p, all or nothing, in
// one statement, and journals each line, in SKU order. A reserve needs
// available ≥ qty; a release needs reserved ≥ qty; a consume needs reserved
// ≥ qty and on-hand ≥ qty. The first line in SKU order that fails gives the
// error: lapse.Refine(lapse.ErrStockNotFound or lapse.ErrStockShort, …)
// naming its SKU. A refused move writes nothing and, inside Tx, leaves the
// transaction usable. An unknown kind, a qty below 1 or a SKU given twice
// is an EINVALID error.
func (s *Store) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	switch p.Kind {
	case lapse.StockReserve, lapse.StockRelease, lapse.StockConsume:
	default:
		return lapse.Errorf(lapse.EINVALID, "unknown stock move %q", p.Kind)
	}
	if len(p.Lines) == 0 {
		return nil
	}
	lines := slices.SortedFunc(slices.Values(p.Lines), func(a, b lapse.Item) int { return cmp.Compare(a.SKU, b.SKU) })
	skus, qtys := make([]string, len(lines)), make([]int64, len(lines))
	for i, l := range lines {
		if l.Qty < 1 {
			return lapse.FieldError("lines", "qty of sku %q must be positive", l.SKU)
		}
		if i > 0 && l.SKU == lines[i-1].SKU {
			return lapse.FieldError("lines", "sku %q appears twice", l.SKU)
		}
		skus[i], qtys[i] = l.SKU, l.Qty
	}
	rows, err := s.db.Query(ctx, stockMoveSQL, skus, qtys, p.Kind, p.OrderID, p.At)
	if err != nil {
		return fmt.Errorf("postgres: %s stock for order %d: %w", p.Kind, p.OrderID, err)
	}
	type line struct {
		sku              string
		qty              int64
		onHand, reserved *int64
		ok               bool
	}
	res, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (line, error) {
		var l line
		err := row.Scan(&l.sku, &l.qty, &l.onHand, &l.reserved, &l.ok)
		return l, err
	})
	if err != nil {
		return fmt.Errorf("postgres: %s stock for order %d: %w", p.Kind, p.OrderID, err)
	}
	for _, l := range res {
		switch {
		case l.ok:
		case l.onHand == nil:
			return lapse.Refine(lapse.ErrStockNotFound, "no stock record for sku %q", l.sku)
		case p.Kind == lapse.StockReserve:
			return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d available, %d to reserve", l.sku, *l.onHand-*l.reserved, l.qty)
		case p.Kind == lapse.StockRelease:
			return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d reserved, %d to release", l.sku, *l.reserved, l.qty)
		default:
			return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d reserved and %d on hand, %d to consume", l.sku, *l.reserved, *l.onHand, l.qty)
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
