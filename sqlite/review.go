package sqlite

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
func (w *writeTx) review(ctx context.Context, r *lapse.Review) error {
	_, err := w.tx.ExecContext(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at)
		VALUES (?, ?, ?, ?, ?)`, r.OrderID, r.OrderNo, r.Reason, nullInt64(r.DeliveryID), column.Micros(r.CreatedAt))
	if err != nil {
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
		where = append(where, "resolved_at IS NULL") // the condition of reviews_open_idx
	}
	var q strings.Builder
	q.WriteString(`SELECT id, order_id, order_no, reason, delivery_id, created_at, resolved_at FROM reviews`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC LIMIT ?")
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rs, err := queryAll(ctx, s.db(), scanReview, q.String(), append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: review list: %w", err)
	}
	return rs, nil
}

func scanReview(r scanner) (*lapse.Review, error) {
	var (
		rv         lapse.Review
		deliveryID sql.NullInt64
		created    int64
		resolved   sql.NullInt64
	)
	if err := r.Scan(&rv.ID, &rv.OrderID, &rv.OrderNo, &rv.Reason, &deliveryID, &created, &resolved); err != nil {
		return nil, err
	}
	rv.DeliveryID, rv.CreatedAt, rv.ResolvedAt = deliveryID.Int64, column.Time(created), column.NullTime(resolved)
	return &rv, nil
}
