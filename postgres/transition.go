package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lapsehq/lapse"
)

// orderTransitionSQL is the guarded compare-and-swap with its deadline row,
// log row, outbox rows and their deliveries. The other writes read the
// UPDATE's RETURNING (the deliveries through the outbox insert's), so when
// the guard fails nothing at all is written.
var orderTransitionSQL = orderTransitionCTEs + `
SELECT ` + orderColumns + ` FROM o`

// orderTransitionCTEs are orderTransitionSQL's statements, with
// parameters $1 to $20 (orderTransitionArgs), o the moved order: a
// statement that moves an order and writes more with it (PaymentCreate
// with a transition) adds its own after them.
var orderTransitionCTEs = guardedTransitionCTEs("")

// guardedTransitionCTEs is orderTransitionCTEs with guard, a condition on
// the order's row, added to the compare-and-swap's (one that starts with
// AND; "" for none): when it fails nothing is written.
func guardedTransitionCTEs(guard string) string {
	return `WITH o AS (
	UPDATE orders SET state = $4, deadline_at = $5, closed_at = $6, close_reason = $7, fired_by = $8,
		updated_at = $9, version = version + 1, closed_deadline_at = $20
	WHERE id = $1 AND state = $2 AND version = $3` + guard + `
	RETURNING ` + orderColumns + `
), ` + deadlineRowsCTE("o") + `, t AS (
	INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
	SELECT o.id, $2, $4, $10, o.version, $8, $11, $12, $9 FROM o
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, o.id, e.order_no, e.type, e.payload, e.created_at
	FROM o, ` + oneOrderEvents(13) + `
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), ` + oneOrderDeliveriesCTE("d", 18, 19)
}

// OrderTransition applies one planned transition in one statement: the
// update guarded by id, state and version, its log row, its outbox rows and
// their deliveries. It returns the order as updated, or lapse.ErrStale and
// writes nothing.
func (s *Store) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	args, err := orderTransitionArgs(p)
	if err != nil {
		return nil, fmt.Errorf("postgres: transition order %d: %w", p.OrderID, err)
	}
	o, err := scanOrder(s.db.QueryRow(ctx, orderTransitionSQL, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: transition order %d %s --%s--> %s: %w", p.OrderID, p.FromState, p.Event, p.ToState, err)
	}
	return o, nil
}

// orderTransitionArgs are the parameters of orderTransitionCTEs for p.
func orderTransitionArgs(p *lapse.OrderTransitionParams) ([]any, error) {
	var ev outboxArgs
	if err := ev.add(p.OrderID, p.Outbox); err != nil {
		return nil, err
	}
	return []any{p.OrderID, p.FromState, p.FromVersion, p.ToState, p.DeadlineAt, p.ClosedAt, p.CloseReason, p.FiredBy,
		p.At, p.Event, p.Actor, p.Reason,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers, p.ClosedDeadlineAt}, nil
}

// orderTransitionManySQL is orderTransitionSQL for a batch: the planned
// transitions arrive as parallel arrays, the UPDATE joins them, and the
// deadline rows, the log and outbox inserts keep only the orders the UPDATE
// returned, the deliveries only the events the outbox insert returned. A
// close changes no indexed column of orders, so its update is HOT, and its
// deadline row is deleted. One statement per
// batch is what makes the deadline engine's close path fast: one round trip,
// one plan, one pass over the index of orders.
var orderTransitionManySQL = transitionManyCTEs(false, "") + `
SELECT id FROM o`

// transitionManyCTEs returns the CTEs that apply a batch of planned
// transitions (p, parameters $1 to $21): the orders moved (o, guarded by
// state and version), their deadline rows, log rows, outbox rows (x) and
// deliveries (d). With skipLocked, only the orders the statement can lock
// at once (l) move; the others are left for their callers to decide alone.
//
// The payloads, by far the largest parameter, come last ($21), so that
// OrderTransitionMany's message, in a buffer of pgx's that starts small
// for every statement, grows once to hold them rather than once more for
// what would follow them.
//
// lockGuard, with skipLocked, is a condition on orders that an order must
// meet to be locked (and so moved) by the batch (one that starts with
// AND; "" for none): the others are left for their callers too.
func transitionManyCTEs(skipLocked bool, lockGuard string) string {
	lock, from := "", "FROM p"
	if skipLocked {
		lock = `
), l AS (
	SELECT orders.id FROM orders JOIN p ON p.id = orders.id WHERE true` + lockGuard + `
	FOR NO KEY UPDATE OF orders SKIP LOCKED`
		from = "FROM p JOIN l ON l.id = p.id"
	}
	return `WITH p AS (
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::timestamptz[],
		$6::timestamptz[], $7::text[], $8::text[], $9::timestamptz[], $10::text[], $11::text[], $12::text[],
		$17::timestamptz[])
		AS p(id, from_state, from_version, to_state, deadline_at, closed_at, close_reason, fired_by, at, event, actor, reason,
			closed_deadline_at)` + lock + `
), o AS (
	UPDATE orders SET state = p.to_state, deadline_at = p.deadline_at, closed_at = p.closed_at,
		close_reason = p.close_reason, fired_by = p.fired_by, updated_at = p.at, version = orders.version + 1,
		closed_deadline_at = p.closed_deadline_at
	` + from + `
	WHERE orders.id = p.id AND orders.state = p.from_state AND orders.version = p.from_version
	RETURNING orders.id, orders.version, orders.deadline_at, orders.flow
), ` + deadlineRowsCTE("o") + `, t AS (
	INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
	SELECT p.id, p.from_state, p.to_state, p.event, o.version, p.fired_by, p.actor, p.reason, p.at
	FROM o JOIN p ON p.id = o.id
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, e.order_id, e.order_no, e.type, e.payload, e.created_at
	FROM unnest($13::bigint[], $14::uuid[], $15::text[], $16::text[], $21::json[], $18::timestamptz[])
		WITH ORDINALITY AS e(order_id, id, order_no, type, payload, created_at, n)
	JOIN o ON o.id = e.order_id
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), ` + deliveriesCTE("d", 19, 20)
}

