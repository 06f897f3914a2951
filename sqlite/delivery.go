package sqlite

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

// deliveryCols are the columns scanDelivery reads, in its order.
const deliveryCols = `id, event_id, order_id, order_no, event_type, subscriber, status, attempts, retry_base,
	next_attempt_at, lease_owner, lease_until, unknown, last_error, created_at, updated_at, done_at,
	attempts - coalesce(ended, 0)`

// scanDelivery reads a row of deliveryCols.
func scanDelivery(r scanner) (*lapse.Delivery, error) {
	var (
		d                      lapse.Delivery
		next, created, updated int64
		leaseUntil, doneAt     sql.NullInt64
	)
	err := r.Scan(&d.ID, &d.EventID, &d.OrderID, &d.OrderNo, &d.EventType, &d.Subscriber, (*string)(&d.Status),
		&d.Attempts, &d.RetryBase, &next, &d.LeaseOwner, &leaseUntil, &d.Unknown, &d.LastError, &created, &updated,
		&doneAt, &d.Unfinished)
	if err != nil {
		return nil, err
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = column.Time(next), column.Time(created), column.Time(updated)
	d.LeaseUntil, d.DoneAt = column.NullTime(leaseUntil), column.NullTime(doneAt)
	return &d, nil
}

// deliveryDueQuery selects the ids of the due pending deliveries of nsubs
// subscribers, earliest first, leaving out each whose predecessor in its
// order's chain to its subscriber (after_id) is still pending: a subscriber
// sees an order's events in order. Its arguments are the time, the
// subscribers and the limit. status = 'pending' is spelled as in the partial index
// deliveries_due_idx, so that the planner may read it in order and stop at
// the limit.
func deliveryDueQuery(nsubs int) string {
	return `SELECT id FROM deliveries d
		WHERE status = 'pending' AND next_attempt_at <= ? AND subscriber IN (` + marks(nsubs) + `)
			AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.id = d.after_id AND e.status = 'pending')
		ORDER BY next_attempt_at, id LIMIT ?`
}

// DeliveryClaim leases up to p.Limit pending deliveries of p.Subscribers
// that are due at p.Now, earliest first (by next attempt, then id); none when
// p.Limit or p.Subscribers is empty. Each is returned as updated, with
// Attempts and Unfinished incremented, LeaseOwner p.Owner, LeaseUntil and
// NextAttemptAt p.LeaseUntil, UpdatedAt p.Now, and Event loaded.
//
// The selection and the lease are one write transaction, and SQLite has one
// writer: no two claims, in this process or another, lease one delivery
// under the same lease. Inside Tx the claim runs in the caller's transaction.
func (s *Store) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	if p.Limit <= 0 || len(p.Subscribers) == 0 {
		return nil, nil
	}
	var claimed []*lapse.Delivery
	err := s.write(ctx, func(w *writeTx) error {
		args := make([]any, 0, len(p.Subscribers)+2)
		args = append(args, column.Micros(p.Now))
		for _, sub := range p.Subscribers {
			args = append(args, sub)
		}
		args = append(args, p.Limit)
		ids, err := queryAll(ctx, w.tx, scanInt64, deliveryDueQuery(len(p.Subscribers)), args...)
		if err != nil || len(ids) == 0 {
			return err
		}

		until := column.Micros(p.LeaseUntil)
		args = append(args[:0], p.Owner, until, until, column.Micros(p.Now))
		for _, id := range ids {
			args = append(args, id)
		}
		leased, err := queryAll(ctx, w.tx, scanDelivery, `UPDATE deliveries
			SET attempts = attempts + 1, lease_owner = ?, lease_until = ?, next_attempt_at = ?, updated_at = ?
			WHERE id IN (`+marks(len(ids))+`) RETURNING `+deliveryCols, args...)
		if err != nil {
			return err
		}

		args = args[:0]
		for _, d := range leased {
			args = append(args, d.EventID)
		}
		evs, err := queryAll(ctx, w.tx, scanEvent, `SELECT `+outboxCols+` FROM outbox
			WHERE id IN (`+marks(len(args))+`)`, args...)
		if err != nil {
			return err
		}
		byID := make(map[int64]*lapse.Delivery, len(leased))
		for _, d := range leased {
			byID[d.ID] = d
		}
		events := make(map[string]*lapse.OutboxEvent, len(evs))
		for _, ev := range evs {
			events[ev.ID] = ev
		}
		claimed = make([]*lapse.Delivery, len(ids)) // RETURNING has no order: restore the claim's
		for i, id := range ids {
			d := byID[id]
			d.Event = events[d.EventID]
			claimed[i] = d
		}
		return nil
	})
	if err != nil {
		return nil, fail(err, "delivery claim")
	}
	return claimed, nil
}

func scanInt64(r scanner) (int64, error) {
	var n int64
	err := r.Scan(&n)
	return n, err
}

