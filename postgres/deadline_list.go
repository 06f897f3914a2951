package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// The deadline list walks orders_due_idx from p.After on. The index is
// ordered by deadline_at alone, so the row comparison bounds the scan by its
// leading column (deadline_at >= $1) and an incremental sort orders each run
// of equal deadlines by id: no sort of the whole index, and the scan stops
// at the limit.
const (
	orderDeadlineListSQL = `SELECT id, order_no, deadline_at FROM orders
		WHERE deadline_at IS NOT NULL
		ORDER BY deadline_at, id LIMIT $1`
	orderDeadlineListAfterSQL = `SELECT id, order_no, deadline_at FROM orders
		WHERE deadline_at IS NOT NULL AND (deadline_at, id) > ($2, $3)
		ORDER BY deadline_at, id LIMIT $1`
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
