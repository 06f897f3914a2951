package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// orderDeadlineSetSQL moves a deadline under the same guard as a transition,
// with its deadline row, its outbox rows and their deliveries. It writes no
// log row: the state does not change.
var orderDeadlineSetSQL = `WITH o AS (
	UPDATE orders SET deadline_at = $4, updated_at = $5, version = version + 1,
		intent_at = coalesce($13, intent_at), intent_provider = CASE WHEN $13::timestamptz IS NULL THEN intent_provider ELSE $14 END,
		pay_by = coalesce($15, pay_by)
	WHERE id = $1 AND state = $2 AND version = $3
	RETURNING ` + orderColumns + `
), ` + deadlineRowsCTE("o") + `, x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, o.id, e.order_no, e.type, e.payload, e.created_at
	FROM o, ` + oneOrderEvents(6) + `
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), ` + oneOrderDeliveriesCTE("d", 11, 12) + `
SELECT ` + orderColumns + ` FROM o`

// OrderDeadlineSet moves the deadline of an order that is still in
// p.FromState at p.FromVersion and writes p.Outbox with its deliveries, in
// one statement, or returns lapse.ErrStale and writes nothing.
func (s *Store) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	var ev outboxArgs
	if err := ev.add(p.OrderID, p.Outbox); err != nil {
		return nil, fmt.Errorf("postgres: set deadline of order %d: %w", p.OrderID, err)
	}
	o, err := scanOrder(s.db.QueryRow(ctx, orderDeadlineSetSQL,
		p.OrderID, p.FromState, p.FromVersion, p.DeadlineAt, p.At,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers, p.IntentAt, p.IntentProvider, p.PayBy))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: set deadline of order %d: %w", p.OrderID, err)
	}
	return o, nil
}

// deadlineRowsCTE returns the CTEs that bring order_deadlines in line with
// the orders that the CTE o (an UPDATE … RETURNING id, flow, deadline_at)
// wrote: an order left without a deadline loses its row, one with a
// deadline gets it, or its new time. They read o, so the orders row is
// updated, and locked, before its deadline row: every writer takes the two
// in that order. A deadline that did not change writes nothing.
func deadlineRowsCTE(o string) string {
	return `dl AS (
	DELETE FROM order_deadlines od USING ` + o + ` WHERE od.order_id = ` + o + `.id AND ` + o + `.deadline_at IS NULL
), du AS (
	INSERT INTO order_deadlines (order_id, deadline_at, flow)
	SELECT id, deadline_at, flow FROM ` + o + ` WHERE deadline_at IS NOT NULL
	ON CONFLICT (order_id) DO UPDATE SET deadline_at = EXCLUDED.deadline_at
	WHERE order_deadlines.deadline_at <> EXCLUDED.deadline_at
)`
}

// The claim reads the due index of order_deadlines in (deadline, id) order and
// stops at the limit. Inside a transaction it locks the orders it returns,
// and their deadline rows, and skips those that other claimers hold, so
// claimers on many nodes take disjoint batches.
//
// Locking the deadline row too is what keeps out an order that another
// transaction closed, or whose deadline it moved, after the scan saw it:
// PostgreSQL then tests the rows it locks again as that transaction left
// them, and a deadline row deleted, or moved past the due time, drops the
// order from the claim while the scan goes on to fill the batch. (Locking
// only the order would return it as it is now, joined to the deadline row
// as the scan saw it; and testing o.deadline_at in SQL instead would make
// the planner count the due orders twice over, think few are due, and
// sort them all rather than read the index in order.) The claim never waits
// for a lock, so although it may take the deadline row before the order
// (every other writer takes the order first) it cannot deadlock; it can make
// such a writer wait for the claim's commit. FOR NO KEY UPDATE is the lock
// the closing UPDATE takes on the order anyway (it changes no key); the
// stronger FOR UPDATE would also block inserts that reference the order.
// The deadline row is deleted or updated, which FOR UPDATE covers.
//
// The claim reads on from ($4, $5) in the index's (deadline_at, order_id)
// order, a row comparison that the index scan starts at, so that a claim
// after another that stopped among many orders sharing one deadline (a
// flash sale) does not step over the entries of those closed before it.
var (
	orderClaimDueSQL = "SELECT " + orderColumnsOf("o") + ` FROM order_deadlines d JOIN orders o ON o.id = d.order_id
		WHERE d.deadline_at <= $1 AND (d.deadline_at, d.order_id) > ($4, $5) AND d.flow = ANY($2)
		ORDER BY d.deadline_at, d.order_id LIMIT $3`
	orderClaimDueLockedSQL = orderClaimDueSQL + " FOR NO KEY UPDATE OF o SKIP LOCKED FOR UPDATE OF d SKIP LOCKED"
)

