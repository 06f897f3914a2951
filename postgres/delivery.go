package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// planEachRun makes a statement planned at each run, with its arguments and
// the table as it is then, rather than prepared once per connection. The
// deliveries table of a young database starts empty and can grow by a
// million rows in a minute (a flash sale): a claim whose cached generic plan
// was made while it was small scans and sorts the whole table (24 s a claim
// at 200,000 deliveries, measured), until autovacuum's next ANALYZE
// invalidates the plan. The statements that take it work on many rows, so
// planning each run costs little beside them.
const planEachRun = pgx.QueryExecModeExec

// deliveryColumns is the column list every delivery read uses, in
// deliveryDest's order. Queries name the deliveries table d.
//
// A delivery's next attempt is the later of next_attempt_at and the end of
// its lease: a claim leaves next_attempt_at as it was (see
// deliveryClaimQuery), and a finish and a retry clear the lease. Rows
// leased before migration 0023 have next_attempt_at at the end of their
// lease already.
const deliveryColumns = `d.id, d.event_id, d.order_id, d.order_no, d.event_type, d.subscriber, d.status, d.attempts,
	d.retry_base, GREATEST(d.next_attempt_at, d.lease_until), d.lease_owner, d.lease_until, d.unknown, d.last_error, d.created_at,
	d.updated_at, d.done_at, d.attempts - coalesce(d.ended, 0) AS unfinished`

// deliveryDest returns the scan destinations of deliveryColumns in d.
func deliveryDest(d *lapse.Delivery) []any {
	return []any{&d.ID, &d.EventID, &d.OrderID, &d.OrderNo, &d.EventType, &d.Subscriber, &d.Status, &d.Attempts,
		&d.RetryBase, &d.NextAttemptAt, &d.LeaseOwner, &d.LeaseUntil, &d.Unknown, &d.LastError, &d.CreatedAt,
		&d.UpdatedAt, &d.DoneAt, &d.Unfinished}
}

// utcDelivery puts d's times in UTC, as Lapse keeps them.
func utcDelivery(d *lapse.Delivery) {
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = d.NextAttemptAt.UTC(), d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	d.LeaseUntil, d.DoneAt = utcPtr(d.LeaseUntil), utcPtr(d.DoneAt)
}

// scanDelivery reads one row of deliveryColumns.
func scanDelivery(row pgx.Row) (*lapse.Delivery, error) {
	var d lapse.Delivery
	if err := row.Scan(deliveryDest(&d)...); err != nil {
		return nil, err
	}
	utcDelivery(&d)
	return &d, nil
}

// pendingByKey and deadByKey are the tests that a delivery d, found by its
// id, is pending or dead, spelled with IS TRUE (the same for a status that
// is never NULL) so that the planner cannot match them to the predicates of
// deliveries_due_idx (status = 'pending') and deliveries_dead_idx (status =
// 'dead'). With statistics taken while few deliveries were pending or dead,
// such a partial index looks empty, and a probe by id that matched its
// predicate could be planned as a read of the whole index, the backlog, for
// each row (see deliveryClaimQuery and TestDeliveryClaimPredecessorProbe).
const (
	pendingByKey = `(d.status = 'pending') IS TRUE`
	deadByKey    = `(d.status = 'dead') IS TRUE`
)

