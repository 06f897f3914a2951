package mysql

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const orderRefundCols = "id, order_id, order_no, payment_id, provider, txn_id, amount, currency, reason, `key`, status, " +
	"refund_id, failure, created_at, updated_at"

func scanOrderRefund(r scanner) (*lapse.OrderRefund, error) {
	var (
		x                lapse.OrderRefund
		created, updated int64
	)
	err := r.Scan(&x.ID, &x.OrderID, &x.OrderNo, &x.PaymentID, &x.Provider, &x.TxnID, &x.Amount, &x.Currency, &x.Reason,
		&x.Key, (*string)(&x.Status), &x.RefundID, &x.Failure, &created, &updated)
	if err != nil {
		return nil, err
	}
	x.CreatedAt, x.UpdatedAt = column.Time(created), column.Time(updated)
	return &x, nil
}

// OrderRefundCreate inserts r unless its key exists: then it writes nothing
// and returns the refund that exists, with created=false. It locks the
// refund's order first (see lockOrder). An insert that meets a concurrent one of the key waits for it, and the read that follows
// sees it committed.
func (s *Store) OrderRefundCreate(ctx context.Context, r *lapse.OrderRefund) (*lapse.OrderRefund, bool, error) {
	type result struct {
		r       *lapse.OrderRefund
		created bool
	}
	got, err := write(ctx, s, func(w *Store) (result, error) {
		if err := w.lockOrder(ctx, r.OrderID); err != nil {
			return result{}, err
		}
		res, err := w.exec(ctx, "INSERT INTO order_refunds (order_id, order_no, payment_id, provider, txn_id, amount, "+
			"currency, reason, `key`, status, refund_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			r.OrderID, r.OrderNo, r.PaymentID, r.Provider, r.TxnID, r.Amount, r.Currency, r.Reason, r.Key, string(r.Status),
			r.RefundID, column.Micros(r.CreatedAt), column.Micros(r.CreatedAt))
		if isDuplicateKey(err, "order_refunds_key_key") {
			x, err := scanOrderRefund(w.queryRow(ctx, "SELECT "+orderRefundCols+" FROM order_refunds WHERE `key` = ?", r.Key))
			return result{x, false}, err
		}
		if err != nil {
			return result{}, err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return result{}, err
		}
		x, err := scanOrderRefund(w.queryRow(ctx, "SELECT "+orderRefundCols+" FROM order_refunds WHERE id = ?", id))
		return result{x, true}, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("mysql: create order refund %s: %w", r.Key, err)
	}
	return got.r, got.created, nil
}

// OrderRefundList returns the refunds of an order, oldest first.
func (s *Store) OrderRefundList(ctx context.Context, orderID int64) ([]*lapse.OrderRefund, error) {
	rs, err := queryAll(ctx, s, scanOrderRefund, "SELECT "+orderRefundCols+" FROM order_refunds WHERE order_id = ? ORDER BY id", orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list order refunds of %d: %w", orderID, err)
	}
	return rs, nil
}

// OrderRefundUpdate moves a refund from p.From to p.To, with p.Review
// holding it, in one transaction, or returns lapse.ErrStale and writes
// nothing.
func (s *Store) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	got, err := write(ctx, s, func(w *Store) (*lapse.OrderRefund, error) {
		res, err := w.exec(ctx, `UPDATE order_refunds SET status = ?, refund_id = IF(? <> _binary'', ?, refund_id),
			failure = IF(? <> _binary'', ?, failure), updated_at = ? WHERE id = ? AND status = ?`,
			string(p.To), p.RefundID, p.RefundID, p.Failure, p.Failure, column.Micros(p.At), p.ID, string(p.From))
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, lapse.ErrStale
		}
		if p.Review != nil {
			rv := *p.Review
			rv.OrderRefundID = p.ID
			if err := w.review(ctx, &rv); err != nil {
				return nil, err
			}
		}
		return scanOrderRefund(w.queryRow(ctx, "SELECT "+orderRefundCols+" FROM order_refunds WHERE id = ?", p.ID))
	})
	if err != nil {
		return nil, fail(err, "update order refund %d", p.ID)
	}
	return got, nil
}
