package sqlite

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// outbox writes evs as outbox rows of the order orderID, and fans each out
// to its Subscribers: one pending delivery per name, due at the event's
// CreatedAt, chained after the order's last delivery to that name. An event
// id that exists, or a name given twice (which the engine never sends:
// lapse.ValidateOutbox), meets a unique key: lapse.ErrEventExists, which
// fails the whole change the events belong to.
func (w *writeTx) outbox(ctx context.Context, orderID int64, evs []lapse.OutboxEvent) error {
	for i := range evs {
		ev := &evs[i]
		at := column.Micros(ev.CreatedAt)
		_, err := w.exec(ctx, `INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`,
			ev.ID, orderID, ev.OrderNo, ev.Type, string(ev.Payload), at)
		if isUnique(err) {
			return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrEventExists, "outbox event %s exists", ev.ID), err)
		}
		if err != nil {
			return fmt.Errorf("outbox event %s: %w", ev.ID, err)
		}
		// One statement a row: a statement that writes several rows keeps a
		// statement journal, which costs far more than the rows.
		for _, sub := range ev.Subscribers {
			_, err := w.exec(ctx, `INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber,
				status, next_attempt_at, created_at, updated_at, after_id)
				VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?6, ?6,
					(SELECT max(id) FROM deliveries WHERE order_id = ?2 AND subscriber = ?5))`,
				ev.ID, orderID, ev.OrderNo, ev.Type, sub, at)
			if isUnique(err) {
				return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrEventExists, "outbox event %s names subscriber %s twice", ev.ID, sub), err)
			}
			if err != nil {
				return fmt.Errorf("outbox event %s: delivery to %s: %w", ev.ID, sub, err)
			}
		}
	}
	return nil
}

// outboxCols are the columns scanEvent reads, in its order.
const outboxCols = `seq, id, order_id, order_no, type, payload, created_at`

// scanEvent reads a row of outboxCols.
func scanEvent(r scanner) (*lapse.OutboxEvent, error) {
	var ev lapse.OutboxEvent
	var payload []byte
	var at int64
	if err := r.Scan(&ev.Seq, &ev.ID, &ev.OrderID, &ev.OrderNo, &ev.Type, &payload, &at); err != nil {
		return nil, err
	}
	ev.Payload, ev.CreatedAt = payload, column.Time(at)
	return &ev, nil
}

// OutboxList returns the outbox events of the order with id orderID, oldest
// (lowest seq) first; none when there is no such order.
func (s *Store) OutboxList(ctx context.Context, orderID int64) ([]*lapse.OutboxEvent, error) {
	evs, err := queryAll(ctx, s.db(), scanEvent, `SELECT `+outboxCols+` FROM outbox WHERE order_id = ? ORDER BY seq`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: outbox list %d: %w", orderID, err)
	}
	return evs, nil
}