// DeliveryFinish records the outcome of attempt p.Attempt of the delivery
// p.ID leased by p.Owner, in one transaction: its status, Unknown and
// LastError (p.Error) as given; its lease cleared; for done, DoneAt p.At; for
// pending, NextAttemptAt p.NextAttemptAt; Unfinished kept when p.CutShort,
// and 0 otherwise. It writes the attempt row p.Record
// (as attempt p.Attempt of delivery p.ID, whatever Record says), p.Review
// when given, and p.Outbox as events of the delivery's order, fanned out to
// their subscribers. It returns the delivery as updated.
//
// It returns lapse.ErrLeaseLost and writes nothing when the delivery is not
// pending, or its Attempts or LeaseOwner are not p.Attempt and p.Owner: its
// lease ran out and another attempt took it, or it was finished already. A
// status other than done, pending or dead is an EINVALID error.
func (s *Store) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	var next, doneAt any // NULL keeps next_attempt_at, and leaves done_at unset
	switch p.Status {
	case lapse.DeliveryDone:
		doneAt = column.Micros(p.At)
	case lapse.DeliveryPending:
		next = column.Micros(p.NextAttemptAt)
	case lapse.DeliveryDead:
	default:
		return nil, lapse.FieldError("status", "a delivery finishes done, pending or dead, not %q", p.Status)
	}
	var d *lapse.Delivery
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		d, err = scanDelivery(w.tx.QueryRowContext(ctx, `UPDATE deliveries
			SET status = ?, next_attempt_at = coalesce(?, next_attempt_at), unknown = ?, last_error = ?,
				lease_owner = '', lease_until = NULL, updated_at = ?, done_at = ?,
				ended = CASE WHEN ? THEN ended ELSE attempts END
			WHERE id = ? AND status = 'pending' AND attempts = ? AND lease_owner = ?
			RETURNING `+deliveryCols,
			string(p.Status), next, p.Unknown, p.Error, column.Micros(p.At), doneAt, p.CutShort, p.ID, p.Attempt, p.Owner))
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		r := &p.Record
		if _, err := w.tx.ExecContext(ctx, `INSERT INTO delivery_attempts (delivery_id, attempt, worker, started_at,
			duration_us, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.Attempt, r.Worker, column.Micros(r.StartedAt), r.Duration.Microseconds(), r.Outcome, r.Error); err != nil {
			return fmt.Errorf("attempt row: %w", err)
		}
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return err
			}
		}
		return w.outbox(ctx, d.OrderID, p.Outbox)
	})
	if err != nil {
		return nil, fail(err, "delivery %d finish", p.ID)
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
		return nil, fmt.Errorf("sqlite: finish %d deliveries: %w", len(p.Attempts), err)
	}
	return lost, nil
}

// DeliveryRenew extends, in one statement, the lease of every delivery of
// p.Leases that is still pending under p.Owner and the attempt named:
// LeaseUntil and NextAttemptAt become p.LeaseUntil, or stay where they were
// if that is later. It returns the ids of the rest, whose leases are lost,
// in the order p names them; none when p.Leases is empty. The id list leads
// the WHERE clause so that the rows are found by primary key.
func (s *Store) DeliveryRenew(ctx context.Context, p *lapse.DeliveryRenewParams) ([]int64, error) {
	if len(p.Leases) == 0 {
		return nil, nil
	}
	until := column.Micros(p.LeaseUntil)
	args := make([]any, 0, 3+3*len(p.Leases))
	args = append(args, until, until)
	for _, l := range p.Leases {
		args = append(args, l.ID)
	}
	args = append(args, p.Owner)
	for _, l := range p.Leases {
		args = append(args, l.ID, l.Attempt)
	}
	pairs := strings.TrimSuffix(strings.Repeat("(?, ?), ", len(p.Leases)), ", ")
	var held []int64
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		held, err = queryAll(ctx, w.tx, scanInt64, `UPDATE deliveries
			SET lease_until = max(coalesce(lease_until, 0), ?), next_attempt_at = max(coalesce(lease_until, 0), ?)
			WHERE id IN (`+marks(len(p.Leases))+`) AND status = 'pending' AND lease_owner = ?
				AND (id, attempts) IN (VALUES `+pairs+`)
			RETURNING id`, args...)
		return err
	})
	if err != nil {
		return nil, fail(err, "delivery renew")
	}
	return p.Lost(held), nil
}

// DeliveryRetry makes the dead delivery p.ID pending again, due at p.At, with
// RetryBase set to its Attempts so that its schedule starts over, and
// Unfinished 0; its lease
// stays clear, and Unknown and LastError stay as they were, so that an
// unknown outcome is still queried back first. UpdatedAt is p.At too. It
// returns the delivery as updated, lapse.ErrDeliveryNotFound, or an
// ECONFLICT error when the delivery is not dead.
func (s *Store) DeliveryRetry(ctx context.Context, p *lapse.DeliveryRetryParams) (*lapse.Delivery, error) {
	var d *lapse.Delivery
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		d, err = scanDelivery(w.tx.QueryRowContext(ctx, `UPDATE deliveries
			SET status = 'pending', retry_base = attempts, ended = attempts, next_attempt_at = ?, updated_at = ?,
				lease_owner = '', lease_until = NULL
			WHERE id = ? AND status = 'dead'
			RETURNING `+deliveryCols, column.Micros(p.At), column.Micros(p.At), p.ID))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var status string
		err = w.tx.QueryRowContext(ctx, `SELECT status FROM deliveries WHERE id = ?`, p.ID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.ErrDeliveryNotFound
		}
		if err != nil {
			return err
		}
		return lapse.Errorf(lapse.ECONFLICT, "delivery %d is %s; only a dead delivery can be retried", p.ID, status)
	})
	if err != nil {
		return nil, fail(err, "delivery %d retry", p.ID)
	}
	return d, nil
}

// DeliveryGet returns the delivery with id, without its Event, or
// lapse.ErrDeliveryNotFound.
func (s *Store) DeliveryGet(ctx context.Context, id int64) (*lapse.Delivery, error) {
	d, err := scanDelivery(s.db().QueryRowContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.ErrDeliveryNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery get %d: %w", id, err)
	}
	return d, nil
}

// DeliveryList returns the deliveries of the order with id orderID, without
// their Events, oldest (lowest id) first; none when there is no such order.
func (s *Store) DeliveryList(ctx context.Context, orderID int64) ([]*lapse.Delivery, error) {
	ds, err := queryAll(ctx, s.db(), scanDelivery, `SELECT `+deliveryCols+` FROM deliveries
		WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery list %d: %w", orderID, err)
	}
	return ds, nil
}

