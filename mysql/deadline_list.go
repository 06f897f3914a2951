package mysql

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The deadline list walks orders_due_idx, whose (deadline_at, id) prefix is
// the listing's order, from p.After on: a range of the index that ends at
// the limit, with no sort.
const (
	orderDeadlineListSQL = `SELECT id, order_no, deadline_at FROM orders
		WHERE deadline_at IS NOT NULL
		ORDER BY deadline_at, id LIMIT ?`
	orderDeadlineListAfterSQL = `SELECT id, order_no, deadline_at FROM orders
		WHERE deadline_at IS NOT NULL AND (deadline_at > ? OR (deadline_at = ? AND id > ?))
		ORDER BY deadline_at, id LIMIT ?`
)

// OrderDeadlineList returns up to p.Limit orders that have a deadline, in
// (deadline, id) order after p.After.
func (s *Store) OrderDeadlineList(ctx context.Context, p *lapse.OrderDeadlineListParams) ([]lapse.OrderDeadline, error) {
	q, args := orderDeadlineListSQL, []any{p.Limit}
	if p.After != nil {
		at := column.Micros(p.After.DeadlineAt)
		q, args = orderDeadlineListAfterSQL, []any{at, at, p.After.ID, p.Limit}
	}
	out, err := queryAll(ctx, s, func(r scanner) (lapse.OrderDeadline, error) {
		var d lapse.OrderDeadline
		var us int64
		err := r.Scan(&d.ID, &d.OrderNo, &us)
		d.DeadlineAt = column.Time(us)
		return d, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list deadlines: %w", err)
	}
	return out, nil
}
