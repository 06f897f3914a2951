package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const stockCols = `sku, on_hand, reserved, updated_at`

func scanStock(r scanner) (*lapse.Stock, error) {
	var st lapse.Stock
	var at int64
	if err := r.Scan(&st.SKU, &st.OnHand, &st.Reserved, &at); err != nil {
		return nil, err
	}
	st.UpdatedAt = column.Time(at)
	return &st, nil
}

// StockSet sets the on-hand quantity of p.SKU to p.OnHand, creating its
// ledger line with nothing reserved when there is none, and returns the line.
// An on-hand below what is reserved is lapse.ErrStockReserved and writes
// nothing.
func (s *Store) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	var st *lapse.Stock
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		st, err = scanStock(w.tx.QueryRowContext(ctx, `INSERT INTO stock (sku, on_hand, reserved, updated_at)
			VALUES (?, ?, 0, ?)
			ON CONFLICT (sku) DO UPDATE SET on_hand = excluded.on_hand, updated_at = excluded.updated_at
				WHERE excluded.on_hand >= stock.reserved
			RETURNING `+stockCols, p.SKU, p.OnHand, column.Micros(p.At)))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var reserved int64
		if err := w.tx.QueryRowContext(ctx, `SELECT reserved FROM stock WHERE sku = ?`, p.SKU).Scan(&reserved); err != nil {
			return err
		}
		return lapse.StockSetRefusal(p.SKU, p.OnHand, reserved)
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

// stockMoveSQL applies a lapse.StockDelta to one line, guarded by the
// ledger's invariant: ?1 and ?2 are what it adds to on_hand and reserved, ?3
// the time, ?4 the SKU. It changes the line only when 0 <= reserved <=
// on_hand holds afterwards; the guard is written so that it cannot overflow.
const stockMoveSQL = `UPDATE stock SET on_hand = on_hand + ?1, reserved = reserved + ?2, updated_at = ?3
	WHERE sku = ?4 AND reserved >= -?2 AND on_hand - reserved >= ?2 - ?1`

// StockMove applies the move p.Kind to every line of p, in the order given,
// all or nothing, and journals each line as a move of order p.OrderID. It
// fails, writing nothing, with lapse.StockRefusal of the first line that has
// no ledger line or not enough. Inside Tx, a refused move leaves the
// caller's transaction as it was.
func (s *Store) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	d, _ := p.Kind.Delta()
	err := s.write(ctx, func(w *writeTx) error {
		at := column.Micros(p.At)
		for _, l := range p.Lines {
			res, err := w.exec(ctx, stockMoveSQL, d.OnHand*l.Qty, d.Reserved*l.Qty, at, l.SKU)
			if err != nil {
				return fmt.Errorf("sku %s: %w", l.SKU, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return stockRefused(ctx, w, p.Kind, l)
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

// stockRefused reads the line that the move of kind on l did not change,
// for lapse.StockRefusal to say why.
func stockRefused(ctx context.Context, w *writeTx, kind lapse.StockMoveKind, l lapse.Item) error {
	st, err := scanStock(w.tx.QueryRowContext(ctx, `SELECT `+stockCols+` FROM stock WHERE sku = ?`, l.SKU))
	if errors.Is(err, sql.ErrNoRows) {
		return lapse.StockRefusal(kind, l, nil)
	}
	if err != nil {
		return fmt.Errorf("sku %s: %w", l.SKU, err)
	}
	return lapse.StockRefusal(kind, l, st)
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

// StockCountReserved returns how many SKUs have stock reserved.
func (s *Store) StockCountReserved(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db().QueryRowContext(ctx, `SELECT count(*) FROM stock WHERE reserved > 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: stock count reserved: %w", err)
	}
	return n, nil
}

func scanStockMove(r scanner) (*lapse.StockMove, error) {
	var m lapse.StockMove
	var at int64
	if err := r.Scan(&m.ID, &m.OrderID, &m.SKU, &m.Qty, (*string)(&m.Kind), &at); err != nil {
		return nil, err
	}
	m.CreatedAt = column.Time(at)
	return &m, nil
}
