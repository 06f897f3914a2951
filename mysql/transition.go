package mysql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// transitionInsert writes transition log rows of 9 columns.
const transitionInsert = `INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor,
	reason, created_at) VALUES `

// transitionUpdate is the guarded compare-and-swap of one transition.
const transitionUpdate = `UPDATE orders SET state = ?, version = version + 1, deadline_at = ?, updated_at = ?,
	closed_at = ?, close_reason = ?, fired_by = ?, closed_deadline_at = ?
	WHERE id = ? AND state = ? AND version = ?`

// OrderTransition applies p in one transaction: the update guarded by id,
// state and version, its log row, its outbox rows and their deliveries. It
// returns the order as updated, or lapse.ErrStale and writes nothing when
// the guard matched no row.
func (s *Store) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	o, err := write(ctx, s, func(w *Store) (*lapse.Order, error) {
		res, err := w.exec(ctx, transitionUpdate, string(p.ToState), column.NullMicros(p.DeadlineAt), column.Micros(p.At),
			column.NullMicros(p.ClosedAt), p.CloseReason, string(p.FiredBy), column.NullMicros(p.ClosedDeadlineAt),
			p.OrderID, string(p.FromState), p.FromVersion)
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, lapse.ErrStale
		}
		if err := w.transitioned(ctx, []*lapse.OrderTransitionParams{p}); err != nil {
			return nil, err
		}
		return w.orderByID(ctx, p.OrderID)
	})
	if errors.Is(err, lapse.ErrStale) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: transition order %d %s --%s--> %s: %w", p.OrderID, p.FromState, p.Event, p.ToState, err)
	}
	return o, nil
}

// OrderTransitionMany applies ps in one transaction (a savepoint of the
// caller's, inside Tx) and returns the ids of the orders that moved; a stale
// transition is skipped and writes nothing. No order has two transitions in
// ps (lapse.ValidateOrderTransitions). Each batch of orders is locked (in id
// order, so that concurrent batches queue rather than deadlock) and read,
// and one UPDATE moves those whose state and version are the ones planned,
// guarded by them again. Their log rows, outbox rows and deliveries follow
// in multi-row INSERTs.
func (s *Store) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	moved, err := write(ctx, s, func(w *Store) ([]int64, error) {
		var moved []int64
		for chunk := range slices.Chunk(ps, batchRows) {
			m, err := w.transitionMany(ctx, chunk)
			if err != nil {
				return nil, err
			}
			moved = append(moved, m...)
		}
		return moved, nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: transition %d orders: %w", len(ps), err)
	}
	return moved, nil
}

func (w *Store) transitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.OrderID
	}
	slices.Sort(ids)
	type at struct {
		id      int64
		state   lapse.State
		version int64
	}
	rows, err := queryAll(ctx, w, func(r scanner) (at, error) {
		var a at
		err := r.Scan(&a.id, (*string)(&a.state), &a.version)
		return a, err
	}, `SELECT id, state, version FROM orders WHERE id IN (`+marks(len(ids))+`) ORDER BY id FOR UPDATE`, int64Args(ids)...)
	if err != nil {
		return nil, err
	}
	now := make(map[int64]at, len(rows))
	for _, r := range rows {
		now[r.id] = r
	}
	var apply []*lapse.OrderTransitionParams
	for _, p := range ps {
		if cur, ok := now[p.OrderID]; ok && cur.state == p.FromState && cur.version == p.FromVersion {
			apply = append(apply, p)
		}
	}
	if len(apply) == 0 {
		return nil, nil
	}
	if err := w.transitionUpdate(ctx, apply); err != nil {
		return nil, err
	}
	if err := w.transitioned(ctx, apply); err != nil {
		return nil, err
	}
	moved := make([]int64, len(apply))
	for i, p := range apply {
		moved[i] = p.OrderID
	}
	return moved, nil
}

// transitionUpdate moves the orders of ps, one transition each, in one
// UPDATE joined to the transitions as a derived table and guarded by their
// planned state and version.
func (w *Store) transitionUpdate(ctx context.Context, ps []*lapse.OrderTransitionParams) error {
	var q strings.Builder
	args := make([]any, 0, 10*len(ps))
	q.WriteString(`UPDATE orders o JOIN (`)
	for i, p := range ps {
		if i == 0 {
			q.WriteString(`SELECT ? AS id, ? AS from_state, ? AS from_version, ? AS to_state, ? AS deadline_at,
				? AS closed_at, ? AS close_reason, ? AS fired_by, ? AS at, ? AS closed_deadline_at`)
		} else {
			q.WriteString(` UNION ALL SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?`)
		}
		args = append(args, p.OrderID, string(p.FromState), p.FromVersion, string(p.ToState), column.NullMicros(p.DeadlineAt),
			column.NullMicros(p.ClosedAt), p.CloseReason, string(p.FiredBy), column.Micros(p.At), column.NullMicros(p.ClosedDeadlineAt))
	}
	q.WriteString(`) p ON o.id = p.id AND o.state = p.from_state AND o.version = p.from_version
		SET o.state = p.to_state, o.version = o.version + 1, o.deadline_at = p.deadline_at, o.updated_at = p.at,
			o.closed_at = p.closed_at, o.close_reason = p.close_reason, o.fired_by = p.fired_by,
			o.closed_deadline_at = p.closed_deadline_at`)
	res, err := w.exec(ctx, q.String(), args...)
	if err != nil {
		return err
	}
	if n := affected(res); n != int64(len(ps)) {
		// The rows are locked: nothing else can have moved them.
		return fmt.Errorf("%d of %d locked orders matched their transition", n, len(ps))
	}
	return nil
}

// transitioned writes the log rows and outbox rows of the applied ps.
func (w *Store) transitioned(ctx context.Context, ps []*lapse.OrderTransitionParams) error {
	log := w.inserts(transitionInsert, values(9))
	var evs []event
	for _, p := range ps {
		if err := log.add(ctx, p.OrderID, string(p.FromState), string(p.ToState), string(p.Event), p.FromVersion+1,
			string(p.FiredBy), p.Actor, p.Reason, column.Micros(p.At)); err != nil {
			return err
		}
		evs = appendEvents(evs, p.OrderID, p.Outbox)
	}
	if err := log.flush(ctx); err != nil {
		return err
	}
	return w.outbox(ctx, evs)
}

// TransitionList returns the transition log of the order with id orderID,
// oldest first; none when there is no such order.
func (s *Store) TransitionList(ctx context.Context, orderID int64) ([]*lapse.TransitionRecord, error) {
	out, err := queryAll(ctx, s, func(r scanner) (*lapse.TransitionRecord, error) {
		var tr lapse.TransitionRecord
		var at int64
		if err := r.Scan(&tr.ID, &tr.OrderID, (*string)(&tr.FromState), (*string)(&tr.ToState), (*string)(&tr.Event),
			&tr.Version, (*string)(&tr.FiredBy), &tr.Actor, &tr.Reason, &at); err != nil {
			return nil, err
		}
		tr.CreatedAt = column.Time(at)
		return &tr, nil
	}, `SELECT id, order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at
		FROM transitions WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list transitions of order %d: %w", orderID, err)
	}
	return out, nil
}
