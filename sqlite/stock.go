package sqlite

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
// An on-hand below what is reserved is an ECONFLICT error, a negative one an
// EINVALID error; neither writes anything.
func (s *Store) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	if p.OnHand < 0 {
		return nil, lapse.FieldError("on_hand", "must not be negative")
	}
	var st *lapse.Stock
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		st, err = scanStock(w.tx.QueryRowContext(ctx, `INSERT INTO stock (sku, on_hand, reserved, updated_at)
			VALUES (?, ?, 0, ?)
			ON CONFLICT (sku) DO UPDATE SET on_hand = excluded.on_hand, updated_at = excluded.updated_at
				WHERE excluded.on_hand >= stock.reserved
			RETURNING `+stockCols, p.SKU, p.OnHand, micros(p.At)))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var reserved int64
		if err := w.tx.QueryRowContext(ctx, `SELECT reserved FROM stock WHERE sku = ?`, p.SKU).Scan(&reserved); err != nil {
			return err
		}
		return lapse.Errorf(lapse.ECONFLICT, "sku %q has %d reserved, more than an on-hand of %d", p.SKU, reserved, p.OnHand)
	})
	if err != nil {
		return nil, fail(err, "stock set %s", p.SKU)
	}
	return st, nil
}

// StockGet returns the ledger line of sku, or an error that is
// lapse.ErrStockNotFound.
func (s *Store) StockGet(ctx context.Context, sku string) (*lapse.Stock, error) {
	st, err := scanStock(s.db().QueryRowContext(ctx, `SELECT `+stockCols+` FROM stock WHERE sku = ?`, sku))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrStockNotFound, "no stock record for sku %q", sku)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: stock get %s: %w", sku, err)
	}
	return st, nil
}

// stockMoves are the guarded updates of each kind of move: ?1 is the
// quantity, ?2 the time, ?3 the SKU. Each changes the line only when it has
// enough for the move.
var stockMoves = map[lapse.StockMoveKind]string{
	lapse.StockReserve: `UPDATE stock SET reserved = reserved + ?1, updated_at = ?2
		WHERE sku = ?3 AND on_hand - reserved >= ?1`,
	lapse.StockRelease: `UPDATE stock SET reserved = reserved - ?1, updated_at = ?2
		WHERE sku = ?3 AND reserved >= ?1`,
	lapse.StockConsume: `UPDATE stock SET on_hand = on_hand - ?1, reserved = reserved - ?1, updated_at = ?2
		WHERE sku = ?3 AND reserved >= ?1 AND on_hand >= ?1`,
}

// StockMove applies the move p.Kind to every line of p, all or nothing, and
// journals each line as a move of order p.OrderID. A reserve needs
// available ≥ qty, a release reserved ≥ qty, a consume reserved ≥ qty (and
// so on-hand ≥ qty). It fails, writing nothing, with an error that is
// lapse.ErrStockNotFound or lapse.ErrStockShort and names the first SKU that
// has no line or not enough. An unknown kind or a quantity that is not
// positive is an EINVALID error.
//
// Inside Tx, a failed move leaves the caller's transaction as it was, for
// the caller to roll back.
func (s *Store) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	update, ok := stockMoves[p.Kind]
	if !ok {
		return lapse.FieldError("kind", "a stock move is reserve, release or consume, not %q", p.Kind)
	}
	for _, l := range p.Lines {
		if l.Qty <= 0 {
			return lapse.FieldError("qty", "sku %q: the quantity of a stock move must be positive, not %d", l.SKU, l.Qty)
		}
	}
	err := s.write(ctx, func(w *writeTx) error {
		at := micros(p.At)
		for _, l := range p.Lines {
			res, err := w.exec(ctx, update, l.Qty, at, l.SKU)
			if err != nil {
				return fmt.Errorf("sku %s: %w", l.SKU, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return stockShort(ctx, w, p.Kind, l)
			}
			if _, err := w.exec(ctx, `INSERT INTO stock_moves (order_id, sku, qty, kind, created_at)
				VALUES (?, ?, ?, ?, ?)`, p.OrderID, l.SKU, l.Qty, string(p.Kind), at); err != nil {
				return fmt.Errorf("sku %s: journal: %w", l.SKU, err)
			}
		}
		return nil
	})
	if err != nil {
		return fail(err, "stock %s for order %d", p.Kind, p.OrderID)
	}
	return nil
}

// stockShort explains why the move of kind on line l changed nothing.
func stockShort(ctx context.Context, w *writeTx, kind lapse.StockMoveKind, l lapse.Item) error {
	var onHand, reserved int64
	err := w.tx.QueryRowContext(ctx, `SELECT on_hand, reserved FROM stock WHERE sku = ?`, l.SKU).Scan(&onHand, &reserved)
	if errors.Is(err, sql.ErrNoRows) {
		return lapse.Refine(lapse.ErrStockNotFound, "no stock record for sku %q", l.SKU)
	}
	if err != nil {
		return fmt.Errorf("sku %s: %w", l.SKU, err)
	}
	if kind == lapse.StockReserve {
		return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d available, %d to reserve",
			l.SKU, onHand-reserved, l.Qty)
	}
	return lapse.Refine(lapse.ErrStockShort, "not enough stock for sku %q: %d reserved, %d to %s",
		l.SKU, reserved, l.Qty, kind)
}

// StockMoveList returns the stock journal of the order with id orderID,
// oldest first.
func (s *Store) StockMoveList(ctx context.Context, orderID int64) ([]*lapse.StockMove, error) {
	ms, err := queryAll(ctx, s.db(), scanStockMove, `SELECT id, order_id, sku, qty, kind, created_at
		FROM stock_moves WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stock move list %d: %w", orderID, err)
	}
	return ms, nil
}

func scanStockMove(r scanner) (*lapse.StockMove, error) {
	var m lapse.StockMove
	var at int64
	if err := r.Scan(&m.ID, &m.OrderID, &m.SKU, &m.Qty, (*string)(&m.Kind), &at); err != nil {
		return nil, err
	}
	m.CreatedAt = fromMicros(at)
	return &m, nil
}
