package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// Reviews are created by DeliveryFinish, when a delivery dies, and by
// PaymentCreate and PaymentUpdate, when a payment goes to review.

// review inserts r, open; a DeliveryID of zero is stored as none.
func (w *Store) review(ctx context.Context, r *lapse.Review) error {
	if _, err := w.exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at) VALUES (?, ?, ?, ?, ?)`,
		r.OrderID, r.OrderNo, r.Reason, nullInt64(r.DeliveryID), column.Micros(r.CreatedAt)); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	return nil
}

// ReviewList returns the reviews that match p, newest first (created_at,
// then id, descending), at most p.Limit of them; a Limit of zero or less does
// not limit.
func (s *Store) ReviewList(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	var where []string
	var args []any
	if p.OrderID != 0 {
		where, args = append(where, "order_id = ?"), append(args, p.OrderID)
	}
	if p.Open {
		where = append(where, "resolved_at IS NULL")
	}
	var q strings.Builder
	q.WriteString(`SELECT id, order_id, order_no, reason, delivery_id, created_at, resolved_at FROM reviews`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	rs, err := queryAll(ctx, s, func(r scanner) (*lapse.Review, error) {
		var (
			rv                   lapse.Review
			deliveryID, resolved sql.NullInt64
			created              int64
		)
		if err := r.Scan(&rv.ID, &rv.OrderID, &rv.OrderNo, &rv.Reason, &deliveryID, &created, &resolved); err != nil {
			return nil, err
		}
		rv.DeliveryID, rv.CreatedAt, rv.ResolvedAt = deliveryID.Int64, column.Time(created), column.NullTime(resolved)
		return &rv, nil
	}, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list reviews: %w", err)
	}
	return rs, nil
}
