package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// Deliveries are created by outbox, with the events they deliver.

// deliveryCols are the columns scanDelivery reads, in its order. Queries
// name the deliveries table d.
const deliveryCols = `d.id, d.event_id, d.order_id, d.order_no, d.event_type, d.subscriber, d.status, d.attempts,
	d.retry_base, d.next_attempt_at, d.lease_owner, d.lease_until, d.unknown, d.last_error, d.created_at,
	d.updated_at, d.done_at, d.attempts - COALESCE(d.ended, 0)`

// deliveryDest returns the scan destinations of deliveryCols, and a func
// that puts the times they read into d.
func deliveryDest(d *lapse.Delivery) ([]any, func()) {
	var (
		next, created, updated int64
		leaseUntil, doneAt     sql.NullInt64
	)
	dest := []any{&d.ID, &d.EventID, &d.OrderID, &d.OrderNo, &d.EventType, &d.Subscriber, (*string)(&d.Status),
		&d.Attempts, &d.RetryBase, &next, &d.LeaseOwner, &leaseUntil, &d.Unknown, &d.LastError, &created, &updated,
		&doneAt, &d.Unfinished}
	return dest, func() {
		d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = column.Time(next), column.Time(created), column.Time(updated)
		d.LeaseUntil, d.DoneAt = column.NullTime(leaseUntil), column.NullTime(doneAt)
	}
}

// scanDelivery reads a row of deliveryCols.
func scanDelivery(r scanner) (*lapse.Delivery, error) {
	var d lapse.Delivery
	dest, times := deliveryDest(&d)
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	times()
	return &d, nil
}

// deliveryClaimSQL picks the due pending deliveries of nsubs subscribers, in
// due order, each only while no earlier delivery (smaller id) of its order
// to its subscriber is pending, so that a subscriber sees an order's events
// in order; that test is one probe of deliveries_pending_order_idx. It locks
// the rows it picks and skips those that other claimers or finishers hold;
// the NOT EXISTS reads without locking. Its arguments are the subscribers,
// the time and the limit. The PostgreSQL and SQLite stores chain each
// delivery to its predecessor instead (after_id), for their planners' sake;
// the rule is the same.
func deliveryClaimSQL(nsubs int) string {
	return `SELECT d.id FROM deliveries d
	WHERE d.status = 'pending' AND d.subscriber IN (` + marks(nsubs) + `) AND d.next_attempt_at <= ?
		AND NOT EXISTS (SELECT 1 FROM deliveries e
			WHERE e.order_id = d.order_id AND e.subscriber = d.subscriber AND e.status = 'pending' AND e.id < d.id)
	ORDER BY d.next_attempt_at, d.id LIMIT ?
	FOR UPDATE SKIP LOCKED`
}

