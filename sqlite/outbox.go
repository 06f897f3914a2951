package sqlite

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
)

// outbox writes evs as outbox rows of the order orderID. A duplicate event
// id fails the insert, and with it the whole change the events belong to.
func (w *writeTx) outbox(ctx context.Context, orderID int64, evs []lapse.OutboxEvent) error {
	for i := range evs {
		ev := &evs[i]
		_, err := w.exec(ctx, `INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`,
			ev.ID, orderID, ev.OrderNo, ev.Type, string(ev.Payload), micros(ev.CreatedAt))
		if err != nil {
			return fmt.Errorf("outbox event %s: %w", ev.ID, err)
		}
	}
	return nil
}

// OutboxList returns the outbox events of the order with id orderID, oldest
// (lowest seq) first; none when there is no such order.
func (s *Store) OutboxList(ctx context.Context, orderID int64) ([]*lapse.OutboxEvent, error) {
	rows, err := s.db().QueryContext(ctx, `SELECT seq, id, order_id, order_no, type, payload, created_at
		FROM outbox WHERE order_id = ? ORDER BY seq`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: outbox list %d: %w", orderID, err)
	}
	defer rows.Close()
	var out []*lapse.OutboxEvent
	for rows.Next() {
		var ev lapse.OutboxEvent
		var payload []byte
		var at int64
		if err := rows.Scan(&ev.Seq, &ev.ID, &ev.OrderID, &ev.OrderNo, &ev.Type, &payload, &at); err != nil {
			return nil, fmt.Errorf("sqlite: outbox list %d: %w", orderID, err)
		}
		ev.Payload, ev.CreatedAt = payload, fromMicros(at)
		out = append(out, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: outbox list %d: %w", orderID, err)
	}
	return out, nil
}
