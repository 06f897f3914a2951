package mysql

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// event is an outbox row to write: an event and the order it belongs to,
// which the caller names because a new order's events do not know its id.
type event struct {
	orderID int64
	*lapse.OutboxEvent
}

// appendEvents appends evs, events of the order orderID, to to.
func appendEvents(to []event, orderID int64, evs []lapse.OutboxEvent) []event {
	for i := range evs {
		to = append(to, event{orderID, &evs[i]})
	}
	return to
}

// outbox writes evs as outbox rows and fans each out to its Subscribers:
// one pending delivery per name, due at the event's CreatedAt. Deliveries
// get ids in the order written, which is the order of evs and, within an
// event, of its Subscribers; DeliveryClaim hands a subscriber an order's
// deliveries in id order. An event id that exists, or a name given twice
// for one event (which the engine never sends: lapse.ValidateOutbox), meets
// a unique key: lapse.ErrEventExists, which fails the whole change the
// events belong to.
func (w *Store) outbox(ctx context.Context, evs []event) error {
	if len(evs) == 0 {
		return nil
	}
	for _, e := range evs {
		if err := lapse.NotRelayed(e.OutboxEvent); err != nil {
			return err
		}
		if err := e.Storable(); err != nil {
			return err
		}
	}
	rows := w.inserts(`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at) VALUES `, values(6))
	for _, e := range evs {
		if err := rows.add(ctx, e.ID, e.orderID, e.OrderNo, e.Type, string(e.Payload), column.Micros(e.CreatedAt)); err != nil {
			return eventExists(err)
		}
	}
	if err := rows.flush(ctx); err != nil {
		return eventExists(err)
	}
	ds := w.inserts(`INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status,
		next_attempt_at, created_at, updated_at) VALUES `, "(?, ?, ?, ?, ?, 'pending', ?, ?, ?)")
	for _, e := range evs {
		at := column.Micros(e.CreatedAt)
		for _, sub := range e.Subscribers {
			if err := ds.add(ctx, e.ID, e.orderID, e.OrderNo, e.Type, sub, at, at, at); err != nil {
				return eventExists(err)
			}
		}
	}
	if err := ds.flush(ctx); err != nil {
		return eventExists(err)
	}
	return nil
}

// outboxKeys are the unique keys that refuse an outbox event whose id
// exists or that names a subscriber twice.
var outboxKeys = []string{"outbox_id_key", "deliveries_event_subscriber_key"}

// eventExists returns err, the failure of an insert of outbox or delivery
// rows, wrapped with lapse.ErrEventExists when one of outboxKeys refused a
// row, and prefixed with the table otherwise.
func eventExists(err error) error {
	for _, key := range outboxKeys {
		if isDuplicateKey(err, key) {
			return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrEventExists, "outbox: %s", errorMessage(err)), err)
		}
	}
	return fmt.Errorf("outbox: %w", err)
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
	evs, err := queryAll(ctx, s, scanEvent, `SELECT `+outboxCols+` FROM outbox WHERE order_id = ? ORDER BY seq`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list outbox of order %d: %w", orderID, err)
	}
	return evs, nil
}
