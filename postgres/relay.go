package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// The relay (lapse.Relayer) reads outbox_relay (migration 0027) by the
// transactions that wrote it. A cursor's position is four fields: lo and
// hi, two snapshots (pg_current_snapshot), and after, the (xid, seq) of
// the last row read. The rows of transactions visible in lo are behind the
// cursor; it is reading those visible in hi and not in lo, in (xid, seq)
// order, and has read them up to after. A transaction not visible in a
// snapshot was still running when it was taken, or began after it: its xid
// is one of the snapshot's xip, or at least its xmax. So the rows after lo
// are found by two index scans, whatever the age of the oldest running
// transaction: the xids of lo's xip, and the range from lo's xmax up to
// hi's. Once a range is read to its end the next one runs from hi to a
// snapshot taken then; a transaction that commits later, with an xid
// smaller than others already read, is in that snapshot's xip and is read
// in a later range.

// relayStart is the position of a new cursor: a snapshot that sees no
// transaction, so that the relay starts at its subscriber's first row.
const relayStart = "1:1:|1:1:|0|0"

// relayPos is a cursor's position, parsed.
type relayPos struct {
	lo, hi   string // pg_snapshot, as text
	afterXid string // xid8, as text
	afterSeq int64
}

func parseRelayPos(s string) (relayPos, error) {
	f := strings.Split(s, "|")
	if len(f) != 4 {
		return relayPos{}, fmt.Errorf("relay position %q: want lo|hi|xid|seq", s)
	}
	seq, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		return relayPos{}, fmt.Errorf("relay position %q: %w", s, err)
	}
	return relayPos{lo: f[0], hi: f[1], afterXid: f[2], afterSeq: seq}, nil
}

func (p relayPos) String() string {
	return p.lo + "|" + p.hi + "|" + p.afterXid + "|" + strconv.FormatInt(p.afterSeq, 10)
}

const relayCursorColumns = `subscriber, lo::text || '|' || hi::text || '|' || after_xid::text || '|' || after_seq::text, relayed, updated_at`

func scanRelayCursor(row pgx.Row) (*lapse.RelayCursor, error) {
	var c lapse.RelayCursor
	if err := row.Scan(&c.Subscriber, &c.Position, &c.Relayed, &c.UpdatedAt); err != nil {
		return nil, err
	}
	c.UpdatedAt = c.UpdatedAt.UTC()
	return &c, nil
}

// RelayLock locks the cursor of subscriber, making it at relayStart if it
// has none; nil when another transaction holds it.
func (s *Store) RelayLock(ctx context.Context, subscriber string, at time.Time) (*lapse.RelayCursor, error) {
	c, err := scanRelayCursor(s.db.QueryRow(ctx, `SELECT `+relayCursorColumns+`
		FROM relay_cursors WHERE subscriber = $1 FOR UPDATE SKIP LOCKED`, subscriber))
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: lock the relay of %s: %w", subscriber, err)
	}
	// Held by another transaction, or not made yet: an insert that finds
	// the row (or waits for one being made, and then finds it) writes
	// nothing and returns nothing.
	c, err = scanRelayCursor(s.db.QueryRow(ctx, `INSERT INTO relay_cursors (subscriber, lo, hi, updated_at)
		VALUES ($1, '1:1:', '1:1:', $2) ON CONFLICT (subscriber) DO NOTHING
		RETURNING `+relayCursorColumns, subscriber, at))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("postgres: make the relay of %s: %w", subscriber, err)
	}
	return c, nil
}

