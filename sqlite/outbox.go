package sqlite

import (
	"context"
	"fmt"
	"slices"

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
	return w.outboxMany(ctx, []orderEvents{{orderID, evs}})
}

// orderEvents are outbox events of the order orderID, in the order they
// occurred.
type orderEvents struct {
	orderID int64
	evs     []lapse.OutboxEvent
}

// outboxDelivery is the delivery of event ev of the order orderID to sub.
type outboxDelivery struct {
	orderID int64
	ev      *lapse.OutboxEvent
	sub     string
}

const (
	outboxInsert = `INSERT INTO outbox (id, order_id, order_no, type, payload, created_at) VALUES `
	// outboxRow casts the payload, bound as bytes (payloadArg), to TEXT.
	outboxRow = `(?, ?, ?, ?, CAST(? AS TEXT), ?)`
	// A delivery chains after the order's last delivery to its subscriber:
	// one correlated subquery for the statement, not one a row, since each
	// holds a cursor open on deliveries that every row written must save.
	deliveryInsert = `WITH d (event_id, order_id, order_no, event_type, subscriber, at) AS (VALUES %s)
		INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber,
			status, next_attempt_at, created_at, updated_at, after_id)
		SELECT event_id, order_id, order_no, event_type, subscriber, 'pending', at, at, at,
			(SELECT max(e.id) FROM deliveries e WHERE e.order_id = d.order_id AND e.subscriber = d.subscriber)
		FROM d`
)

// outboxMany is outbox for the events of many orders, batchRows rows a
// statement: every event in the order of batch, then their deliveries. A
// delivery's after_id is read by its own row's subquery, and a statement
// of deliveries holds at most one event of an order: the deliveries of an
// order's second event are written by a later statement than its first's,
// and chain after them whether or not SQLite reads the table for all the
// rows before it writes any.
func (w *writeTx) outboxMany(ctx context.Context, batch []orderEvents) error {
	type event struct {
		orderID int64
		ev      *lapse.OutboxEvent
	}
	var events []event
	var layers [][]outboxDelivery // layers[k]: the deliveries of the orders' k-th events
	for _, o := range batch {
		for k := range o.evs {
			ev := &o.evs[k]
			if err := lapse.NotRelayed(ev); err != nil {
				return err
			}
			if err := ev.Storable(); err != nil {
				return err
			}
			events = append(events, event{o.orderID, ev})
			if len(ev.Subscribers) == 0 {
				continue
			}
			for len(layers) <= k { // an earlier event of the order may have had no subscriber
				layers = append(layers, nil)
			}
			for _, sub := range ev.Subscribers {
				layers[k] = append(layers[k], outboxDelivery{o.orderID, ev, sub})
			}
		}
	}
	args := make([]any, 0, min(len(events), batchRows)*10)
	for chunk := range slices.Chunk(events, batchRows) {
		args = args[:0]
		for _, e := range chunk {
			args = append(args, e.ev.ID, e.orderID, e.ev.OrderNo, e.ev.Type, payloadArg(e.ev.Payload), column.Micros(e.ev.CreatedAt))
		}
		_, err := w.exec(ctx, outboxInsert+rowList(len(chunk), outboxRow), args...)
		if isUnique(err) {
			// Which event: one row a statement, the one that fails names it.
			for _, e := range chunk {
				if _, err := w.exec(ctx, outboxInsert+outboxRow, e.ev.ID, e.orderID, e.ev.OrderNo, e.ev.Type,
					payloadArg(e.ev.Payload), column.Micros(e.ev.CreatedAt)); isUnique(err) {
					return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrEventExists, "outbox event %s exists", e.ev.ID), err)
				} else if err != nil {
					return fmt.Errorf("outbox event %s: %w", e.ev.ID, err)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
	}
	for _, ds := range layers {
		for chunk := range slices.Chunk(ds, batchRows) {
			if err := w.deliveries(ctx, chunk); err != nil {
				return err
			}
		}
	}
	return nil
}

// payloadArg is an event's payload as outboxRow binds it: its bytes, not a
// string copy of them (the driver copies what it binds anyway); no payload
// is the empty text, as a string would be.
func payloadArg(p []byte) any {
	if p == nil {
		return ""
	}
	return p
}

// deliveries writes ds, pending, in one statement.
func (w *writeTx) deliveries(ctx context.Context, ds []outboxDelivery) error {
	args := make([]any, 0, len(ds)*6)
	for _, d := range ds {
		args = append(args, d.ev.ID, d.orderID, d.ev.OrderNo, d.ev.Type, d.sub, column.Micros(d.ev.CreatedAt))
	}
	_, err := w.exec(ctx, fmt.Sprintf(deliveryInsert, values(len(ds), 6)), args...)
	switch {
	case isUnique(err) && len(ds) == 1:
		d := ds[0]
		return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrEventExists, "outbox event %s names subscriber %s twice", d.ev.ID, d.sub), err)
	case isUnique(err):
		// Which delivery: one row a statement, the one that fails names it.
		for _, d := range ds {
			if err := w.deliveries(ctx, []outboxDelivery{d}); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return fmt.Errorf("outbox: deliveries: %w", err)
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