// DeliveryClaim leases up to p.Limit pending deliveries of p.Subscribers
// that are due at p.Now, earliest first (by next attempt, then id). Each is
// returned as updated, with Attempts and Unfinished incremented,
// LeaseOwner p.Owner, LeaseUntil and NextAttemptAt p.LeaseUntil, UpdatedAt
// p.Now, and Event loaded.
//
// The pick, which locks, and the lease are one transaction (inside Tx, a
// savepoint of the caller's): the lease is committed with it, and it, not a row lock, is what
// keeps other workers off the delivery while it runs.
func (s *Store) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	claimed, err := write(ctx, s, func(w *Store) ([]*lapse.Delivery, error) {
		args := append(append(stringArgs(p.Subscribers), column.Micros(p.Now)), p.Limit)
		ids, err := queryAll(ctx, w, scanInt64, deliveryClaimSQL(len(p.Subscribers)), args...)
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		until := column.Micros(p.LeaseUntil)
		if _, err := w.exec(ctx, `UPDATE deliveries SET attempts = attempts + 1, lease_owner = ?, lease_until = ?,
			next_attempt_at = ?, updated_at = ? WHERE id IN (`+marks(len(ids))+`)`,
			append([]any{p.Owner, until, until, column.Micros(p.Now)}, int64Args(ids)...)...); err != nil {
			return nil, err
		}
		leased, err := queryAll(ctx, w, func(r scanner) (*lapse.Delivery, error) {
			var d lapse.Delivery
			var ev lapse.OutboxEvent
			var at int64
			dest, times := deliveryDest(&d)
			if err := r.Scan(append(dest, &ev.Seq, &ev.OrderID, &ev.OrderNo, &ev.Type, &ev.Payload, &at)...); err != nil {
				return nil, err
			}
			times()
			ev.ID, ev.CreatedAt = d.EventID, column.Time(at)
			d.Event = &ev
			return &d, nil
		}, `SELECT `+deliveryCols+`, x.seq, x.order_id, x.order_no, x.type, x.payload, x.created_at
			FROM deliveries d JOIN outbox x ON x.id = d.event_id
			WHERE d.id IN (`+marks(len(ids))+`)`, int64Args(ids)...)
		if err != nil {
			return nil, err
		}
		byID := make(map[int64]*lapse.Delivery, len(leased))
		for _, d := range leased {
			byID[d.ID] = d
		}
		out := make([]*lapse.Delivery, 0, len(ids)) // in the claim's order
		for _, id := range ids {
			if d := byID[id]; d != nil {
				out = append(out, d)
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: claim deliveries: %w", err)
	}
	return claimed, nil
}

// DeliveryFinish records the outcome of attempt p.Attempt of the delivery
// p.ID leased by p.Owner, in one transaction: its status, Unknown and
// LastError (p.Error) as given; its lease cleared; for done, DoneAt p.At; for
// pending, NextAttemptAt p.NextAttemptAt; Unfinished kept when p.CutShort,
// and 0 otherwise. It writes the attempt row p.Record
// (as attempt p.Attempt of delivery p.ID, whatever Record says), p.Review
// when given, and p.Outbox (events of the delivery's order) with their
// deliveries, and returns the delivery as updated.
//
// It returns lapse.ErrLeaseLost and writes nothing when the delivery is not
// pending, or its Attempts or LeaseOwner are not p.Attempt and p.Owner.
func (s *Store) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	at := column.Micros(p.At)
	d, err := write(ctx, s, func(w *Store) (*lapse.Delivery, error) {
		res, err := w.exec(ctx, `UPDATE deliveries SET status = ?,
				next_attempt_at = IF(? = 'pending', ?, next_attempt_at), done_at = IF(? = 'done', ?, NULL),
				`+"`unknown`"+` = ?, last_error = ?, lease_owner = '', lease_until = NULL, updated_at = ?,
				ended = IF(?, ended, attempts)
			WHERE id = ? AND status = 'pending' AND attempts = ? AND lease_owner = ?`,
			string(p.Status), string(p.Status), column.Micros(p.NextAttemptAt), string(p.Status), at,
			p.Unknown, p.Error, at, p.CutShort, p.ID, p.Attempt, p.Owner)
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, lapse.ErrLeaseLost
		}
		r := &p.Record
		if _, err := w.exec(ctx, `INSERT INTO delivery_attempts (delivery_id, attempt, worker, started_at,
			duration_us, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.Attempt, r.Worker, column.Micros(r.StartedAt), r.Duration.Microseconds(), r.Outcome, r.Error); err != nil {
			return nil, fmt.Errorf("attempt row: %w", err)
		}
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return nil, err
			}
		}
		d, err := scanDelivery(w.queryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries d WHERE d.id = ?`, p.ID))
		if err != nil {
			return nil, err
		}
		return d, w.outbox(ctx, appendEvents(nil, d.OrderID, p.Outbox))
	})
	if errors.Is(err, lapse.ErrLeaseLost) {
		return nil, lapse.ErrLeaseLost
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: finish delivery %d attempt %d: %w", p.ID, p.Attempt, err)
	}
	return d, nil
}