// deliveryClaimQuery returns the claim of the subscribers matched by
// subscriber, a condition on $2. It picks due deliveries in due order from
// the due index, each only once its predecessor in its chain (after_id, the
// delivery of the same order and subscriber written before it) is no
// longer pending, so that a subscriber sees an order's events in order.
// That test is a primary-key probe, whatever the statistics say: it reads
// the predecessor's status by id alone, and a delivery with no predecessor
// reads nothing. Written as NOT EXISTS (a pending delivery with that id),
// its condition on status matched the predicate of the partial index of
// pending deliveries, and with statistics from before a backlog the planner
// read that whole index, or the table, for every candidate: a claim of 500
// from a backlog of 5,000 read 115,042 buffers, 230 a delivery
// (TestDeliveryClaimPredecessorProbe).
// A predecessor that is gone counts as not pending, as it did. It locks
// them, skipping rows that other claimers or finishers hold, and leases
// them in the same statement. c is materialized so that the pick runs once:
// the UPDATE leases exactly the rows it locked. The lease is committed with
// the statement (or the caller's transaction); it, not a row lock, is what
// keeps other workers off the delivery while it runs.
//
// A delivery is due when both next_attempt_at and the end of its lease, if
// it has one, have passed: a lease whose worker died makes it due again.
// The lease changes no column that an index names (migration 0023), so
// that it is a HOT update that writes no index entry: the due index keeps
// a leased delivery where it was, and the claim reads past the leases in
// flight, a few per delivery it claims, since the running loops claim once
// a quarter of their slots are free.
func deliveryClaimQuery(subscriber string) string {
	return `WITH c AS MATERIALIZED (
	SELECT id, next_attempt_at FROM deliveries d
	WHERE status = 'pending' AND next_attempt_at <= $1 AND ` + subscriber + `
		AND (lease_until IS NULL OR lease_until <= $1)
		AND (d.after_id IS NULL OR (SELECT e.status FROM deliveries e WHERE e.id = d.after_id) IS DISTINCT FROM 'pending')
	ORDER BY next_attempt_at LIMIT $3
	FOR UPDATE SKIP LOCKED
), u AS (
	UPDATE deliveries d SET attempts = d.attempts + 1, lease_owner = $4, lease_until = $5, updated_at = $1
	FROM c, outbox x
	WHERE d.id = c.id AND x.id = d.event_id
	RETURNING ` + deliveryColumns + `, x.seq, x.order_id AS event_order_id, x.order_no AS event_order_no,
		x.type, x.payload, x.created_at AS event_created_at, c.next_attempt_at AS due
)
SELECT * FROM u ORDER BY due, id`
}

// The claims of one subscriber, which is what the engine's delivery loops
// make, and of several. Naming one lets the due index, which leads with the
// subscriber, hand rows over in due order and stop at the limit; several
// are merged with a sort of all their due rows.
var (
	deliveryClaimOneSQL  = deliveryClaimQuery("subscriber = $2::text")
	deliveryClaimManySQL = deliveryClaimQuery("subscriber = ANY($2::text[])")
)

// DeliveryClaim leases up to p.Limit pending deliveries of p.Subscribers due
// at p.Now, earliest first, in one statement, skipping rows other
// transactions hold. Each comes back with Attempts and Unfinished
// incremented, LeaseOwner
// p.Owner, LeaseUntil and NextAttemptAt p.LeaseUntil, and Event loaded.
func (s *Store) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	if p.Limit <= 0 || len(p.Subscribers) == 0 {
		return nil, nil
	}
	var subs any = p.Subscribers
	query := deliveryClaimManySQL
	if len(p.Subscribers) == 1 {
		subs, query = p.Subscribers[0], deliveryClaimOneSQL
	}
	rows, err := s.db.Query(ctx, query, planEachRun, p.Now, subs, p.Limit, p.Owner, p.LeaseUntil)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim deliveries: %w", err)
	}
	defer rows.Close()
	var out []*lapse.Delivery
	for rows.Next() {
		var d lapse.Delivery
		var ev lapse.OutboxEvent
		var payload []byte
		var due any
		dest := append(deliveryDest(&d), &ev.Seq, &ev.OrderID, &ev.OrderNo, &ev.Type, &payload, &ev.CreatedAt, &due)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("postgres: claim deliveries: %w", err)
		}
		utcDelivery(&d)
		ev.ID, ev.Payload, ev.CreatedAt = d.EventID, payload, ev.CreatedAt.UTC()
		d.Event = &ev
		out = append(out, &d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claim deliveries: %w", err)
	}
	return out, nil
}

