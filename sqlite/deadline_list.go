package sqlite

import (
	"context"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The deadline list walks orders_due_idx, on (deadline_at, id, flow), from
// p.After on, in its order.
const (
	orderDeadlineListSQL = `SELECT id, order_no, deadline_at FROM orders
		WHERE deadline_at IS NOT NULL
		ORDER BY deadline_at, id LIMIT ?`
	orderDeadlineListAfterSQL = `SELECT id, order_no, deadline_at FROM orders
		WHERE deadline_at IS NOT NULL AND (deadline_at, id) > (?, ?)
		ORDER BY deadline_at, id LIMIT ?`
)

// OrderDeadlineList returns up to p.Limit orders that have a deadline, in
// (deadline, id) order after p.After.
func (s *Store) OrderDeadlineList(ctx context.Context, p *lapse.OrderDeadlineListParams) ([]lapse.OrderDeadline, error) {
	q, args := orderDeadlineListSQL, []any{p.Limit}
	if p.After != nil {
		q, args = orderDeadlineListAfterSQL, []any{column.Micros(p.After.DeadlineAt), p.After.ID, p.Limit}
	}
	out, err := queryAll(ctx, s.db(), func(r scanner) (lapse.OrderDeadline, error) {
		var d lapse.OrderDeadline
		var us int64
		err := r.Scan(&d.ID, &d.OrderNo, &us)
		d.DeadlineAt = column.Time(us)
		return d, err
	}, q, args...)
	if err != nil {
		return nil, fail(err, "order deadline list")
	}
	return out, nil
}