// relayReadSQL reads, for subscriber $1, up to $6 rows of transactions
// visible in snapshot $3 and not in $2, after ($4, $5), in (xid, seq)
// order (r): the rows of each xid of $2's xip, a probe of outbox_relay's
// key each, then the range from $2's xmax to $3's, an index scan that
// stops at the limit.
//
// An order's events must reach the subscriber in the order they were
// written, which is seq's: seq is drawn once the statement that writes the
// event has locked its order, from a sequence without a cache, so that of
// two transactions that write events of one order, the later one draws the
// greater seq. Their xids may be the other way round (a transaction whose
// id was given by an earlier write, before it waited for the order), and
// both may lie in one range. So for every order of r the read also takes
// (ahead) the rows of that order further on in the range, past r's last,
// with a seq below one of r's, and marks them ahead, which the reads skip
// from then on; the caller hands them over with r, in seq order. It finds
// them by the order: a probe of outbox_relay's rows of each order, and of
// each row marked by its ctid, each a subquery planned alone (OFFSET 0)
// whose one indexable test is that key, so that no statistics
// (outbox_relay's grow by a million rows in a flash sale, between two
// ANALYZEs) can turn it into a read of outbox_relay from r's last on,
// which took 3 s a batch.
//
// The statement returns r's rows and those, is_ahead telling which, in seq
// order, with their events; blocked says whether a delivery of the
// event's order to the subscriber is still pending: a probe by order each,
// as a scalar subquery, so that it is never planned as a read of every
// pending delivery. An event that is not there (it cannot be pruned
// before its relay passes it) comes back as NULLs, so that the cursor
// still moves past its row.
const relayReadSQL = `WITH r AS MATERIALIZED (
	(SELECT q.xid, q.seq, q.event_id, q.order_id
	FROM pg_snapshot_xip($2::pg_snapshot) x(xid)
	CROSS JOIN LATERAL (SELECT q.xid, q.seq, q.event_id, q.order_id FROM outbox_relay q
		WHERE q.subscriber = $1 AND q.xid = x.xid AND (q.xid, q.seq) > ($4::xid8, $5::bigint) AND NOT q.ahead
		ORDER BY q.seq LIMIT $6) q
	WHERE pg_visible_in_snapshot(x.xid, $3::pg_snapshot)
	ORDER BY q.xid, q.seq LIMIT $6)
	UNION ALL
	(SELECT q.xid, q.seq, q.event_id, q.order_id FROM outbox_relay q
	WHERE q.subscriber = $1 AND q.xid >= pg_snapshot_xmax($2::pg_snapshot) AND q.xid < pg_snapshot_xmax($3::pg_snapshot)
		AND pg_visible_in_snapshot(q.xid, $3::pg_snapshot) AND (q.xid, q.seq) > ($4::xid8, $5::bigint) AND NOT q.ahead
	ORDER BY q.xid, q.seq LIMIT $6)
	ORDER BY 1, 2 LIMIT $6
), k AS (
	SELECT xid, seq FROM r ORDER BY xid DESC, seq DESC LIMIT 1
), b AS (
	SELECT order_id, max(seq) AS seq FROM r GROUP BY order_id
), ahead AS (
	UPDATE outbox_relay q SET ahead = true
	FROM (
		SELECT q2.ctid
		FROM b CROSS JOIN k
		CROSS JOIN LATERAL (SELECT q3.ctid, q3.subscriber, q3.xid, q3.seq, q3.ahead FROM outbox_relay q3
			WHERE q3.order_id = b.order_id OFFSET 0) q2
		WHERE q2.subscriber = $1 AND q2.seq < b.seq AND NOT q2.ahead
			AND pg_visible_in_snapshot(q2.xid, $3::pg_snapshot) AND NOT pg_visible_in_snapshot(q2.xid, $2::pg_snapshot)
			AND NOT (q2.xid, q2.seq) <= (k.xid, k.seq)
		OFFSET 0
	) a
	WHERE q.ctid = a.ctid
	RETURNING q.xid, q.seq, q.event_id
)
SELECT a.xid::text, a.seq, a.is_ahead, o.id::text, o.order_id, o.order_no, o.type, o.payload, o.created_at,
	coalesce((SELECT true FROM deliveries d
		WHERE d.order_id = o.order_id AND d.subscriber = $1 AND ` + pendingByKey + ` LIMIT 1), false)
FROM (SELECT xid, seq, event_id, false AS is_ahead FROM r UNION ALL SELECT xid, seq, event_id, true FROM ahead) a
LEFT JOIN outbox o ON o.id = a.event_id
ORDER BY a.seq`

// RelayRead returns the events after p.Cursor that name p.Subscriber, up to
// p.Limit: the rest of the range being read, then, if it has room, of the
// range from its end to a snapshot taken now.
func (s *Store) RelayRead(ctx context.Context, p *lapse.RelayReadParams) (*lapse.RelayBatch, error) {
	b, err := s.relayRead(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("postgres: read the relay of %s: %w", p.Subscriber, err)
	}
	return b, nil
}