// OrderClaimDue returns up to p.Limit orders of p.Flows whose deadline is at
// or before p.DueBy, earliest first. Inside Tx the rows stay locked until
// the transaction ends and rows locked by others are skipped; outside it is
// a plain read.
func (s *Store) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	if s.tx != nil {
		return s.orderClaimDueLocked(ctx, p)
	}
	rows, err := s.db.Query(ctx, orderClaimDueSQL, p.DueBy, p.Flows, p.Limit, p.From, p.FromID)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due orders: %w", err)
	}
	out, err := scanOrders(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due orders: %w", err)
	}
	return out, nil
}

// The claim runs on its generic plan. Left to plan_cache_mode auto, the
// server planned every claim anew: a generic plan's estimate of a LIMIT
// given as a parameter is a tenth of the rows the scan may read, so it
// always looked dearer than a custom plan, made for the true limit and due
// time, and planning the claim's join with its row locks took about 300 µs
// a claim (2026-12-07, pg_stat_statements), more than running it for ten
// orders. At a few orders a claim, as when deadlines come due thousands a
// second, that was a fifth of the server's CPU a close. The generic plan
// is the custom one's shape (the due index read in order, each order
// probed by its key, the rows locked, the limit), whatever the limit and
// the due time, since the ORDER BY is the index's and the scan stops at the
// limit. So the claim is sent with the setting that asks for it and the
// one that puts back the session's, in one round trip.
const (
	claimGenericSQL = "SET LOCAL plan_cache_mode = force_generic_plan"
	claimResetSQL   = "SET LOCAL plan_cache_mode TO DEFAULT"
)

// orderClaimDueLocked is OrderClaimDue inside Tx.
func (s *Store) orderClaimDueLocked(ctx context.Context, p *lapse.OrderClaimDueParams) (_ []*lapse.Order, err error) {
	b := &pgx.Batch{}
	b.Queue(claimGenericSQL)
	b.Queue(orderClaimDueLockedSQL, p.DueBy, p.Flows, p.Limit, p.From, p.FromID)
	b.Queue(claimResetSQL)
	br := s.tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("postgres: claim due orders: %w", translate(cerr))
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("postgres: claim due orders: %w", translate(err))
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due orders: %w", translate(err))
	}
	out, err := scanOrders(mappedRows{rows})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim due orders: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("postgres: claim due orders: %w", translate(err))
	}
	return out, nil
}

// orderNextDeadlineSQL is an index-only scan of the due index, which carries
// flow for this query, from $2 on; its cost does not grow with the number
// of orders, only with the entries before the first live one from $2 (the
// closed orders' entries that vacuum has not yet removed).
const orderNextDeadlineSQL = "SELECT deadline_at FROM order_deadlines WHERE deadline_at >= $2 AND flow = ANY($1) ORDER BY deadline_at LIMIT 1"

// OrderNextDeadline returns the earliest deadline at or after from among
// orders of flows, and false when none has one.
func (s *Store) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	var t time.Time
	err := s.db.QueryRow(ctx, orderNextDeadlineSQL, flows, from).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: next deadline: %w", err)
	}
	return t.UTC(), true, nil
}

// orderDeadlineMinSQL reads the deadline rows of the orders named by their
// key.
const orderDeadlineMinSQL = "SELECT min(deadline_at) FROM order_deadlines WHERE order_id = ANY($1)"

// OrderDeadlineMin returns the earliest deadline among the orders ids that
// have one, and false when none has.
func (s *Store) OrderDeadlineMin(ctx context.Context, ids []int64) (time.Time, bool, error) {
	if len(ids) == 0 {
		return time.Time{}, false, nil
	}
	var t *time.Time
	if err := s.db.QueryRow(ctx, orderDeadlineMinSQL, ids).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: earliest deadline of %d orders: %w", len(ids), err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return t.UTC(), true, nil
}

// orderCountDueSQL counts within the due index.
const orderCountDueSQL = "SELECT count(*) FROM order_deadlines WHERE deadline_at <= $1"

// OrderCountDue counts orders whose deadline is at or before now.
func (s *Store) OrderCountDue(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, orderCountDueSQL, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count due orders: %w", err)
	}
	return n, nil
}

const orderCountOpenSQL = `SELECT flow, state, count(*), count(deadline_at),
		count(CASE WHEN items IS NOT NULL OR coupon <> '' THEN 1 END) FROM orders
		WHERE closed_at IS NULL GROUP BY flow, state ORDER BY flow, state`

// OrderCountOpen counts the open orders by flow and state.
func (s *Store) OrderCountOpen(ctx context.Context) ([]lapse.OrderStateCount, error) {
	rows, err := s.db.Query(ctx, orderCountOpenSQL)
	if err != nil {
		return nil, fmt.Errorf("postgres: count open orders: %w", err)
	}
	defer rows.Close()
	var out []lapse.OrderStateCount
	for rows.Next() {
		var c lapse.OrderStateCount
		if err := rows.Scan(&c.Flow, &c.State, &c.N, &c.Timed, &c.Holding); err != nil {
			return nil, fmt.Errorf("postgres: count open orders: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: count open orders: %w", err)
	}
	return out, nil
}