// deliveryFinishSQL is the guarded finish of one attempt. Every insert reads
// the UPDATE's RETURNING, so when the lease is lost nothing is written. A
// finished delivery gives its lease up whatever its new status; done_at is
// set only when it is done, next_attempt_at to $5 only when it stays
// pending. A delivery that is done or dead keeps the next attempt it had,
// the end of its lease, as it kept it before claims left next_attempt_at
// alone; the finish leaves the due index, so it writes index entries
// anyway.
var deliveryFinishSQL = `WITH u AS (
	UPDATE deliveries d SET status = $4::text,
		next_attempt_at = CASE WHEN $4::text = 'pending' THEN $5::timestamptz ELSE GREATEST(d.next_attempt_at, d.lease_until) END,
		unknown = $6, last_error = $7, lease_owner = '', lease_until = NULL, updated_at = $8::timestamptz,
		done_at = CASE WHEN $4::text = 'done' THEN $8::timestamptz END,
		ended = CASE WHEN $28::bool THEN d.ended ELSE d.attempts END
	WHERE d.id = $1 AND ` + pendingByKey + ` AND d.attempts = $2 AND d.lease_owner = $3
	RETURNING ` + deliveryColumns + `
), a AS (
	INSERT INTO delivery_attempts (delivery_id, attempt, worker, started_at, duration_us, outcome, error)
	SELECT u.id, $2, $9, $10, $11, $12, $13 FROM u
), r AS (
	INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at)
	SELECT $15, $16, $17, nullif($18::bigint, 0), $19 FROM u WHERE $14::bool
	ON CONFLICT DO NOTHING
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, u.order_id, e.order_no, e.type, e.payload, e.created_at
	FROM u, unnest($20::bigint[], $21::uuid[], $22::text[], $23::text[], $24::json[], $25::timestamptz[])
		WITH ORDINALITY AS e(order_id, id, order_no, type, payload, created_at, n)
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), ` + deliveriesCTE("dd", 26, 27) + `
SELECT * FROM u`

// DeliveryFinish records the outcome of attempt p.Attempt of a delivery
// leased by p.Owner in one statement: its new status, its attempt row
// (keyed by p.ID and p.Attempt; the rest from p.Record), p.Review if given,
// and p.Outbox with their deliveries; Unfinished is kept when p.CutShort,
// and 0 otherwise. It returns lapse.ErrLeaseLost, writing
// nothing, when the delivery is no longer pending under that owner and
// attempt, and an EINVALID error for a status other than done, pending or
// dead.
func (s *Store) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	switch p.Status {
	case lapse.DeliveryDone, lapse.DeliveryPending, lapse.DeliveryDead:
	default:
		return nil, lapse.Errorf(lapse.EINVALID, "a finished delivery is done, pending or dead, not %q", p.Status)
	}
	args, err := deliveryFinishArgs(p)
	if err != nil {
		return nil, fmt.Errorf("postgres: finish delivery %d: %w", p.ID, err)
	}
	d, err := scanDelivery(s.db.QueryRow(ctx, deliveryFinishSQL, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrLeaseLost
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: finish delivery %d attempt %d: %w", p.ID, p.Attempt, err)
	}
	return d, nil
}

// deliveryFinishArgs returns the arguments of deliveryFinishSQL for p.
func deliveryFinishArgs(p *lapse.DeliveryFinishParams) ([]any, error) {
	var ev outboxArgs
	for _, e := range p.Outbox {
		if err := ev.add(e.OrderID, []lapse.OutboxEvent{e}); err != nil {
			return nil, err
		}
	}
	var rv lapse.Review
	if p.Review != nil {
		rv = *p.Review
	}
	rec := &p.Record
	return []any{p.ID, p.Attempt, p.Owner, p.Status, p.NextAttemptAt, p.Unknown, p.Error, p.At,
		rec.Worker, rec.StartedAt, rec.Duration.Microseconds(), rec.Outcome, rec.Error,
		p.Review != nil, rv.OrderID, rv.OrderNo, rv.Reason, rv.DeliveryID, rv.CreatedAt,
		ev.orderIDs, ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers,
		p.CutShort}, nil
}

