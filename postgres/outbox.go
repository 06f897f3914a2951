package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lapsehq/lapse"
)

// outboxArgs holds outbox rows column by column, the shape that unnest and
// COPY take, so that any number of events costs one statement. With them go
// the deliveries the events fan out to, one per subscriber: each names its
// event by id (for a statement, which joins the outbox insert's RETURNING)
// and by index in the event columns (for COPY).
type outboxArgs struct {
	orderIDs  []int64
	ids       [][16]byte
	orderNos  []string
	types     []string
	payloads  pgtype.FlatArray[[]byte] // FlatArray spares pgx a reflective encoder
	createdAt []time.Time

	subEventIDs [][16]byte
	subEvents   []int
	subscribers []string
}

// newOutboxArgs returns outboxArgs with room for n events.
func newOutboxArgs(n int) outboxArgs {
	return outboxArgs{
		orderIDs: make([]int64, 0, n), ids: make([][16]byte, 0, n), orderNos: make([]string, 0, n),
		types: make([]string, 0, n), payloads: make([][]byte, 0, n), createdAt: make([]time.Time, 0, n),
	}
}

// add appends the events of the order with id orderID. The id comes from the
// caller rather than the event, because a new order has none yet. Each
// subscriber named gets a delivery; a name given twice meets deliveries'
// unique key (lapse.ErrEventExists), as an event id that exists meets
// outbox's.
func (a *outboxArgs) add(orderID int64, evs []lapse.OutboxEvent) error {
	for i := range evs {
		ev := &evs[i]
		// Refused here as every store refuses it, rather than by the
		// server's uuid and json columns as an internal error.
		if err := ev.Storable(); err != nil {
			return fmt.Errorf("outbox event %s of order %s: %w", ev.Type, ev.OrderNo, err)
		}
		// Parsed here rather than by the server so that COPY, which takes
		// binary values, can carry it.
		id, err := lapse.ParseEventID(ev.ID)
		if err != nil {
			return fmt.Errorf("outbox event %s of order %s: %w", ev.Type, ev.OrderNo, err)
		}
		a.orderIDs = append(a.orderIDs, orderID)
		a.ids = append(a.ids, id)
		a.orderNos = append(a.orderNos, ev.OrderNo)
		a.types = append(a.types, ev.Type)
		a.payloads = append(a.payloads, ev.Payload)
		a.createdAt = append(a.createdAt, ev.CreatedAt)
		for _, sub := range ev.Subscribers {
			a.subEventIDs = append(a.subEventIDs, id)
			a.subEvents = append(a.subEvents, len(a.ids)-1)
			a.subscribers = append(a.subscribers, sub)
		}
		for _, sub := range ev.Relays {
			a.subEventIDs = append(a.subEventIDs, id)
			a.subEvents = append(a.subEvents, len(a.ids)-1)
			a.subscribers = append(a.subscribers, relayMark+sub)
		}
	}
	return nil
}

// relayMark marks, among the subscriber names of outboxArgs, those the event
// is relayed to (OutboxEvent.Relays): they get a row in outbox_relay
// instead of a delivery. Subscriber names never start with it
// (OutboxEvent.Validate).
const relayMark = ">"

// copyDeliveries writes the deliveries of a's events by COPY; the events
// must be written first, for the deliveries reference them. It is for new
// orders only: it chains each delivery after the one before it in a of the
// same order and subscriber, and knows of none in the table. The ids are
// drawn beforehand so that a chain can name them.
func (a *outboxArgs) copyDeliveries(ctx context.Context, db db) error {
	if err := a.copyRelays(ctx, db); err != nil {
		return err
	}
	var rows []int // the subscriber rows that are deliveries
	for i, sub := range a.subscribers {
		if !strings.HasPrefix(sub, relayMark) {
			rows = append(rows, i)
		}
	}
	n := len(rows)
	if n == 0 {
		return nil
	}
	ids, err := drawDeliveryIDs(ctx, db, n)
	if err != nil {
		return err
	}
	type chain struct {
		order      int64
		subscriber string
	}
	tails := make(map[chain]int64)
	after := make([]*int64, n)
	for i, r := range rows {
		k := chain{a.orderIDs[a.subEvents[r]], a.subscribers[r]}
		if prev, ok := tails[k]; ok {
			after[i] = &prev
		}
		tails[k] = ids[i]
	}
	_, err = db.CopyFrom(ctx, pgx.Identifier{"deliveries"},
		[]string{"id", "event_id", "order_id", "order_no", "event_type", "subscriber", "status", "next_attempt_at", "created_at", "updated_at", "after_id"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			r := rows[i]
			e := a.subEvents[r]
			at := a.createdAt[e]
			return []any{ids[i], a.ids[e], a.orderIDs[e], a.orderNos[e], a.types[e], a.subscribers[r], string(lapse.DeliveryPending), at, at, at, after[i]}, nil
		}))
	return err
}

