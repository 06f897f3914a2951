package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The deadline queries name deadline_at IS NOT NULL, the condition of the
// partial index orders_due_idx, so that the planner may use it; ordering by
// deadline_at, or by deadline_at and id, the index's order (migration 0025),
// lets it read the index in order and stop at the limit.

// claimDueQuery selects the due orders of nflows flows, in (deadline, id)
// order, the due index's. Its arguments are the due time, the deadline and
// id to read on from, the flows and the limit.
func claimDueQuery(nflows int) string {
	return `SELECT ` + orderCols + ` FROM orders
		WHERE deadline_at IS NOT NULL AND deadline_at <= ? AND (deadline_at, id) > (?, ?) AND flow IN (` + marks(nflows) + `)
		ORDER BY deadline_at, id LIMIT ?`
}

// nextDeadlineQuery selects the earliest deadline of nflows flows at or
// after a time; its arguments are that time and the flows.
func nextDeadlineQuery(nflows int) string {
	return `SELECT deadline_at FROM orders
		WHERE deadline_at IS NOT NULL AND deadline_at >= ? AND flow IN (` + marks(nflows) + `)
		ORDER BY deadline_at LIMIT 1`
}

// marks is n comma-separated placeholders.
func marks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// OrderDeadlineSet moves the deadline of the order p.OrderID, if it is still
// in p.FromState at p.FromVersion, to p.DeadlineAt at the next version, and
// writes p.Outbox, in one transaction. It writes no log row: the state does
// not change. It returns the order as stored after the change, or
// lapse.ErrStale and writes nothing.
func (s *Store) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	var o *lapse.Order
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		o, err = scanOrder(w.tx.QueryRowContext(ctx, `UPDATE orders
			SET deadline_at = ?1, updated_at = ?2, version = version + 1,
				intent_at = coalesce(?6, intent_at), intent_provider = CASE WHEN ?6 IS NULL THEN intent_provider ELSE ?7 END,
				pay_by = coalesce(?8, pay_by)
			WHERE id = ?3 AND state = ?4 AND version = ?5
			RETURNING `+orderCols,
			column.Micros(p.DeadlineAt), column.Micros(p.At), p.OrderID, string(p.FromState), p.FromVersion, column.NullMicros(p.IntentAt), p.IntentProvider, column.NullMicros(p.PayBy)))
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.ErrStale
		}
		if err != nil {
			return err
		}
		return w.outbox(ctx, p.OrderID, p.Outbox)
	})
	if errors.Is(err, lapse.ErrStale) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: order %d deadline set: %w", p.OrderID, err)
	}
	return o, nil
}

// OrderClaimDue returns up to p.Limit orders of p.Flows whose deadline is at
// or before p.DueBy, earliest first.
//
// SQLite has no row locks. Inside Tx the claim runs in a transaction that
// holds the database's only write lock, which is stronger: no other claimer
// reads or moves these orders until the transaction ends. Outside Tx it is a
// plain read.
func (s *Store) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	args := make([]any, 0, len(p.Flows)+3)
	args = append(args, column.Micros(p.DueBy), column.Micros(p.From), p.FromID)
	for _, f := range p.Flows {
		args = append(args, f)
	}
	args = append(args, p.Limit)
	due, err := queryOrders(ctx, s.db(), claimDueQuery(len(p.Flows)), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: order claim due: %w", err)
	}
	return due, nil
}

// OrderNextDeadline returns the earliest deadline at or after from among
// orders of flows, and false when none has one. It reads only the due index.
func (s *Store) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	args := make([]any, 0, len(flows)+1)
	args = append(args, column.Micros(from))
	for _, f := range flows {
		args = append(args, f)
	}
	var us int64
	err := s.db().QueryRowContext(ctx, nextDeadlineQuery(len(flows)), args...).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("sqlite: order next deadline: %w", err)
	}
	return column.Time(us), true, nil
}

// OrderDeadlineMin returns the earliest deadline among the orders ids that
// have one, and false when none has.
func (s *Store) OrderDeadlineMin(ctx context.Context, ids []int64) (time.Time, bool, error) {
	if len(ids) == 0 {
		return time.Time{}, false, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	var us sql.NullInt64
	err := s.db().QueryRowContext(ctx, `SELECT min(deadline_at) FROM orders WHERE id IN (`+marks(len(ids))+`)`, args...).Scan(&us)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("sqlite: earliest deadline of %d orders: %w", len(ids), err)
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
	err := s.db().QueryRowContext(ctx, `SELECT count(*) FROM orders
		WHERE deadline_at IS NOT NULL AND deadline_at <= ?`, column.Micros(now)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlite: order count due: %w", err)
	}
	return n, nil
}

const orderCountOpenSQL = `SELECT flow, state, count(*), count(deadline_at),
		count(CASE WHEN items IS NOT NULL OR coupon <> '' THEN 1 END) FROM orders
		WHERE closed_at IS NULL GROUP BY flow, state ORDER BY flow, state`

// OrderCountOpen counts the open orders by flow and state.
func (s *Store) OrderCountOpen(ctx context.Context) ([]lapse.OrderStateCount, error) {
	rows, err := s.db().QueryContext(ctx, orderCountOpenSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count open orders: %w", err)
	}
	defer rows.Close()
	var out []lapse.OrderStateCount
	for rows.Next() {
		var c lapse.OrderStateCount
		if err := rows.Scan(&c.Flow, &c.State, &c.N, &c.Timed, &c.Holding); err != nil {
			return nil, fmt.Errorf("sqlite: count open orders: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: count open orders: %w", err)
	}
	return out, nil
}
