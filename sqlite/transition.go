package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// transitionUpdate is the guarded update of a transition; the arguments are
// transitionArgs.
const transitionUpdate = `UPDATE orders SET state = ?, version = version + 1, deadline_at = ?, updated_at = ?,
	closed_at = ?, close_reason = ?, fired_by = ?, closed_deadline_at = ?
	WHERE id = ? AND state = ? AND version = ?`

func transitionArgs(p *lapse.OrderTransitionParams) []any {
	return appendTransitionArgs(make([]any, 0, 10), p)
}

// appendTransitionArgs appends transitionArgs(p) to args.
func appendTransitionArgs(args []any, p *lapse.OrderTransitionParams) []any {
	return append(args, string(p.ToState), column.NullMicros(p.DeadlineAt), column.Micros(p.At), column.NullMicros(p.ClosedAt),
		p.CloseReason, string(p.FiredBy), column.NullMicros(p.ClosedDeadlineAt), p.OrderID, string(p.FromState), p.FromVersion)
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

// transitionManyUpdate is the guarded update of n transitions in one
// statement, returning the ids of the orders that moved; the arguments are
// transitionArgs of each, in turn. ps holds no order twice
// (lapse.ValidateOrderTransitions), so each order meets one row of p.
func transitionManyUpdate(n int) string {
	return `WITH p (state, deadline_at, updated_at, closed_at, close_reason, fired_by, closed_deadline_at,
			id, from_state, from_version) AS (VALUES ` + values(n, 10) + `)
		UPDATE orders SET state = p.state, version = orders.version + 1, deadline_at = p.deadline_at,
			updated_at = p.updated_at, closed_at = p.closed_at, close_reason = p.close_reason, fired_by = p.fired_by,
			closed_deadline_at = p.closed_deadline_at
		FROM p WHERE orders.id = p.id AND orders.state = p.from_state AND orders.version = p.from_version
		RETURNING orders.id`
}

// OrderTransitionMany applies ps in one transaction and returns the ids of
// the orders that moved, in the order of ps. A stale transition is skipped
// and writes nothing. Any other failure writes nothing at all; an order
// given twice is an EINVALID error.
//
// It writes batchRows rows a statement: the guarded updates first, then
// the log rows, outbox rows and deliveries of the orders that moved.
func (s *Store) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	var moved []int64
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		moved, err = w.transitionMany(ctx, ps)
		return err
	})
	if err != nil {
		return nil, fail(err, "order transition many")
	}
	return moved, nil
}

func (w *writeTx) transitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	moved := make(map[int64]bool, len(ps)) // false: given, true: moved
	for _, p := range ps {
		if _, twice := moved[p.OrderID]; twice {
			return nil, lapse.FieldError("order_id", "order %d has two transitions in one batch", p.OrderID)
		}
		moved[p.OrderID] = false
	}
	args := make([]any, 0, min(len(ps), batchRows)*10)
	for chunk := range slices.Chunk(ps, batchRows) {
		args = args[:0]
		for _, p := range chunk {
			args = appendTransitionArgs(args, p)
		}
		rows, err := w.query(ctx, transitionManyUpdate(len(chunk)), args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			moved[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	applied := make([]*lapse.OrderTransitionParams, 0, len(ps))
	ids := make([]int64, 0, len(ps))
	for _, p := range ps {
		if moved[p.OrderID] {
			applied, ids = append(applied, p), append(ids, p.OrderID)
		}
	}
	recs := make([]orderRecord, len(applied))
	evs := make([]orderEvents, len(applied))
	for i, p := range applied {
		recs[i] = orderRecord{p.OrderID, transitionRecord(p)}
		evs[i] = orderEvents{p.OrderID, p.Outbox}
	}
	if err := w.logTransitions(ctx, recs); err != nil {
		return nil, err
	}
	if err := w.outboxMany(ctx, evs); err != nil {
		return nil, err
	}
	return ids, nil
}

func transitionRecord(p *lapse.OrderTransitionParams) lapse.TransitionRecord {
	return lapse.TransitionRecord{FromState: p.FromState, ToState: p.ToState, Event: p.Event,
		Version: p.FromVersion + 1, FiredBy: p.FiredBy, Actor: p.Actor, Reason: p.Reason, CreatedAt: p.At}
}

// transitioned writes the log row and outbox rows of the applied p.
func (w *writeTx) transitioned(ctx context.Context, p *lapse.OrderTransitionParams) error {
	rec := transitionRecord(p)
	if err := w.logTransition(ctx, p.OrderID, &rec); err != nil {
		return err
	}
	return w.outbox(ctx, p.OrderID, p.Outbox)
}

func (w *writeTx) logTransition(ctx context.Context, orderID int64, r *lapse.TransitionRecord) error {
	return w.logTransitions(ctx, []orderRecord{{orderID, *r}})
}

// orderRecord is a log row of the order orderID.
type orderRecord struct {
	orderID int64
	rec     lapse.TransitionRecord
}

// logTransitions writes the log rows rs, batchRows a statement.
func (w *writeTx) logTransitions(ctx context.Context, rs []orderRecord) error {
	args := make([]any, 0, min(len(rs), batchRows)*9)
	for chunk := range slices.Chunk(rs, batchRows) {
		args = args[:0]
		for _, r := range chunk {
			args = append(args, r.orderID, string(r.rec.FromState), string(r.rec.ToState), string(r.rec.Event), r.rec.Version,
				string(r.rec.FiredBy), r.rec.Actor, r.rec.Reason, column.Micros(r.rec.CreatedAt))
		}
		_, err := w.exec(ctx, `INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by,
			actor, reason, created_at) VALUES `+values(len(chunk), 9), args...)
		if err != nil {
			return fmt.Errorf("transition log: %w", err)
		}
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
