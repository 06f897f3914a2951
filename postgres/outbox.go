package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lapsehq/lapse"
)

// outboxArgs holds outbox rows column by column, the shape that unnest and
// COPY take, so that any number of events costs one statement.
type outboxArgs struct {
	orderIDs  []int64
	ids       [][16]byte
	orderNos  []string
	types     []string
	payloads  pgtype.FlatArray[[]byte] // FlatArray spares pgx a reflective encoder
	createdAt []time.Time
}

// newOutboxArgs returns outboxArgs with room for n events.
func newOutboxArgs(n int) outboxArgs {
	return outboxArgs{
		orderIDs: make([]int64, 0, n), ids: make([][16]byte, 0, n), orderNos: make([]string, 0, n),
		types: make([]string, 0, n), payloads: make([][]byte, 0, n), createdAt: make([]time.Time, 0, n),
	}
}

// add appends the events of the order with id orderID. The id comes from the
// caller rather than the event, because a new order has none yet.
func (a *outboxArgs) add(orderID int64, evs []lapse.OutboxEvent) error {
	for i := range evs {
		ev := &evs[i]
		id, err := parseUUID(ev.ID)
		if err != nil {
			return fmt.Errorf("outbox event %s of order %s: %w", ev.Type, ev.OrderNo, err)
		}
		a.orderIDs = append(a.orderIDs, orderID)
		a.ids = append(a.ids, id)
		a.orderNos = append(a.orderNos, ev.OrderNo)
		a.types = append(a.types, ev.Type)
		a.payloads = append(a.payloads, ev.Payload)
		a.createdAt = append(a.createdAt, ev.CreatedAt)
	}
	return nil
}

// parseUUID reads a UUID in its canonical 8-4-4-4-12 hex form. It is parsed
// here rather than by the server so that COPY, which takes binary values,
// can carry it.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, lapse.Errorf(lapse.EINVALID, "event id %q is not a UUID", s)
	}
	src := []byte(s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:])
	if _, err := hex.Decode(u[:], src); err != nil {
		return u, lapse.Errorf(lapse.EINVALID, "event id %q is not a UUID", s)
	}
	return u, nil
}

// OutboxList returns the outbox events of an order, oldest first.
func (s *Store) OutboxList(ctx context.Context, orderID int64) ([]*lapse.OutboxEvent, error) {
	rows, err := s.db.Query(ctx, `SELECT seq, id, order_id, order_no, type, payload, created_at
		FROM outbox WHERE order_id = $1 ORDER BY seq`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list outbox of order %d: %w", orderID, err)
	}
	defer rows.Close()
	var out []*lapse.OutboxEvent
	for rows.Next() {
		var ev lapse.OutboxEvent
		var payload []byte
		if err := rows.Scan(&ev.Seq, &ev.ID, &ev.OrderID, &ev.OrderNo, &ev.Type, &payload, &ev.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: list outbox of order %d: %w", orderID, err)
		}
		ev.Payload = payload
		ev.CreatedAt = ev.CreatedAt.UTC()
		out = append(out, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list outbox of order %d: %w", orderID, err)
	}
	return out, nil
}