// copyRelays writes by COPY the outbox_relay rows of a's events relayed to
// a subscriber, in the order of a, after the events themselves.
func (a *outboxArgs) copyRelays(ctx context.Context, db db) error {
	var rows []int
	for i, sub := range a.subscribers {
		if strings.HasPrefix(sub, relayMark) {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	_, err := db.CopyFrom(ctx, pgx.Identifier{"outbox_relay"}, []string{"subscriber", "order_id", "event_id"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			r := rows[i]
			return []any{strings.TrimPrefix(a.subscribers[r], relayMark), a.orderIDs[a.subEvents[r]], a.subEventIDs[r]}, nil
		}))
	return err
}

// drawDeliveryIDs draws n delivery ids, in increasing order, in blocks of
// deliveryBlock (see deliveriesCTE).
func drawDeliveryIDs(ctx context.Context, db db, n int) ([]int64, error) {
	blocks, err := drawIDs(ctx, db, "deliveries", (n+deliveryBlock-1)/deliveryBlock)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = blocks[i/deliveryBlock] + int64(i%deliveryBlock)
	}
	return ids, nil
}

// drawIDs draws n ids from the identity of table, in increasing order, for
// rows that COPY writes (COPY writes identity columns as given, like
// OVERRIDING SYSTEM VALUE).
func drawIDs(ctx context.Context, db db, table string, n int) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT nextval(s.seq) FROM
		(SELECT pg_get_serial_sequence($1, 'id')::regclass AS seq) s, generate_series(1, $2) ORDER BY 1`, table, n)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("drew %d %s ids for %d rows", len(ids), table, n)
	}
	return ids, nil
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

// deliveriesCTE returns the CTEs, ds, dk, dn and then the insert named
// name, that fan a statement's events out: they read the outbox insert x,
// which returns id, order_id, order_no, type and created_at, joined on
// event id to the subscriber columns of outboxArgs, passed as parameters
// $events and $subs. Joining the rows x inserted, not the arguments, means
// that an event not written (its order did not move) has no deliveries
// either.
//
// Each delivery is chained after the one of its order and subscriber
// written just before it (after_id): an earlier one in this statement, or
// else the newest already in the table. For the statement to name its own
// rows it numbers them itself: dk draws a block of deliveryBlock ids per
// nextval (the identity's increment, migration 0022), as many blocks as the
// subscriber rows need, and a delivery's id is its place among those rows
// (n) within them, so that ids grow along every chain and the newest in the
// table is its tail. dk reads every row of ds, so it draws only once x is
// written, that is once every order whose events have deliveries is
// updated and locked: the writes that change an order are serialized by
// its row lock, and the later one draws the greater ids. The writers that
// do not take it (a finish that reports a dead delivery, a payment's record
// or status change) may race a transition and leave two deliveries after
// one predecessor; the two are unordered, as their writes were, and nothing
// waits forever, for after_id always names an older row.
func deliveriesCTE(name string, events, subs int) string {
	return deliveriesFrom(name, fmt.Sprintf("unnest($%d::uuid[], $%d::text[]) WITH ORDINALITY AS s(event_id, subscriber, n)", events, subs))
}

// oneOrderDeliveriesCTE is deliveriesCTE for a statement about one order,
// its unnest bounded (see bounded).
func oneOrderDeliveriesCTE(name string, events, subs int) string {
	return deliveriesFrom(name, bounded(fmt.Sprintf("unnest($%d::uuid[], $%d::text[]) WITH ORDINALITY AS s(event_id, subscriber, n)",
		events, subs), "s", fmt.Sprintf("$%d::uuid[]", events)))
}

// oneOrderEvents is the FROM item e(id, order_no, type, payload, created_at,
// n) of the event columns of outboxArgs, passed as parameters from $first
// on, in a statement about one order: bounded (see bounded).
func oneOrderEvents(first int) string {
	return bounded(fmt.Sprintf(`unnest($%d::uuid[], $%d::text[], $%d::text[], $%d::json[], $%d::timestamptz[])
		WITH ORDINALITY AS e(id, order_no, type, payload, created_at, n)`, first, first+1, first+2, first+3, first+4),
		"e", fmt.Sprintf("$%d::uuid[]", first))
}

// bounded returns the FROM item unnest, named alias, with at most as many
// rows as the array first has, which is all of them: the arrays of one
// unnest have one length.
//
// Why: a statement about one order (its creation, a transition, a payment)
// passes its few events and deliveries as arrays, and PostgreSQL estimates
// unnest over a parameter at 100 rows. The generic plan of such a statement
// then looks five times dearer than a custom plan made for its one event,
// so the plan cache (plan_cache_mode auto) plans every execution anew,
// which was about 40 % of the server's CPU time of a payment callback. With
// the LIMIT the generic plan's estimate is small and PostgreSQL keeps it,
// planned once per connection; a custom plan's LIMIT is the true count. The
// statements of batches (OrderTransitionMany, the claims) are left
// unbounded: their custom plans are made for the batch's true size.
func bounded(unnest, alias, first string) string {
	return "(SELECT * FROM " + unnest + " LIMIT cardinality(" + first + ")) " + alias
}

// deliveryBlock is how many delivery ids one nextval draws: the increment
// of the identity of deliveries (migration 0022).
const deliveryBlock = 1024

// deliveriesFrom is deliveriesCTE with the subscriber rows from src, a FROM
// item s(event_id, subscriber, n). The rows go in in the order the chain's
// window sorts them: their ids are drawn already, and nothing reads the
// order in which they were inserted.
func deliveriesFrom(name, src string) string {
	return numberedDeliveries(`SELECT x.id AS event_id, x.order_id, x.order_no, x.type, x.created_at, s.subscriber, s.n
	FROM `+src+`
	JOIN x ON x.id = s.event_id`) + fmt.Sprintf(`, %[1]s AS (
	INSERT INTO deliveries (id, event_id, order_id, order_no, event_type, subscriber, status,
		next_attempt_at, created_at, updated_at, after_id)
	OVERRIDING SYSTEM VALUE
	SELECT dn.id, dn.event_id, dn.order_id, dn.order_no, dn.type, dn.subscriber, 'pending',
		dn.created_at, dn.created_at, dn.created_at,
		coalesce(lag(dn.id) OVER (PARTITION BY dn.order_id, dn.subscriber ORDER BY dn.n),
			(SELECT max(p.id) FROM deliveries p WHERE p.order_id = dn.order_id AND p.subscriber = dn.subscriber))
	FROM dn WHERE left(dn.subscriber, 1) <> '%[2]s'
), %[1]s_relay AS (
	INSERT INTO outbox_relay (subscriber, order_id, event_id)
	SELECT substr(ds.subscriber, 2), ds.order_id, ds.event_id FROM ds WHERE left(ds.subscriber, 1) = '%[2]s' ORDER BY ds.n
)`, name, relayMark)
}

// numberedDeliveries returns the CTEs ds, the rows of deliveries to write
// (the query rows, with an event_id, order_id and an ordinal n from 1),
// dk and dn, ds with an id for each: dk draws a block of deliveryBlock ids
// per nextval, and a row's id is its place n within them.
func numberedDeliveries(rows string) string {
	return fmt.Sprintf(`ds AS MATERIALIZED (
	%[1]s
), dk AS (
	SELECT array_agg(nextval(pg_get_serial_sequence('deliveries', 'id')) ORDER BY g) AS ids
	FROM generate_series(1, (SELECT (max(ds.n) + %[2]d - 1) / %[2]d FROM ds)) g
), dn AS (
	SELECT dk.ids[((ds.n - 1) / %[2]d + 1)::int] + (ds.n - 1) %% %[2]d AS id, ds.*
	FROM ds, dk
)`, rows, deliveryBlock)
}
