package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// transitionUpdate is the guarded update of a transition; the arguments are
// transitionArgs.
const transitionUpdate = `UPDATE orders SET state = ?, version = version + 1, deadline_at = ?, updated_at = ?,
	closed_at = ?, close_reason = ?, fired_by = ?, closed_deadline_at = ?
	WHERE id = ? AND state = ? AND version = ?`

func transitionArgs(p *lapse.OrderTransitionParams) []any {
	return []any{string(p.ToState), column.NullMicros(p.DeadlineAt), column.Micros(p.At), column.NullMicros(p.ClosedAt), p.CloseReason,
		string(p.FiredBy), column.NullMicros(p.ClosedDeadlineAt), p.OrderID, string(p.FromState), p.FromVersion}
}

// OrderTransition applies p: it moves the order from p.FromState at
// p.FromVersion to p.ToState at the next version, and writes one log row and
// p.Outbox, all in one transaction. It returns the order as stored after the
// change, or lapse.ErrStale, writing nothing, when the order is not (or no
// longer) in p.FromState at p.FromVersion.
func (s *Store) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	var o *lapse.Order
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		o, err = scanOrder(w.tx.QueryRowContext(ctx, transitionUpdate+` RETURNING `+orderCols, transitionArgs(p)...))
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.ErrStale
		}
		if err != nil {
			return err
		}
		return w.transitioned(ctx, p)
	})
	if errors.Is(err, lapse.ErrStale) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: order %d transition %s: %w", p.OrderID, p.Event, err)
	}
	return o, nil
}

// OrderTransitionMany applies ps in one transaction and returns the ids of
// the orders that moved, in the order of ps. A stale transition is skipped
// and writes nothing. Any other failure writes nothing at all.
func (s *Store) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	var moved []int64
	err := s.write(ctx, func(w *writeTx) error {
		moved = make([]int64, 0, len(ps))
		for _, p := range ps {
			res, err := w.exec(ctx, transitionUpdate, transitionArgs(p)...)
			if err != nil {
				return fmt.Errorf("order %d: %w", p.OrderID, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				continue
			}
			if err := w.transitioned(ctx, p); err != nil {
				return fmt.Errorf("order %d: %w", p.OrderID, err)
			}
			moved = append(moved, p.OrderID)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: order transition many: %w", err)
	}
	return moved, nil
}

// transitioned writes the log row and outbox rows of the applied p.
func (w *writeTx) transitioned(ctx context.Context, p *lapse.OrderTransitionParams) error {
	rec := lapse.TransitionRecord{FromState: p.FromState, ToState: p.ToState, Event: p.Event,
		Version: p.FromVersion + 1, FiredBy: p.FiredBy, Actor: p.Actor, Reason: p.Reason, CreatedAt: p.At}
	if err := w.logTransition(ctx, p.OrderID, &rec); err != nil {
		return err
	}
	return w.outbox(ctx, p.OrderID, p.Outbox)
}

func (w *writeTx) logTransition(ctx context.Context, orderID int64, r *lapse.TransitionRecord) error {
	_, err := w.exec(ctx, `INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by,
		actor, reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		orderID, string(r.FromState), string(r.ToState), string(r.Event), r.Version, string(r.FiredBy),
		r.Actor, r.Reason, column.Micros(r.CreatedAt))
	if err != nil {
		return fmt.Errorf("transition log: %w", err)
	}
	return nil
}

// TransitionList returns the transition log of the order with id orderID,
// oldest first; none when there is no such order.
func (s *Store) TransitionList(ctx context.Context, orderID int64) ([]*lapse.TransitionRecord, error) {
	rows, err := s.db().QueryContext(ctx, `SELECT id, order_id, from_state, to_state, event, version, fired_by,
		actor, reason, created_at FROM transitions WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: transition list %d: %w", orderID, err)
	}
	defer rows.Close()
	var out []*lapse.TransitionRecord
	for rows.Next() {
		var r lapse.TransitionRecord
		var at int64
		if err := rows.Scan(&r.ID, &r.OrderID, (*string)(&r.FromState), (*string)(&r.ToState), (*string)(&r.Event),
			&r.Version, (*string)(&r.FiredBy), &r.Actor, &r.Reason, &at); err != nil {
			return nil, fmt.Errorf("sqlite: transition list %d: %w", orderID, err)
		}
		r.CreatedAt = column.Time(at)
		out = append(out, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: transition list %d: %w", orderID, err)
	}
	return out, nil
}