// DeliveryDoneMany records every attempt of p.Attempts still pending under
// p.Owner and its attempt as done at p.At, with its attempt row, each as
// DeliveryFinish does, all in one transaction, and returns the ids of the
// rest, whose leases are lost, in the order p names them.
func (s *Store) DeliveryDoneMany(ctx context.Context, p *lapse.DeliveryDoneManyParams) ([]int64, error) {
	if len(p.Attempts) == 0 {
		return nil, nil
	}
	var lost []int64
	err := s.Tx(ctx, func(tx lapse.Store) error {
		lost = lost[:0]
		for _, a := range p.Attempts {
			_, err := tx.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: a.DeliveryID, Owner: p.Owner, Attempt: a.Attempt,
				Status: lapse.DeliveryDone, At: p.At, Record: a})
			switch {
			case errors.Is(err, lapse.ErrLeaseLost):
				lost = append(lost, a.DeliveryID)
			case err != nil:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: finish %d deliveries: %w", len(p.Attempts), err)
	}
	return lost, nil
}

// DeliveryRenew extends the lease of every delivery of p.Leases that is
// still pending under p.Owner and the attempt named: LeaseUntil and
// NextAttemptAt become p.LeaseUntil, or stay where they were if that is
// later. It returns the ids of the rest, whose leases are lost, in the order
// p names them; none when p.Leases is empty.
//
// The update and the read of what it renewed are one transaction (inside
// Tx, a savepoint of the caller's), so that an error extends nothing. The
// read sees the rows the update locked as it left them; a row it did not
// match cannot match afterwards, since a delivery's attempts, the lease
// token, only grow. The id list leads the WHERE clause so that the rows are
// found by primary key.
func (s *Store) DeliveryRenew(ctx context.Context, p *lapse.DeliveryRenewParams) ([]int64, error) {
	if len(p.Leases) == 0 {
		return nil, nil
	}
	ids := make([]any, len(p.Leases))
	pairs := make([]any, 0, 2*len(p.Leases))
	for i, l := range p.Leases {
		ids[i] = l.ID
		pairs = append(pairs, l.ID, l.Attempt)
	}
	held := `id IN (` + marks(len(ids)) + `) AND status = 'pending' AND lease_owner = ?
		AND (id, attempts) IN (` + strings.TrimSuffix(strings.Repeat("(?, ?), ", len(p.Leases)), ", ") + `)`
	args := append(append(ids, p.Owner), pairs...)
	until := column.Micros(p.LeaseUntil)
	renewed, err := write(ctx, s, func(w *Store) ([]int64, error) {
		// Right either way: MySQL assigns left to right, so the second
		// lease_until is the new one; MariaDB's SIMULTANEOUS_ASSIGNMENT
		// reads the old.
		if _, err := w.exec(ctx, `UPDATE deliveries SET lease_until = GREATEST(COALESCE(lease_until, 0), ?),
			next_attempt_at = GREATEST(COALESCE(lease_until, 0), ?) WHERE `+held, append([]any{until, until}, args...)...); err != nil {
			return nil, err
		}
		return queryAll(ctx, w, scanInt64, `SELECT id FROM deliveries WHERE `+held, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: renew delivery leases: %w", err)
	}
	return p.Lost(renewed), nil
}

// DeliveryRetry makes the dead delivery p.ID pending again, due at p.At, with
// RetryBase set to its Attempts so that its schedule starts over, and
// Unfinished 0. Unknown
// and LastError stay as they were, so that an unknown outcome is still
// queried back first. It returns the delivery as updated,
// lapse.ErrDeliveryNotFound, or an ECONFLICT error when the delivery is not
// dead.
func (s *Store) DeliveryRetry(ctx context.Context, p *lapse.DeliveryRetryParams) (*lapse.Delivery, error) {
	d, err := write(ctx, s, func(w *Store) (*lapse.Delivery, error) {
		res, err := w.exec(ctx, `UPDATE deliveries SET status = 'pending', retry_base = attempts, ended = attempts, next_attempt_at = ?,
			updated_at = ? WHERE id = ? AND status = 'dead'`, column.Micros(p.At), column.Micros(p.At), p.ID)
		if err != nil {
			return nil, err
		}
		if affected(res) == 1 {
			return scanDelivery(w.queryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries d WHERE d.id = ?`, p.ID))
		}
		var status string
		err = w.queryRow(ctx, `SELECT status FROM deliveries WHERE id = ?`, p.ID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, lapse.ErrDeliveryNotFound
		}
		if err != nil {
			return nil, err
		}
		return nil, lapse.Errorf(lapse.ECONFLICT, "delivery %d is %s; only a dead delivery can be retried", p.ID, status)
	})
	if err != nil {
		return nil, fail(err, "retry delivery %d", p.ID)
	}
	return d, nil
}

// DeliveryGet returns the delivery with id, without its Event, or
// lapse.ErrDeliveryNotFound.
func (s *Store) DeliveryGet(ctx context.Context, id int64) (*lapse.Delivery, error) {
	d, err := scanDelivery(s.queryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries d WHERE d.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.ErrDeliveryNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get delivery %d: %w", id, err)
	}
	return d, nil
}

// DeliveryList returns the deliveries of the order with id orderID, without
// their Events, oldest (lowest id) first.
func (s *Store) DeliveryList(ctx context.Context, orderID int64) ([]*lapse.Delivery, error) {
	ds, err := queryAll(ctx, s, scanDelivery, `SELECT `+deliveryCols+` FROM deliveries d WHERE d.order_id = ? ORDER BY d.id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list deliveries of order %d: %w", orderID, err)
	}
	return ds, nil
}

// DeliveryAttemptList returns the attempt rows of the deliveries of the
// order with id orderID, by delivery id, then attempt.
func (s *Store) DeliveryAttemptList(ctx context.Context, orderID int64) ([]*lapse.DeliveryAttempt, error) {
	as, err := queryAll(ctx, s, func(r scanner) (*lapse.DeliveryAttempt, error) {
		var a lapse.DeliveryAttempt
		var started, us int64
		if err := r.Scan(&a.DeliveryID, &a.Attempt, &a.Worker, &started, &us, &a.Outcome, &a.Error); err != nil {
			return nil, err
		}
		a.StartedAt, a.Duration = column.Time(started), time.Duration(us)*time.Microsecond
		return &a, nil
	}, `SELECT a.delivery_id, a.attempt, a.worker, a.started_at, a.duration_us, a.outcome, a.error
		FROM deliveries d JOIN delivery_attempts a ON a.delivery_id = d.id
		WHERE d.order_id = ? ORDER BY a.delivery_id, a.attempt`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list delivery attempts of order %d: %w", orderID, err)
	}
	return as, nil
}

// deliveryCountSQL reads the ranges of pending and dead deliveries in the
// indexes that lead with status, so it costs the size of the backlogs, not
// of the history.
const deliveryCountSQL = `SELECT
	(SELECT count(*) FROM deliveries WHERE status = 'pending'),
	(SELECT count(*) FROM deliveries WHERE status = 'dead'),
	(SELECT min(next_attempt_at) FROM deliveries WHERE status = 'pending')`

// DeliveryCount counts pending and dead deliveries, and finds the earliest
// next attempt of a pending one.
func (s *Store) DeliveryCount(ctx context.Context) (*lapse.DeliveryCounts, error) {
	var c lapse.DeliveryCounts
	var oldest sql.NullInt64
	if err := s.queryRow(ctx, deliveryCountSQL).Scan(&c.Pending, &c.Dead, &oldest); err != nil {
		return nil, fmt.Errorf("mysql: count deliveries: %w", err)
	}
	c.OldestPending = column.NullTime(oldest)
	return &c, nil
}

// DeliveryCountBySubscriber counts pending and dead deliveries per
// subscriber and status, reading the ranges of the indexes that lead with
// status.
func (s *Store) DeliveryCountBySubscriber(ctx context.Context) ([]*lapse.DeliveryStatusCount, error) {
	cs, err := queryAll(ctx, s, scanDeliveryStatusCount, `SELECT subscriber, status, n FROM (
		SELECT subscriber, status, count(*) AS n FROM deliveries WHERE status = 'pending' GROUP BY subscriber, status
		UNION ALL
		SELECT subscriber, status, count(*) AS n FROM deliveries WHERE status = 'dead' GROUP BY subscriber, status
	) AS c ORDER BY subscriber, status`)
	if err != nil {
		return nil, fmt.Errorf("mysql: count deliveries by subscriber: %w", err)
	}
	return cs, nil
}

func scanDeliveryStatusCount(sc scanner) (*lapse.DeliveryStatusCount, error) {
	var c lapse.DeliveryStatusCount
	if err := sc.Scan(&c.Subscriber, &c.Status, &c.N); err != nil {
		return nil, err
	}
	return &c, nil
}