// DeliveryAttemptList returns the attempt rows of the deliveries of the
// order with id orderID, by delivery id, then attempt.
func (s *Store) DeliveryAttemptList(ctx context.Context, orderID int64) ([]*lapse.DeliveryAttempt, error) {
	as, err := queryAll(ctx, s.db(), scanAttempt, `SELECT a.delivery_id, a.attempt, a.worker, a.started_at,
			a.duration_us, a.outcome, a.error
		FROM deliveries d JOIN delivery_attempts a ON a.delivery_id = d.id
		WHERE d.order_id = ? ORDER BY a.delivery_id, a.attempt`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery attempt list %d: %w", orderID, err)
	}
	return as, nil
}

func scanAttempt(r scanner) (*lapse.DeliveryAttempt, error) {
	var a lapse.DeliveryAttempt
	var started, us int64
	if err := r.Scan(&a.DeliveryID, &a.Attempt, &a.Worker, &started, &us, &a.Outcome, &a.Error); err != nil {
		return nil, err
	}
	a.StartedAt, a.Duration = column.Time(started), time.Duration(us)*time.Microsecond
	return &a, nil
}

// DeliveryCount counts pending and dead deliveries, and finds the earliest
// next attempt of a pending one. It reads only the partial indexes of
// pending and dead deliveries, never the deliveries that are done.
func (s *Store) DeliveryCount(ctx context.Context) (*lapse.DeliveryCounts, error) {
	var c lapse.DeliveryCounts
	var oldest sql.NullInt64
	err := s.db().QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM deliveries WHERE status = 'pending'),
		(SELECT min(next_attempt_at) FROM deliveries WHERE status = 'pending'),
		(SELECT count(*) FROM deliveries WHERE status = 'dead')`).Scan(&c.Pending, &oldest, &c.Dead)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery count: %w", err)
	}
	c.OldestPending = column.NullTime(oldest)
	return &c, nil
}

// DeliveryCountBySubscriber counts pending and dead deliveries per
// subscriber and status, reading only their partial indexes.
func (s *Store) DeliveryCountBySubscriber(ctx context.Context) ([]*lapse.DeliveryStatusCount, error) {
	cs, err := queryAll(ctx, s.db(), scanDeliveryStatusCount, deliveryCountBySubscriberSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery count by subscriber: %w", err)
	}
	return cs, nil
}

const deliveryCountBySubscriberSQL = `SELECT subscriber, status, n FROM (
		SELECT subscriber, status, count(*) AS n FROM deliveries WHERE status = 'pending' GROUP BY subscriber, status
		UNION ALL
		SELECT subscriber, status, count(*) AS n FROM deliveries WHERE status = 'dead' GROUP BY subscriber, status
	) ORDER BY subscriber, status`

func scanDeliveryStatusCount(sc scanner) (*lapse.DeliveryStatusCount, error) {
	var c lapse.DeliveryStatusCount
	if err := sc.Scan(&c.Subscriber, &c.Status, &c.N); err != nil {
		return nil, err
	}
	return &c, nil
}
