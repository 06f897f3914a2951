package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// The deadline list walks order_deadlines_due_idx, ordered by (deadline_at,
// order_id), from p.After on, and reads each order's number by primary key:
// no sort, and the scan stops at the limit.
const (
	orderDeadlineListSQL = `SELECT d.order_id, o.order_no, d.deadline_at FROM order_deadlines d
		JOIN orders o ON o.id = d.order_id
		ORDER BY d.deadline_at, d.order_id LIMIT $1`
	orderDeadlineListAfterSQL = `SELECT d.order_id, o.order_no, d.deadline_at FROM order_deadlines d
		JOIN orders o ON o.id = d.order_id
		WHERE (d.deadline_at, d.order_id) > ($2, $3)
		ORDER BY d.deadline_at, d.order_id LIMIT $1`
)

// OrderDeadlineList returns up to p.Limit orders that have a deadline, in
// (deadline, id) order after p.After.
func (s *Store) OrderDeadlineList(ctx context.Context, p *lapse.OrderDeadlineListParams) ([]lapse.OrderDeadline, error) {
	q, args := orderDeadlineListSQL, []any{p.Limit}
	if p.After != nil {
		q, args = orderDeadlineListAfterSQL, []any{p.Limit, p.After.DeadlineAt, p.After.ID}
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list deadlines: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lapse.OrderDeadline, error) {
		var d lapse.OrderDeadline
		err := row.Scan(&d.ID, &d.OrderNo, &d.DeadlineAt)
		d.DeadlineAt = d.DeadlineAt.UTC()
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list deadlines: %w", err)
	}
	return out, nil
}