// heldLeasesCTE is k, the leases of l (a CTE of id and attempt) still held
// by $1 under those attempts, locked in id order, so that a renewal and a
// finish of many running side by side never deadlock. Each is found by
// its own primary-key probe, a subquery the planner cannot flatten (it
// locks), run once for each of l's ids in id order: joined as a table
// instead, the deliveries of a young database, whose statistics say it is
// empty, were scanned through the pending index for every id (half a
// second to finish 512, measured in a flash sale). The UPDATE that uses
// k names its rows as an array for the same reason: joined, they were
// found by a scan of the whole table.
const heldLeasesCTE = `k AS (
	SELECT h.id FROM (SELECT id, attempt FROM l ORDER BY id) o CROSS JOIN LATERAL (
		SELECT d.id FROM deliveries d
		WHERE d.id = o.id AND d.attempts = o.attempt AND ` + pendingByKey + ` AND d.lease_owner = $1
		FOR NO KEY UPDATE
	) h
)`

// deliveryDoneManySQL finishes many attempts done in one statement. The
// leases still held are locked as heldLeasesCTE locks them. The attempt
// rows are written for the leases held alone, and the ids of the others
// come back in the order given. A delivery done keeps the next attempt it
// had, as DeliveryFinish's do.
const deliveryDoneManySQL = `WITH l AS (
	SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[])
		WITH ORDINALITY AS l(id, attempt, worker, started_at, duration_us, outcome, n)
), ` + heldLeasesCTE + `, u AS (
	UPDATE deliveries d SET status = 'done', unknown = false, last_error = '', lease_owner = '', lease_until = NULL,
		ended = d.attempts,
		next_attempt_at = GREATEST(d.next_attempt_at, d.lease_until), updated_at = $8, done_at = $8
	WHERE d.id = ANY (ARRAY(SELECT id FROM k))
	RETURNING d.id
), a AS (
	INSERT INTO delivery_attempts (delivery_id, attempt, worker, started_at, duration_us, outcome, error)
	SELECT l.id, l.attempt, l.worker, l.started_at, l.duration_us, l.outcome, '' FROM l JOIN u ON u.id = l.id
)
SELECT l.id FROM l WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.id = l.id) ORDER BY l.n`

// DeliveryDoneMany records, in one statement, every attempt of p.Attempts
// still pending under p.Owner and its attempt as done at p.At, with its
// attempt row, and returns the ids of the rest, whose leases are lost, in
// the order p names them.
func (s *Store) DeliveryDoneMany(ctx context.Context, p *lapse.DeliveryDoneManyParams) ([]int64, error) {
	if len(p.Attempts) == 0 {
		return nil, nil
	}
	n := len(p.Attempts)
	ids, attempts, durations := make([]int64, n), make([]int64, n), make([]int64, n)
	workers, outcomes := make([]string, n), make([]string, n)
	started := make([]time.Time, n)
	for i, a := range p.Attempts {
		ids[i], attempts[i], durations[i] = a.DeliveryID, int64(a.Attempt), a.Duration.Microseconds()
		workers[i], outcomes[i], started[i] = a.Worker, a.Outcome, a.StartedAt
	}
	rows, err := s.db.Query(ctx, deliveryDoneManySQL, planEachRun, p.Owner, ids, attempts, workers, started, durations, outcomes, p.At)
	if err != nil {
		return nil, fmt.Errorf("postgres: finish %d deliveries: %w", n, err)
	}
	lost, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("postgres: finish %d deliveries: %w", n, err)
	}
	return lost, nil
}

// deliveryRenewSQL extends the leases still held by $1 under the attempts
// named, and returns the ids of the others, in the order given. The leases
// are locked as heldLeasesCTE locks them, as DeliveryDoneMany does, so
// that the two never deadlock; a lease is never shortened. Like the claim,
// it leaves next_attempt_at alone: a HOT update.
const deliveryRenewSQL = `WITH l AS (
	SELECT * FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS l(id, attempt, n)
), ` + heldLeasesCTE + `, u AS (
	UPDATE deliveries d SET lease_until = GREATEST(d.lease_until, $4)
	WHERE d.id = ANY (ARRAY(SELECT id FROM k))
	RETURNING d.id
)
SELECT l.id FROM l WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.id = l.id) ORDER BY l.n`

