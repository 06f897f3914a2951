package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
)

const stockCols = `sku, on_hand, reserved, updated_at`

func scanStock(r scanner) (*lapse.Stock, error) {
	var st lapse.Stock
	var at int64
	if err := r.Scan(&st.SKU, &st.OnHand, &st.Reserved, &at); err != nil {
		return nil, err
	}
	st.UpdatedAt = fromMicros(at)
	return &st, nil
}

// StockSet sets the on-hand quantity of p.SKU to p.OnHand, creating its
// ledger line with nothing reserved when there is none, and returns the line.
// The ledger's checks refuse what it cannot hold, writing nothing: an on-hand
// below what is reserved is an ECONFLICT error (stock_reserved_check), a
// negative one an EINVALID error (stock_on_hand_check).
func (s *Store) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	st, err := write(ctx, s, func(w *Store) (*lapse.Stock, error) {
		at := micros(p.At)
		if _, err := w.exec(ctx, `INSERT INTO stock (sku, on_hand, reserved, updated_at) VALUES (?, ?, 0, ?)
			ON DUPLICATE KEY UPDATE on_hand = ?, updated_at = ?`, p.SKU, p.OnHand, at, p.OnHand, at); err != nil {
			return nil, err
		}
		return scanStock(w.queryRow(ctx, `SELECT `+stockCols+` FROM stock WHERE sku = ?`, p.SKU))
	})
	switch {
	case isCheckViolation(err, "stock_on_hand_check"):
		return nil, lapse.FieldError("on_hand", "must not be negative")
	case isCheckViolation(err, "stock_reserved_check"):
		return nil, lapse.Errorf(lapse.ECONFLICT, "on-hand %d of sku %q is below what orders have reserved", p.OnHand, p.SKU)
	case err != nil:
		return nil, fmt.Errorf("mysql: set stock of sku %q: %w", p.SKU, err)
	}
	return st, nil
}

// StockGet returns the ledger line of sku, or an error that is
// lapse.ErrStockNotFound.
func (s *Store) StockGet(ctx context.Context, sku string) (*lapse.Stock, error) {
	st, err := scanStock(s.queryRow(ctx, `SELECT `+stockCols+` FROM stock WHERE sku = ?`, sku))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrStockNotFound, "no stock record for sku %q", sku)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get stock of sku %q: %w", sku, err)
	}
	return st, nil
}

// stockMoves are the guarded updates of each kind of move; their arguments
// are the quantity, the time, the SKU and the quantity again. Each changes
// the line only when it has enough for the move.
var stockMoves = map[lapse.StockMoveKind]string{
	lapse.StockReserve: `UPDATE stock SET reserved = reserved + ?, updated_at = ?
		WHERE sku = ? AND on_hand - reserved >= ?`,
	lapse.StockRelease: `UPDATE stock SET reserved = reserved - ?, updated_at = ?
		WHERE sku = ? AND reserved >= ?`,
	lapse.StockConsume: `UPDATE stock SET on_hand = on_hand - ?, reserved = reserved - ?, updated_at = ?
		WHERE sku = ? AND reserved >= ? AND on_hand >= ?`,
}

// StockMove applies the move p.Kind to every line of p, all or nothing, in
// one transaction (a savepoint inside Tx), and journals each line as a move
// of order p.OrderID. It first locks the lines' ledger rows, which InnoDB
// does in SKU order whatever the order of p.Lines, so that concurrent moves
// queue rather than deadlock; then each line's guarded update. A reserve
// needs available ≥ qty, a release reserved ≥ qty, a consume reserved ≥ qty
// and on-hand ≥ qty. The first line that fails gives the error, which is
// lapse.ErrStockNotFound or lapse.ErrStockShort naming its SKU; a refused
// move writes nothing and leaves a caller's transaction usable. An unknown
// kind is an EINVALID error.
func (s *Store) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	update, ok := stockMoves[p.Kind]
	if !ok {
		return lapse.FieldError("kind", "a stock move is reserve, release or consume, not %q", p.Kind)
	}
	if len(p.Lines) == 0 {
		return nil
	}
	_, err := write(ctx, s, func(w *Store) (struct{}, error) {
		skus := make([]any, len(p.Lines))
		for i, l := range p.Lines {
			skus[i] = l.SKU
		}
		lines, err := queryAll(ctx, w, scanStock, `SELECT `+stockCols+` FROM stock WHERE sku IN (`+marks(len(skus))+`)
			ORDER BY sku FOR UPDATE`, skus...)
		if err != nil {
			return struct{}{}, err
		}
		held := make(map[string]*lapse.Stock, len(lines))
		for _, st := range lines {
			held[st.SKU] = st
		}
		at := micros(p.At)
		journal := w.inserts(`INSERT INTO stock_moves (order_id, sku, qty, kind, created_at) VALUES `, values(5))
		for _, l := range p.Lines {
			args := []any{l.Qty, at, l.SKU, l.Qty}
			if p.Kind == lapse.StockConsume {
				args = []any{l.Qty, l.Qty, at, l.SKU, l.Qty, l.Qty}
			}
			res, err := w.exec(ctx, update, args...)
			if err != nil {
				return struct{}{}, fmt.Errorf("sku %s: %w", l.SKU, err)
			}
			if affected(res) == 0 {
				return struct{}{}, stockShort(p.Kind, l, held[l.SKU])
			}
			if err := journal.add(ctx, p.OrderID, l.SKU, l.Qty, string(p.Kind), at); err != nil {
				return struct{}{}, fmt.Errorf("journal: %w", err)
			}
		}
		return struct{}{}, journal.flush(ctx)
	})
	if err != nil {
		return fail(err, "%s stock for order %d", p.Kind, p.OrderID)
	}
	return nil
}

// stockShort explains why the move of kind on line l changed nothing; st is
// the line as locked, nil when there is none.
func stockShort(kind lapse.StockMoveKind, l lapse.Item, st *lapse.Stock) error {
	switch {
	case st == nil:
		return lapse.Refine(lapse.ErrStockNotFound, "no stock record for sku %q", l.SKU)
	case kind == lapse.StockReserve:
		return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d available, %d to reserve", l.SKU, st.Available(), l.Qty)
	case kind == lapse.StockRelease:
		return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d reserved, %d to release", l.SKU, st.Reserved, l.Qty)
	default:
		return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d reserved and %d on hand, %d to consume", l.SKU, st.Reserved, st.OnHand, l.Qty)
	}
}

// StockMoveList returns the stock journal of the order with id orderID,
// oldest first.
func (s *Store) StockMoveList(ctx context.Context, orderID int64) ([]*lapse.StockMove, error) {
	ms, err := queryAll(ctx, s, func(r scanner) (*lapse.StockMove, error) {
		var m lapse.StockMove
		var at int64
		if err := r.Scan(&m.ID, &m.OrderID, &m.SKU, &m.Qty, (*string)(&m.Kind), &at); err != nil {
			return nil, err
		}
		m.CreatedAt = fromMicros(at)
		return &m, nil
	}, `SELECT id, order_id, sku, qty, kind, created_at FROM stock_moves WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list stock moves of order %d: %w", orderID, err)
	}
	return ms, nil
}
