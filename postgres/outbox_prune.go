package postgres

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
)

// outboxPruneSQL is one step of a pass over the outbox, read in its
// physical order a range of pages at a time ($1 the first page, the step
// as many pages as hold about $3 events by the table's statistics, 8 a
// page without them), as VACUUM reads a table: no index has to order the
// events by age, so that a close, which writes an event, writes no entry
// in one. The events of the range that may go (created before $2, every
// delivery done, an order without a review) are locked, skipping those
// another transaction holds; their attempt rows, effect rows and
// deliveries go with them, each found through its key, and the events
// last. It returns how many went and the page the next step reads on
// from, 0 past the last page.
//
// The statement reads one snapshot: a delivery that another transaction
// finishes meanwhile is seen pending, and its event is left for the next
// pass. A delivery that is done never changes again, and no delivery is
// added to an event that exists, so the check cannot be outrun.
const outboxPruneSQL = `
WITH span AS (
	SELECT pg_relation_size('outbox') / current_setting('block_size')::bigint AS pages,
		greatest(1, ($3 / CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages ELSE 8 END)::bigint) AS step
	FROM pg_class c WHERE c.oid = 'outbox'::regclass
), ev AS (
	SELECT o.ctid, o.id FROM outbox o
	WHERE o.ctid >= format('(%s,0)', $1::bigint)::tid
		AND o.ctid < format('(%s,0)', least($1::bigint + (SELECT step FROM span), 4294967295))::tid
		AND o.created_at < $2
		AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = o.id AND d.status <> 'done')
		AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.order_id = o.order_id)
	FOR UPDATE OF o SKIP LOCKED
), gone_deliveries AS (
	DELETE FROM deliveries d USING ev WHERE d.event_id = ev.id
	RETURNING d.id, d.subscriber, d.event_id
), gone_attempts AS (
	DELETE FROM delivery_attempts a USING gone_deliveries g WHERE a.delivery_id = g.id
), gone_effects AS (
	DELETE FROM effects f USING gone_deliveries g WHERE f.consumer = g.subscriber AND f.event_id = g.event_id::text
), gone AS (
	DELETE FROM outbox o USING ev WHERE o.ctid = ev.ctid
	RETURNING 1
)
SELECT (SELECT count(*) FROM gone), CASE WHEN $1::bigint + step < pages THEN $1::bigint + step ELSE 0 END FROM span`

// OutboxPrune deletes the outbox events of a range of its pages that
// nothing needs any more, with their deliveries, attempts and effects, in
// one statement; positions are page numbers.
func (s *Store) OutboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	var got lapse.OutboxPruned
	if err := s.db.QueryRow(ctx, outboxPruneSQL, p.From, p.Before, p.Limit).Scan(&got.Deleted, &got.Next); err != nil {
		return nil, fmt.Errorf("postgres: prune the outbox from page %d: %w", p.From, err)
	}
	return &got, nil
}
