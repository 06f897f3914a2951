package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// ReviewList returns reviews matching p, newest first (created_at, then id,
// descending), at most p.Limit of them; a Limit of zero or less does not
// limit. Reviews are written by DeliveryFinish.
func (s *Store) ReviewList(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	var q strings.Builder
	var args []any
	q.WriteString(`SELECT id, order_id, order_no, reason, coalesce(delivery_id, 0), created_at, resolved_at
		FROM reviews WHERE true`)
	if p.OrderID != 0 {
		args = append(args, p.OrderID)
		q.WriteString(" AND order_id = $" + strconv.Itoa(len(args)))
	}
	if p.Open {
		q.WriteString(" AND resolved_at IS NULL")
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q.WriteString(" LIMIT $" + strconv.Itoa(len(args)))
	}
	rows, err := s.db.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list reviews: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Review, error) {
		var r lapse.Review
		if err := row.Scan(&r.ID, &r.OrderID, &r.OrderNo, &r.Reason, &r.DeliveryID, &r.CreatedAt, &r.ResolvedAt); err != nil {
			return nil, err
		}
		r.CreatedAt, r.ResolvedAt = r.CreatedAt.UTC(), utcPtr(r.ResolvedAt)
		return &r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list reviews: %w", err)
	}
	return out, nil
}