func (s *Store) relayRead(ctx context.Context, p *lapse.RelayReadParams) (*lapse.RelayBatch, error) {
	pos, err := parseRelayPos(p.Cursor.Position)
	if err != nil {
		return nil, err
	}
	// The snapshot that ends the next range, taken first: a snapshot taken
	// before the first range is read is as good an end for the next one.
	// JIT is off for the rest of the transaction: the read's estimates
	// (a join per event with every partition of the outbox) are far above
	// what it does, and compiling it took half a second a batch.
	var now string
	if err := s.db.QueryRow(ctx, `SELECT pg_current_snapshot()::text, set_config('jit', 'off', true)`).Scan(&now, nil); err != nil {
		return nil, err
	}
	b := &lapse.RelayBatch{}
	room := p.Limit // rows left to read, not counting those read ahead
	if pos.lo != pos.hi {
		last, n, err := s.relayRange(ctx, b, p.Subscriber, pos, p.Limit)
		if err != nil {
			return nil, err
		}
		if n == p.Limit {
			pos.afterXid, pos.afterSeq = last.afterXid, last.afterSeq
			b.Next = &lapse.RelayCursor{Subscriber: p.Subscriber, Position: pos.String(), Relayed: p.Cursor.Relayed}
			return b, nil
		}
		room -= n
	}
	next := relayPos{lo: pos.hi, hi: now, afterXid: "0"}
	last, n, err := s.relayRange(ctx, b, p.Subscriber, next, room)
	if err != nil {
		return nil, err
	}
	if n == room {
		next.afterXid, next.afterSeq = last.afterXid, last.afterSeq
	} else {
		next = relayPos{lo: now, hi: now, afterXid: "0"} // read to its end
	}
	b.Next = &lapse.RelayCursor{Subscriber: p.Subscriber, Position: next.String(), Relayed: p.Cursor.Relayed}
	return b, nil
}

// relayRange appends to b up to limit events of the range of pos after its
// after, with the events of their orders read ahead (relayReadSQL), in
// seq order, and returns the position of the last row read in (xid, seq)
// order and how many rows it read, not counting those read ahead (an event
// that is not there is a row read and not appended).
func (s *Store) relayRange(ctx context.Context, b *lapse.RelayBatch, subscriber string, pos relayPos, limit int) (relayPos, int, error) {
	rows, err := s.db.Query(ctx, relayReadSQL, subscriber, pos.lo, pos.hi, pos.afterXid, pos.afterSeq, limit)
	if err != nil {
		return pos, 0, err
	}
	defer rows.Close()
	n := 0
	var lastXid uint64
	for rows.Next() {
		var (
			xid, id, orderNo, typ *string
			seq                   int64
			ahead                 bool
			orderID               *int64
			payload               []byte
			at                    *time.Time
			blocked               bool
		)
		if err := rows.Scan(&xid, &seq, &ahead, &id, &orderID, &orderNo, &typ, &payload, &at, &blocked); err != nil {
			return pos, n, err
		}
		if !ahead {
			n++
			x, err := strconv.ParseUint(*xid, 10, 64)
			if err != nil {
				return pos, n, fmt.Errorf("xid %q: %w", *xid, err)
			}
			if n == 1 || x > lastXid || x == lastXid && seq > pos.afterSeq {
				lastXid, pos.afterXid, pos.afterSeq = x, *xid, seq
			}
		}
		if id == nil {
			continue
		}
		t := at.UTC()
		ev := &lapse.OutboxEvent{ID: *id, OrderID: *orderID, OrderNo: *orderNo, Type: *typ, Payload: payload, CreatedAt: t}
		b.Events = append(b.Events, &lapse.Delivery{EventID: *id, EventType: *typ, OrderID: *orderID, OrderNo: *orderNo,
			Subscriber: subscriber, Status: lapse.DeliveryPending, NextAttemptAt: t, CreatedAt: t, UpdatedAt: t, Event: ev})
		b.Blocked = append(b.Blocked, blocked)
	}
	return pos, n, rows.Err()
}

// relayDeferSQL writes the deliveries of RelayDefer, numbered and chained
// as deliveriesFrom's are, in one statement.
var relayDeferSQL = `WITH ` + numberedDeliveries(`SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::bool[])
		WITH ORDINALITY AS s(event_id, order_id, order_no, type, created_at, attempted, n)`) + `
INSERT INTO deliveries AS d (id, event_id, order_id, order_no, event_type, subscriber, status, attempts,
	lease_owner, lease_until, next_attempt_at, created_at, updated_at, after_id)
OVERRIDING SYSTEM VALUE
SELECT dn.id, dn.event_id, dn.order_id, dn.order_no, dn.type, $7, 'pending', CASE WHEN dn.attempted THEN 1 ELSE 0 END,
	CASE WHEN dn.attempted THEN $8 ELSE '' END, CASE WHEN dn.attempted THEN $10::timestamptz END,
	$9, dn.created_at, $9,
	coalesce(lag(dn.id) OVER (PARTITION BY dn.order_id ORDER BY dn.n),
		(SELECT max(p.id) FROM deliveries p WHERE p.order_id = dn.order_id AND p.subscriber = $7))
FROM dn
RETURNING ` + deliveryColumns

