package sqlite

import (
	"context"
	"encoding/json"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The statements of OutboxPrune. Every one finds its rows by an index: the
// outbox by seq (its rowid), deliveries by event id (the unique key on
// event_id, subscriber), effects by their primary key, reviews by
// reviews_order_idx. The deletes take the ids of the events that go as one
// JSON array, so that each is one statement, prepared once, however many
// events a step deletes.
const (
	// pruneRead reads a step's events and tells of each whether it goes.
	pruneRead = `SELECT o.seq, o.id, o.created_at < ?
			AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = o.id AND d.status <> 'done')
			AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.order_id = o.order_id)
		FROM outbox o WHERE o.seq > ? ORDER BY o.seq LIMIT ?`
	// foreign_keys is on: attempt rows go before their deliveries, and
	// deliveries before their events. The effect rows are found by the
	// deliveries, so they go before them too.
	pruneAttempts = `DELETE FROM delivery_attempts WHERE delivery_id IN
		(SELECT d.id FROM deliveries d WHERE d.event_id IN (SELECT value FROM json_each(?)))`
	pruneEffects = `DELETE FROM effects WHERE (consumer, event_id) IN
		(SELECT d.subscriber, d.event_id FROM deliveries d WHERE d.event_id IN (SELECT value FROM json_each(?)))`
	pruneDeliveries = `DELETE FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?))`
	pruneEvents     = `DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?))`
)

// OutboxPrune deletes, in one transaction (inside Tx, the caller's), the
// events of the outbox after seq p.From, at most p.Limit of them read by
// seq, that were created before p.Before, whose deliveries are all done
// and whose order has no review, with their deliveries' attempt rows and
// effect rows and the deliveries. Next is the last seq read when it read
// p.Limit events. SQLite has one writer, so no event is held by another
// transaction.
func (s *Store) OutboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	var got lapse.OutboxPruned
	err := s.write(ctx, func(w *writeTx) error {
		got = lapse.OutboxPruned{}
		rows, err := w.query(ctx, pruneRead, column.Micros(p.Before), p.From, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		var gone []string
		read, last := 0, int64(0)
		for rows.Next() {
			var id string
			var goes bool
			if err := rows.Scan(&last, &id, &goes); err != nil {
				return err
			}
			read++
			if goes {
				gone = append(gone, id)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if read == p.Limit {
			got.Next = last
		}
		if len(gone) == 0 {
			return nil
		}
		b, err := json.Marshal(gone)
		if err != nil {
			return err
		}
		ids := string(b) // as text: SQLite reads a blob given to json_each as JSONB
		for _, q := range []string{pruneAttempts, pruneEffects, pruneDeliveries} {
			if _, err := w.exec(ctx, q, ids); err != nil {
				return err
			}
		}
		res, err := w.exec(ctx, pruneEvents, ids)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		got.Deleted = int(n)
		return err
	})
	if err != nil {
		return nil, fail(err, "outbox prune from %d", p.From)
	}
	return &got, nil
}
