package mysql

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
// An on-hand below what is reserved fails the ledger's check
// (stock_reserved_check), which undoes that statement alone: StockSet
// returns lapse.StockSetRefusal and writes nothing.
func (s *Store) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	st, err := write(ctx, s, func(w *Store) (*lapse.Stock, error) {
		at := column.Micros(p.At)
		_, err := w.exec(ctx, `INSERT INTO stock (sku, on_hand, reserved, updated_at) VALUES (?, ?, 0, ?)
			ON DUPLICATE KEY UPDATE on_hand = ?, updated_at = ?`, p.SKU, p.OnHand, at, p.OnHand, at)
		if isCheckViolation(err, "stock_reserved_check") {
			// The failed statement keeps the row's lock: this read sees the
			// line as the upsert met it.
			var reserved int64
			if err := w.queryRow(ctx, `SELECT reserved FROM stock WHERE sku = ?`, p.SKU).Scan(&reserved); err != nil {
				return nil, err
			}
			return nil, lapse.StockSetRefusal(p.SKU, p.OnHand, reserved)
		}
		if err != nil {
			return nil, err
		}
		return scanStock(w.queryRow(ctx, `SELECT `+stockCols+` FROM stock WHERE sku = ?`, p.SKU))
	})
	if err != nil {
		return nil, fail(err, "set stock of sku %q", p.SKU)
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

// StockCountReserved returns how many SKUs have stock reserved.
func (s *Store) StockCountReserved(ctx context.Context) (int64, error) {
	var n int64
	if err := s.queryRow(ctx, `SELECT count(*) FROM stock WHERE reserved > 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count skus with stock reserved: %w", err)
	}
	return n, nil
}

// stockMoveSQL applies a lapse.StockDelta to one line, guarded by the
// ledger's invariant: its arguments are what it adds to on_hand and to
// reserved, the time, the SKU, and the bounds of the guard, what it takes
// from reserved and from what is available. It changes the line only when
// 0 <= reserved <= on_hand holds afterwards; the guard is written so that it
// cannot overflow.
const stockMoveSQL = `UPDATE stock SET on_hand = on_hand + ?, reserved = reserved + ?, updated_at = ?
	WHERE sku = ? AND reserved >= ? AND on_hand - reserved >= ?`

// StockMove applies the move p.Kind to every line of p, in the order given,
// all or nothing, in one transaction (a savepoint inside Tx), and journals
// each line as a move of order p.OrderID. Each line's guarded update locks
// its ledger row; the lines come in SKU order, so concurrent moves lock
// rows in one order and queue rather than deadlock. It fails, writing
// nothing, with lapse.StockRefusal of the first line that has no ledger
// line or not enough; inside Tx, a refused move leaves the caller's
// transaction as it was.
func (s *Store) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	d, _ := p.Kind.Delta()
	_, err := write(ctx, s, func(w *Store) (struct{}, error) {
		at := column.Micros(p.At)
		journal := w.inserts(`INSERT INTO stock_moves (order_id, sku, qty, kind, created_at) VALUES `, values(5))
		for _, l := range p.Lines {
			onHand, reserved := d.OnHand*l.Qty, d.Reserved*l.Qty
			res, err := w.exec(ctx, stockMoveSQL, onHand, reserved, at, l.SKU, -reserved, reserved-onHand)
			if err != nil {
				return struct{}{}, fmt.Errorf("sku %s: %w", l.SKU, err)
			}
			if affected(res) == 0 {
				return struct{}{}, stockRefused(ctx, w, p.Kind, l)
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

// stockRefused reads the line that the move of kind on l did not change,
// for lapse.StockRefusal to say why. The update locked the row it read, if
// any, so the line is as the update found it.
func stockRefused(ctx context.Context, w *Store, kind lapse.StockMoveKind, l lapse.Item) error {
	st, err := scanStock(w.queryRow(ctx, `SELECT `+stockCols+` FROM stock WHERE sku = ?`, l.SKU))
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
	ms, err := queryAll(ctx, s, func(r scanner) (*lapse.StockMove, error) {
		var m lapse.StockMove
		var at int64
		if err := r.Scan(&m.ID, &m.OrderID, &m.SKU, &m.Qty, (*string)(&m.Kind), &at); err != nil {
			return nil, err
		}
		m.CreatedAt = column.Time(at)
		return &m, nil
	}, `SELECT id, order_id, sku, qty, kind, created_at FROM stock_moves WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list stock moves of order %d: %w", orderID, err)
	}
	return ms, nil
}