// DeliveryRenew extends, in one statement, the lease of every delivery of
// p.Leases still pending under p.Owner and the attempt named: LeaseUntil
// and NextAttemptAt become p.LeaseUntil unless they are later already. It
// returns the ids of the rest, whose leases are lost, in the order p names
// them; none when p.Leases is empty.
func (s *Store) DeliveryRenew(ctx context.Context, p *lapse.DeliveryRenewParams) ([]int64, error) {
	if len(p.Leases) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(p.Leases))
	attempts := make([]int64, len(p.Leases))
	for i, l := range p.Leases {
		ids[i], attempts[i] = l.ID, int64(l.Attempt)
	}
	rows, err := s.db.Query(ctx, deliveryRenewSQL, planEachRun, p.Owner, ids, attempts, p.LeaseUntil)
	if err != nil {
		return nil, fmt.Errorf("postgres: renew delivery leases: %w", err)
	}
	lost, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("postgres: renew delivery leases: %w", err)
	}
	return lost, nil
}

// deliveryRetrySQL revives a dead delivery. Its unknown flag stays: if its
// last outcome was unknown, the next attempt must still ask first.
const deliveryRetrySQL = `UPDATE deliveries d SET status = 'pending', retry_base = d.attempts, ended = d.attempts, next_attempt_at = $2,
	updated_at = $2
WHERE d.id = $1 AND ` + deadByKey + `
RETURNING ` + deliveryColumns

// DeliveryRetry makes a dead delivery pending again, due at p.At, with
// RetryBase set to its current attempts and Unfinished 0. It returns
// lapse.ErrDeliveryNotFound, or an ECONFLICT error when the delivery is not dead.
func (s *Store) DeliveryRetry(ctx context.Context, p *lapse.DeliveryRetryParams) (*lapse.Delivery, error) {
	d, err := scanDelivery(s.db.QueryRow(ctx, deliveryRetrySQL, p.ID, p.At))
	if err == nil {
		return d, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: retry delivery %d: %w", p.ID, err)
	}
	var status string
	err = s.db.QueryRow(ctx, "SELECT status FROM deliveries WHERE id = $1", p.ID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrDeliveryNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: retry delivery %d: %w", p.ID, err)
	}
	return nil, lapse.Errorf(lapse.ECONFLICT, "delivery %d is %s; only a dead delivery can be retried", p.ID, status)
}

// DeliveryGet returns a delivery, or lapse.ErrDeliveryNotFound.
func (s *Store) DeliveryGet(ctx context.Context, id int64) (*lapse.Delivery, error) {
	d, err := scanDelivery(s.db.QueryRow(ctx, "SELECT "+deliveryColumns+" FROM deliveries d WHERE d.id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrDeliveryNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get delivery %d: %w", id, err)
	}
	return d, nil
}

// DeliveryList returns the deliveries of an order, oldest first.
func (s *Store) DeliveryList(ctx context.Context, orderID int64) ([]*lapse.Delivery, error) {
	rows, err := s.db.Query(ctx, "SELECT "+deliveryColumns+" FROM deliveries d WHERE d.order_id = $1 ORDER BY d.id", orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list deliveries of order %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list deliveries of order %d: %w", orderID, err)
	}
	return out, nil
}