// OrderTransitionMany applies many planned transitions in one statement and
// returns the ids of the orders that moved; a stale one is skipped and
// writes nothing. No order has two transitions in ps
// (lapse.ValidateOrderTransitions): the UPDATE would apply one of them and
// log both.
func (s *Store) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	a := newTransitionArgs(len(ps))
	for _, p := range ps {
		if err := a.add(p); err != nil {
			return nil, fmt.Errorf("postgres: transition orders: %w", err)
		}
	}
	params := newArrayParams()
	defer params.release()
	a.encode(params)
	moved := make([]int64, 0, len(ps))
	err := s.queryArrays(ctx, "lapse_order_transition_many", orderTransitionManySQL, params, func(row [][]byte) error {
		if len(row) != 1 || len(row[0]) != 8 {
			return fmt.Errorf("want the moved order's id, a bigint, in each row")
		}
		moved = append(moved, int64(binary.BigEndian.Uint64(row[0])))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: transition %d orders: %w", len(a.ids), err)
	}
	return moved, nil
}

// transitionArgs holds planned transitions column by column, for unnest.
type transitionArgs struct {
	ids, versions                                            []int64
	from, to, events, closeReasons, firedBy, actors, reasons []string
	deadlines, closedAt, closedDeadlines                     pgtype.FlatArray[*time.Time]
	at                                                       []time.Time
	outbox                                                   outboxArgs
}

func newTransitionArgs(n int) *transitionArgs {
	return &transitionArgs{
		ids: make([]int64, 0, n), versions: make([]int64, 0, n),
		from: make([]string, 0, n), to: make([]string, 0, n), events: make([]string, 0, n),
		closeReasons: make([]string, 0, n), firedBy: make([]string, 0, n), actors: make([]string, 0, n),
		reasons: make([]string, 0, n), deadlines: make([]*time.Time, 0, n), closedAt: make([]*time.Time, 0, n),
		closedDeadlines: make([]*time.Time, 0, n), at: make([]time.Time, 0, n), outbox: newOutboxArgs(n),
	}
}

func (a *transitionArgs) add(p *lapse.OrderTransitionParams) error {
	a.ids, a.versions = append(a.ids, p.OrderID), append(a.versions, p.FromVersion)
	a.from, a.to, a.events = append(a.from, string(p.FromState)), append(a.to, string(p.ToState)), append(a.events, string(p.Event))
	a.deadlines, a.closedAt = append(a.deadlines, p.DeadlineAt), append(a.closedAt, p.ClosedAt)
	a.closedDeadlines = append(a.closedDeadlines, p.ClosedDeadlineAt)
	a.closeReasons, a.firedBy = append(a.closeReasons, p.CloseReason), append(a.firedBy, string(p.FiredBy))
	a.actors, a.reasons, a.at = append(a.actors, p.Actor), append(a.reasons, p.Reason), append(a.at, p.At)
	return a.outbox.add(p.OrderID, p.Outbox)
}

// encode appends a's columns to p as the parameters of transitionManyCTEs,
// $1 to $21.
func (a *transitionArgs) encode(p *arrayParams) {
	ev := &a.outbox
	p.int8s(a.ids)
	p.texts(a.from)
	p.int8s(a.versions)
	p.texts(a.to)
	p.nullTimes(a.deadlines)
	p.nullTimes(a.closedAt)
	p.texts(a.closeReasons)
	p.texts(a.firedBy)
	p.times(a.at)
	p.texts(a.events)
	p.texts(a.actors)
	p.texts(a.reasons)
	p.int8s(ev.orderIDs)
	p.uuids(ev.ids)
	p.texts(ev.orderNos)
	p.texts(ev.types)
	p.nullTimes(a.closedDeadlines)
	p.times(ev.createdAt)
	p.uuids(ev.subEventIDs)
	p.texts(ev.subscribers)
	p.jsons(ev.payloads)
}

// TransitionList returns the transition log of an order, oldest first.
func (s *Store) TransitionList(ctx context.Context, orderID int64) ([]*lapse.TransitionRecord, error) {
	rows, err := s.db.Query(ctx, `SELECT id, order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at
		FROM transitions WHERE order_id = $1 ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list transitions of order %d: %w", orderID, err)
	}
	defer rows.Close()
	var out []*lapse.TransitionRecord
	for rows.Next() {
		var r lapse.TransitionRecord
		if err := rows.Scan(&r.ID, &r.OrderID, &r.FromState, &r.ToState, &r.Event, &r.Version, &r.FiredBy,
			&r.Actor, &r.Reason, &r.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: list transitions of order %d: %w", orderID, err)
		}
		r.CreatedAt = r.CreatedAt.UTC()
		out = append(out, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list transitions of order %d: %w", orderID, err)
	}
	return out, nil
}
