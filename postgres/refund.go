package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const orderRefundColumns = `id, order_id, order_no, payment_id, provider, txn_id, amount, currency, reason, key, status,
	refund_id, failure, created_at, updated_at`

func scanOrderRefund(row pgx.Row) (*lapse.OrderRefund, error) {
	var x lapse.OrderRefund
	err := row.Scan(&x.ID, &x.OrderID, &x.OrderNo, &x.PaymentID, &x.Provider, &x.TxnID, &x.Amount, &x.Currency, &x.Reason,
		&x.Key, &x.Status, &x.RefundID, &x.Failure, &x.CreatedAt, &x.UpdatedAt)
	if err != nil {
		return nil, err
	}
	x.CreatedAt, x.UpdatedAt = x.CreatedAt.UTC(), x.UpdatedAt.UTC()
	return &x, nil
}

// OrderRefundCreate inserts r unless its key exists: then it writes nothing
// and returns the refund that exists, with created=false.
func (s *Store) OrderRefundCreate(ctx context.Context, r *lapse.OrderRefund) (*lapse.OrderRefund, bool, error) {
	got, err := scanOrderRefund(s.db.QueryRow(ctx, `INSERT INTO order_refunds (order_id, order_no, payment_id, provider,
		txn_id, amount, currency, reason, key, status, refund_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) ON CONFLICT (key) DO NOTHING
		RETURNING `+orderRefundColumns,
		r.OrderID, r.OrderNo, r.PaymentID, r.Provider, r.TxnID, r.Amount, r.Currency, r.Reason, r.Key, r.Status, r.RefundID, r.CreatedAt))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("postgres: create order refund %s: %w", r.Key, err)
	}
	// It exists; in READ COMMITTED this read sees the winner the insert waited for.
	got, err = scanOrderRefund(s.db.QueryRow(ctx, `SELECT `+orderRefundColumns+` FROM order_refunds WHERE key = $1`, r.Key))
	if err != nil {
		return nil, false, fmt.Errorf("postgres: get order refund %s: %w", r.Key, err)
	}
	return got, false, nil
}

// OrderRefundList returns the refunds of an order, oldest first.
func (s *Store) OrderRefundList(ctx context.Context, orderID int64) ([]*lapse.OrderRefund, error) {
	rows, err := s.db.Query(ctx, `SELECT `+orderRefundColumns+` FROM order_refunds WHERE order_id = $1 ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list order refunds of %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.OrderRefund, error) { return scanOrderRefund(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list order refunds of %d: %w", orderID, err)
	}
	return out, nil
}

// orderRefundUpdateSQL is the guarded change of a refund with its optional
// review, which reads the UPDATE's RETURNING: when the guard fails nothing
// is written.
const orderRefundUpdateSQL = `WITH x AS (
	UPDATE order_refunds SET status = $1,
		refund_id = CASE WHEN $2 <> '' THEN $2 ELSE refund_id END, updated_at = $3,
		failure = CASE WHEN $6 <> '' THEN $6 ELSE failure END
	WHERE id = $4 AND status = $5
	RETURNING *
), r AS (
	INSERT INTO reviews (order_id, order_no, reason, delivery_id, order_refund_id, created_at)
	SELECT $10::bigint, $11::text, $8, nullif($12::bigint, 0), x.id, $9 FROM x WHERE $7::bool
)
SELECT ` + orderRefundColumns + ` FROM x`

// OrderRefundUpdate moves a refund from p.From to p.To, with p.Review
// holding it, in one statement, or returns lapse.ErrStale and writes
// nothing.
func (s *Store) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	args := append([]any{p.To, p.RefundID, p.At, p.ID, p.From, p.Failure}, reviewArgs(p.Review)...)
	got, err := scanOrderRefund(s.db.QueryRow(ctx, orderRefundUpdateSQL, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: update order refund %d: %w", p.ID, err)
	}
	return got, nil
}
