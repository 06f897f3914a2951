package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The deadline queries read orders_due_idx, (deadline_at, id, flow): in
// deadline order, with the flow at hand to filter by. MySQL has no partial
// indexes, so the index holds every order, those without a deadline (NULL,
// first in the index) too; a condition on deadline_at is a range that starts
// after them.

// OrderDeadlineSet moves the deadline of the order p.OrderID, if it is still
// in p.FromState at p.FromVersion, to p.DeadlineAt at the next version, and
// writes p.Outbox with its deliveries, in one transaction. It writes no log
// row: the state does not change. It returns the order as stored after the
// change, or lapse.ErrStale and writes nothing.
func (s *Store) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	o, err := write(ctx, s, func(w *Store) (*lapse.Order, error) {
		intent := column.NullMicros(p.IntentAt)
		res, err := w.exec(ctx, `UPDATE orders SET deadline_at = ?, updated_at = ?, version = version + 1,
				intent_provider = IF(? IS NULL, intent_provider, ?), intent_at = COALESCE(?, intent_at),
				pay_by = COALESCE(?, pay_by)
			WHERE id = ? AND state = ? AND version = ?`,
			column.Micros(p.DeadlineAt), column.Micros(p.At), intent, p.IntentProvider, intent, column.NullMicros(p.PayBy),
			p.OrderID, string(p.FromState), p.FromVersion)
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, lapse.ErrStale
		}
		if err := w.outbox(ctx, appendEvents(nil, p.OrderID, p.Outbox)); err != nil {
			return nil, err
		}
		return w.orderByID(ctx, p.OrderID)
	})
	if errors.Is(err, lapse.ErrStale) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: set deadline of order %d: %w", p.OrderID, err)
	}
	return o, nil
}

// OrderClaimDue returns up to p.Limit orders of p.Flows whose deadline is at
// or before p.DueBy, earliest first.
// Inside Tx the claim locks what it returns until the transaction ends and
// skips rows that other transactions hold (FOR UPDATE SKIP LOCKED), so that
// claimers on many nodes take disjoint batches; at READ COMMITTED it locks
// no gaps, so new orders are not held up. Outside Tx it is a plain read.
func (s *Store) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	from := column.Micros(p.From)
	args := append(append([]any{column.Micros(p.DueBy), from, from, p.FromID}, stringArgs(p.Flows)...), p.Limit)
	q := orderClaimDueSQL(len(p.Flows))
	if s.tx != nil {
		q += " FOR UPDATE SKIP LOCKED"
	}
	due, err := queryAll(ctx, s, scanOrder, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: claim due orders: %w", err)
	}
	return due, nil
}

// orderClaimDueSQL selects the due orders of nflows flows, in (deadline, id)
// order, the due index's; its arguments are the due time, the deadline to
// read on from (twice) and the id, at that deadline, to read on after, the
// flows and the limit. The range is on deadline_at alone, which MySQL and
// MariaDB scan from the deadline on; the id is a filter of the entries at
// that deadline, which purge removes soon after their orders close.
func orderClaimDueSQL(nflows int) string {
	return `SELECT ` + orderCols + ` FROM orders
		WHERE deadline_at <= ? AND deadline_at >= ? AND (deadline_at > ? OR id > ?) AND flow IN (` + marks(nflows) + `)
		ORDER BY deadline_at, id LIMIT ?`
}

// orderNextDeadlineSQL reads the due index alone, which carries flow for
// it, from a time on; its arguments are that time and the flows.
func orderNextDeadlineSQL(nflows int) string {
	return `SELECT deadline_at FROM orders
		WHERE deadline_at IS NOT NULL AND deadline_at >= ? AND flow IN (` + marks(nflows) + `)
		ORDER BY deadline_at LIMIT 1`
}

// OrderNextDeadline returns the earliest deadline at or after from among
// orders of flows, and false when none has one. It reads only the due index.
func (s *Store) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	var us int64
	args := append([]any{column.Micros(from)}, stringArgs(flows)...)
	err := s.queryRow(ctx, orderNextDeadlineSQL(len(flows)), args...).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mysql: next deadline: %w", err)
	}
	return column.Time(us), true, nil
}

// orderCountDueSQL counts within the due index.
const orderCountDueSQL = `SELECT count(*) FROM orders WHERE deadline_at <= ?`

// OrderDeadlineMin returns the earliest deadline among the orders ids that
// have one, and false when none has.
func (s *Store) OrderDeadlineMin(ctx context.Context, ids []int64) (time.Time, bool, error) {
	if len(ids) == 0 {
		return time.Time{}, false, nil
	}
	var us sql.NullInt64
	if err := s.queryRow(ctx, `SELECT min(deadline_at) FROM orders WHERE id IN (`+marks(len(ids))+`)`, int64Args(ids)...).Scan(&us); err != nil {
		return time.Time{}, false, fmt.Errorf("mysql: earliest deadline of %d orders: %w", len(ids), err)
	}
	if !us.Valid {
		return time.Time{}, false, nil
	}
	return column.Time(us.Int64), true, nil
}

// OrderCountDue counts the orders, of every flow, whose deadline is at or
// before now.
func (s *Store) OrderCountDue(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	if err := s.queryRow(ctx, orderCountDueSQL, column.Micros(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count due orders: %w", err)
	}
	return n, nil
}

const orderCountOpenSQL = `SELECT flow, state, count(*), count(deadline_at),
		count(CASE WHEN items IS NOT NULL OR coupon <> '' THEN 1 END) FROM orders
		WHERE closed_at IS NULL GROUP BY flow, state ORDER BY flow, state`

// OrderCountOpen counts the open orders by flow and state.
func (s *Store) OrderCountOpen(ctx context.Context) ([]lapse.OrderStateCount, error) {
	out, err := queryAll(ctx, s, func(r scanner) (lapse.OrderStateCount, error) {
		var c lapse.OrderStateCount
		err := r.Scan(&c.Flow, &c.State, &c.N, &c.Timed, &c.Holding)
		return c, err
	}, orderCountOpenSQL)
	if err != nil {
		return nil, fmt.Errorf("mysql: count open orders: %w", err)
	}
	return out, nil
}
