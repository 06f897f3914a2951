package mysql

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// outboxPruneSQL reads the outbox on from a seq, in seq order (the
// clustered primary key), up to a limit, and says of each event whether it
// may go: created before the cut-off, with no delivery that is not done, of
// an order with no review. It locks the events it returns and skips those
// that another transaction holds (another pruner's, or new ones not yet
// committed), so that pruners take disjoint steps. FORCE INDEX holds it to
// the primary key: a read of the table sorted after would lock every event
// after the seq, not the limit's. The subqueries are plain reads,
// which lock nothing and skip nothing: a locking clause does not reach into
// a subquery. A delivery read done stays done, and no delivery is added to
// an event once it is written. Its arguments are the cut-off, the seq and
// the limit.
const outboxPruneSQL = `SELECT x.seq, x.created_at < ?
		AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = x.id AND d.status <> 'done')
		AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.order_id = x.order_id)
	FROM outbox x FORCE INDEX (PRIMARY) WHERE x.seq > ? ORDER BY x.seq LIMIT ?
	FOR UPDATE SKIP LOCKED`

// The deletes of the events whose seqs are their argument, a JSON array, and
// of what hangs from them, in the order that delivery_attempts_delivery_fk
// needs (deliveries_event_fk is gone, 0019). InnoDB locks every row that a
// DELETE reads, before its WHERE is tested: a DELETE that scanned a table
// would wait for the rows of every other pruner's step, which deadlocks
// them, and MariaDB plans a DELETE … WHERE seq IN (…) on a small table as a
// scan, FORCE INDEX or not. So each is a join from the seqs, which are no
// table's rows, in the order written (STRAIGHT_JOIN), to each table by key;
// FORCE INDEX keeps the optimizer off a scan of an inner table.
const (
	outboxPruneFrom = `FROM JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) k
		STRAIGHT_JOIN outbox x FORCE INDEX (PRIMARY) ON x.seq = k.seq`
	outboxPruneDeliveries = outboxPruneFrom + `
		STRAIGHT_JOIN deliveries d FORCE INDEX (deliveries_event_subscriber_key) ON d.event_id = x.id`

	outboxPruneAttemptsSQL = `DELETE a ` + outboxPruneDeliveries + `
		STRAIGHT_JOIN delivery_attempts a FORCE INDEX (PRIMARY) ON a.delivery_id = d.id`
	outboxPruneEffectsSQL = `DELETE f ` + outboxPruneDeliveries + `
		STRAIGHT_JOIN effects f FORCE INDEX (PRIMARY) ON f.consumer = d.subscriber AND f.event_id = d.event_id`
	outboxPruneDeliveriesSQL = `DELETE d ` + outboxPruneDeliveries
	outboxPruneEventsSQL     = `DELETE x ` + outboxPruneFrom
)

// OutboxPrune deletes the events of a step of a pass (see lapse.Store) with
// their attempt rows, effect rows and deliveries, in one transaction (inside
// Tx, a savepoint of the caller's). It locks the events first, then what
// hangs from them. No delivery worker locks an event, and the deliveries
// that workers lock are pending ones, which a pruner reads without locking
// and leaves.
//
// The position is the seq. SKIP LOCKED leaves out the events that other
// transactions hold without counting them against the limit, so a step that
// returns fewer than p.Limit events has read the outbox to its end, every
// event after p.From that it did not return being held: Next is 0 then, and
// the last seq read otherwise.
func (s *Store) OutboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	type read struct {
		seq  int64
		goes bool
	}
	got, err := write(ctx, s, func(w *Store) (*lapse.OutboxPruned, error) {
		evs, err := queryAll(ctx, w, func(r scanner) (read, error) {
			var e read
			err := r.Scan(&e.seq, &e.goes)
			return e, err
		}, outboxPruneSQL, column.Micros(p.Before), p.From, p.Limit)
		if err != nil {
			return nil, err
		}
		got := &lapse.OutboxPruned{}
		if len(evs) == p.Limit {
			got.Next = evs[len(evs)-1].seq
		}
		var seqs []int64
		for _, e := range evs {
			if e.goes {
				seqs = append(seqs, e.seq)
			}
		}
		if len(seqs) == 0 {
			return got, nil
		}
		b, _ := json.Marshal(seqs) // int64s always marshal
		arg := string(b)
		for _, q := range []string{outboxPruneAttemptsSQL, outboxPruneEffectsSQL, outboxPruneDeliveriesSQL} {
			if _, err := w.exec(ctx, q, arg); err != nil {
				return nil, err
			}
		}
		res, err := w.exec(ctx, outboxPruneEventsSQL, arg)
		if err != nil {
			return nil, err
		}
		got.Deleted = int(affected(res))
		return got, nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: prune the outbox from %d: %w", p.From, err)
	}
	return got, nil
}
