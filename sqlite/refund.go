package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const orderRefundCols = `id, order_id, order_no, payment_id, provider, txn_id, amount, currency, reason, key, status,
	refund_id, failure, created_at, updated_at`

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
// and returns the refund that exists, with created=false.
func (s *Store) OrderRefundCreate(ctx context.Context, r *lapse.OrderRefund) (*lapse.OrderRefund, bool, error) {
	var got *lapse.OrderRefund
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanOrderRefund(w.tx.QueryRowContext(ctx, `INSERT INTO order_refunds (order_id, order_no, payment_id,
			provider, txn_id, amount, currency, reason, key, status, refund_id, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING RETURNING `+orderRefundCols,
			r.OrderID, r.OrderNo, r.PaymentID, r.Provider, r.TxnID, r.Amount, r.Currency, r.Reason, r.Key, string(r.Status),
			r.RefundID, column.Micros(r.CreatedAt), column.Micros(r.CreatedAt)))
		if errors.Is(err, sql.ErrNoRows) {
			got, err = scanOrderRefund(w.tx.QueryRowContext(ctx, `SELECT `+orderRefundCols+` FROM order_refunds WHERE key = ?`, r.Key))
			return err
		}
		created = err == nil
		return err
	})
	if err != nil {
		return nil, false, fail(err, "order refund create %s", r.Key)
	}
	return got, created, nil
}

// OrderRefundList returns the refunds of an order, oldest first.
func (s *Store) OrderRefundList(ctx context.Context, orderID int64) ([]*lapse.OrderRefund, error) {
	rs, err := queryAll(ctx, s.db(), scanOrderRefund, `SELECT `+orderRefundCols+` FROM order_refunds
		WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: order refund list %d: %w", orderID, err)
	}
	return rs, nil
}

// OrderRefundUpdate moves a refund from p.From to p.To, with p.Review
// holding it, in one transaction, or returns lapse.ErrStale and writes
// nothing.
func (s *Store) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	var got *lapse.OrderRefund
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanOrderRefund(w.tx.QueryRowContext(ctx, `UPDATE order_refunds SET status = ?1,
			refund_id = CASE WHEN ?2 <> '' THEN ?2 ELSE refund_id END, updated_at = ?3,
			failure = CASE WHEN ?6 <> '' THEN ?6 ELSE failure END
			WHERE id = ?4 AND status = ?5 RETURNING `+orderRefundCols,
			string(p.To), p.RefundID, column.Micros(p.At), p.ID, string(p.From), p.Failure))
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.ErrStale
		}
		if err != nil || p.Review == nil {
			return err
		}
		rv := *p.Review
		rv.OrderRefundID = p.ID
		return w.review(ctx, &rv)
	})
	if err != nil {
		return nil, fail(err, "order refund update %d", p.ID)
	}
	return got, nil
}