// RelayDefer writes the deliveries of the events of p.Events that the
// relay did not hand over.
func (s *Store) RelayDefer(ctx context.Context, p *lapse.RelayDeferParams) ([]*lapse.Delivery, error) {
	if len(p.Events) == 0 {
		return nil, nil
	}
	n := len(p.Events)
	ids, orderIDs, orderNos, types, at := make([][16]byte, n), make([]int64, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, d := range p.Events {
		id, err := lapse.ParseEventID(d.EventID)
		if err != nil {
			return nil, fmt.Errorf("postgres: defer the relay of %s: %w", p.Subscriber, err)
		}
		ids[i], orderIDs[i], orderNos[i], types[i], at[i] = id, d.OrderID, d.OrderNo, d.EventType, d.Event.CreatedAt
	}
	rows, err := s.db.Query(ctx, relayDeferSQL, ids, orderIDs, orderNos, types, at, p.Attempted,
		p.Subscriber, p.Owner, p.At, p.LeaseUntil)
	if err != nil {
		return nil, fmt.Errorf("postgres: defer the relay of %s: %w", p.Subscriber, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: defer the relay of %s: %w", p.Subscriber, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("postgres: defer the relay of %s: wrote %d deliveries for %d events", p.Subscriber, len(out), n)
	}
	// Ids grow in the order of p.Events (numberedDeliveries).
	slices.SortFunc(out, func(a, b *lapse.Delivery) int { return cmp.Compare(a.ID, b.ID) })
	for i, d := range out {
		d.Event = p.Events[i].Event
	}
	return out, nil
}

// RelayAdvance moves the locked cursor c's subscriber to c.
func (s *Store) RelayAdvance(ctx context.Context, c *lapse.RelayCursor, relayed int64) error {
	pos, err := parseRelayPos(c.Position)
	if err != nil {
		return fmt.Errorf("postgres: advance the relay of %s: %w", c.Subscriber, err)
	}
	tag, err := s.db.Exec(ctx, `UPDATE relay_cursors SET lo = $2::pg_snapshot, hi = $3::pg_snapshot,
		after_xid = $4::xid8, after_seq = $5, relayed = relayed + $6, updated_at = $7 WHERE subscriber = $1`,
		c.Subscriber, pos.lo, pos.hi, pos.afterXid, pos.afterSeq, relayed, c.UpdatedAt)
	if err != nil {
		return fmt.Errorf("postgres: advance the relay of %s: %w", c.Subscriber, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("postgres: advance the relay of %s: it has no cursor", c.Subscriber)
	}
	return nil
}

// RelayList returns every relay's cursor, by subscriber.
func (s *Store) RelayList(ctx context.Context) ([]*lapse.RelayCursor, error) {
	rows, err := s.db.Query(ctx, `SELECT `+relayCursorColumns+` FROM relay_cursors ORDER BY subscriber`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list relays: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.RelayCursor, error) { return scanRelayCursor(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list relays: %w", err)
	}
	return out, nil
}

// relayedEventsSQL reads the events of order $1 relayed to a subscriber
// without a delivery for it, and whether the subscriber's cursor has
// passed each: visible in lo, or in the range being read up to after.
const relayedEventsSQL = `SELECT q.subscriber, o.id, o.order_id, o.order_no, o.type, o.payload, o.created_at,
	q.ahead OR c.lo IS NOT NULL AND (pg_visible_in_snapshot(q.xid, c.lo)
		OR pg_visible_in_snapshot(q.xid, c.hi) AND (q.xid, q.seq) <= (c.after_xid, c.after_seq))
FROM outbox o
JOIN outbox_relay q ON q.order_id = o.order_id AND q.event_id = o.id
LEFT JOIN relay_cursors c ON c.subscriber = q.subscriber
WHERE o.order_id = $1 AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = o.id AND d.subscriber = q.subscriber)
ORDER BY o.seq, q.subscriber`

// RelayedEvents returns the order's events relayed without a delivery.
func (s *Store) RelayedEvents(ctx context.Context, orderID int64) ([]*lapse.RelayedEvent, error) {
	rows, err := s.db.Query(ctx, relayedEventsSQL, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list the relayed events of order %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.RelayedEvent, error) {
		var r lapse.RelayedEvent
		var ev lapse.OutboxEvent
		var payload []byte
		if err := row.Scan(&r.Subscriber, &ev.ID, &ev.OrderID, &ev.OrderNo, &ev.Type, &payload, &ev.CreatedAt, &r.Passed); err != nil {
			return nil, err
		}
		ev.Payload, ev.CreatedAt = payload, ev.CreatedAt.UTC()
		r.Event = &ev
		return &r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list the relayed events of order %d: %w", orderID, err)
	}
	return out, nil
}