// DeliveryAttemptList returns the attempt rows of an order's deliveries, by
// delivery then attempt.
func (s *Store) DeliveryAttemptList(ctx context.Context, orderID int64) ([]*lapse.DeliveryAttempt, error) {
	rows, err := s.db.Query(ctx, `SELECT a.delivery_id, a.attempt, a.worker, a.started_at, a.duration_us, a.outcome, a.error
		FROM delivery_attempts a JOIN deliveries d ON d.id = a.delivery_id
		WHERE d.order_id = $1 ORDER BY a.delivery_id, a.attempt`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list delivery attempts of order %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.DeliveryAttempt, error) {
		var a lapse.DeliveryAttempt
		var us int64
		if err := row.Scan(&a.DeliveryID, &a.Attempt, &a.Worker, &a.StartedAt, &us, &a.Outcome, &a.Error); err != nil {
			return nil, err
		}
		a.StartedAt, a.Duration = a.StartedAt.UTC(), time.Duration(us)*time.Microsecond
		return &a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list delivery attempts of order %d: %w", orderID, err)
	}
	return out, nil
}

// deliveryCountSQL reads only the partial indexes of pending and dead
// deliveries, and the pending rows, so it costs the size of the backlogs,
// not of the history. A pending delivery's next attempt is that of
// deliveryColumns.
const deliveryCountSQL = `SELECT
	(SELECT count(*) FROM deliveries WHERE status = 'pending') + (SELECT coalesce(sum(n), 0) FROM (` + relayPendingSQL + `) r),
	(SELECT count(*) FROM deliveries WHERE status = 'dead'),
	(SELECT min(GREATEST(next_attempt_at, lease_until)) FROM deliveries WHERE status = 'pending')`

// relayPendingSQL counts, for each relay's cursor, the events relayed to
// its subscriber that it has not passed: pending deliveries without rows.
// Those of transactions that ended before the oldest one running when lo
// was taken are behind it, so each count reads outbox_relay's key from
// there on, what the relay has yet to read and little more.
const relayPendingSQL = `SELECT c.subscriber, (SELECT count(*) FROM outbox_relay q
		WHERE q.subscriber = c.subscriber AND q.xid >= pg_snapshot_xmin(c.lo) AND NOT q.ahead AND NOT pg_visible_in_snapshot(q.xid, c.lo)
			AND NOT (pg_visible_in_snapshot(q.xid, c.hi) AND (q.xid, q.seq) <= (c.after_xid, c.after_seq))) AS n
	FROM relay_cursors c`

// DeliveryCount counts pending and dead deliveries; events relayed without
// a row and not yet relayed count as pending.
func (s *Store) DeliveryCount(ctx context.Context) (*lapse.DeliveryCounts, error) {
	var c lapse.DeliveryCounts
	if err := s.db.QueryRow(ctx, deliveryCountSQL).Scan(&c.Pending, &c.Dead, &c.OldestPending); err != nil {
		return nil, fmt.Errorf("postgres: count deliveries: %w", err)
	}
	c.OldestPending = utcPtr(c.OldestPending)
	return &c, nil
}

// deliveryCountBySubscriberSQL, like deliveryCountSQL, reads only the
// partial indexes of pending and dead deliveries.
const deliveryCountBySubscriberSQL = `SELECT subscriber, status, sum(n)::bigint FROM (
		SELECT subscriber, status, count(*) AS n FROM deliveries WHERE status = 'pending' GROUP BY subscriber, status
		UNION ALL
		SELECT subscriber, status, count(*) AS n FROM deliveries WHERE status = 'dead' GROUP BY subscriber, status
		UNION ALL
		SELECT subscriber, 'pending', n FROM (` + relayPendingSQL + `) r WHERE n > 0
	) c GROUP BY subscriber, status ORDER BY subscriber, status`

// DeliveryCountBySubscriber counts pending and dead deliveries per
// subscriber and status, events not yet relayed among the pending.
func (s *Store) DeliveryCountBySubscriber(ctx context.Context) ([]*lapse.DeliveryStatusCount, error) {
	rows, err := s.db.Query(ctx, deliveryCountBySubscriberSQL)
	if err != nil {
		return nil, fmt.Errorf("postgres: count deliveries by subscriber: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.DeliveryStatusCount, error) {
		var c lapse.DeliveryStatusCount
		return &c, row.Scan(&c.Subscriber, &c.Status, &c.N)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: count deliveries by subscriber: %w", err)
	}
	return out, nil
}
