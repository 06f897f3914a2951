package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
)

// outboxPruneSQL is one step of a pass over one partition of the outbox
// (see outbox_partition.go), named by table, read in its physical order a
// range of pages at a time ($1 the first page, the step as many pages as
// hold about $3 events by the table's statistics, 8 a page without them),
// as VACUUM reads a table: no index has to order the events by age, so
// that a close, which writes an event, writes no entry in one. The events
// of the range that may go (created before $2, every delivery done, an
// order without a review) are locked, skipping those another transaction
// holds; their attempt rows, effect rows and deliveries go with them, each
// found through its key, and the events last. It returns how many went and
// the page the next step reads on from, 0 past the last page.
//
// An event relayed to a subscriber (outbox_relay) stays until the
// subscriber's relay has passed it, and its relay rows go with it.
//
// The statement reads one snapshot: a delivery that another transaction
// finishes meanwhile is seen pending, and its event is left for the next
// pass. A delivery that is done never changes again, and the only delivery
// added to an event that exists is a relay's, written in the transaction
// that moves the relay past it (lapse.Relayer): the snapshot sees both or
// neither, and keeps the event either way, so the check cannot be
// outrun.
func outboxPruneSQL(table string) string {
	return strings.ReplaceAll(`
WITH span AS (
	SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages,
		greatest(1, ($3 / CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages ELSE 8 END)::bigint) AS step
	FROM pg_class c WHERE c.oid = 'TABLE'::regclass
), ev AS (
	SELECT o.ctid, o.id, o.order_id FROM TABLE o
	WHERE o.ctid >= format('(%s,0)', $1::bigint)::tid
		AND o.ctid < format('(%s,0)', least($1::bigint + (SELECT step FROM span), 4294967295))::tid
		AND o.created_at < $2
		AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = o.id AND d.status <> 'done')
		AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.order_id = o.order_id)
		AND NOT EXISTS (SELECT 1 FROM outbox_relay q LEFT JOIN relay_cursors c ON c.subscriber = q.subscriber
			WHERE q.order_id = o.order_id AND q.event_id = o.id AND (c.lo IS NULL OR NOT pg_visible_in_snapshot(q.xid, c.lo)))
	FOR UPDATE OF o SKIP LOCKED
), gone_relays AS (
	DELETE FROM outbox_relay q USING ev WHERE q.order_id = ev.order_id AND q.event_id = ev.id
), gone_deliveries AS (
	DELETE FROM deliveries d USING ev WHERE d.event_id = ev.id
	RETURNING d.id, d.subscriber, d.event_id
), gone_attempts AS (
	DELETE FROM delivery_attempts a USING gone_deliveries g WHERE a.delivery_id = g.id
), gone_effects AS (
	DELETE FROM effects f USING gone_deliveries g WHERE f.consumer = g.subscriber AND f.event_id = g.event_id::text
), gone AS (
	DELETE FROM TABLE o USING ev WHERE o.ctid = ev.ctid
	RETURNING 1
)
SELECT (SELECT count(*) FROM gone), CASE WHEN $1::bigint + step < pages THEN $1::bigint + step ELSE 0 END FROM span`,
		"TABLE", pgx.Identifier{table}.Sanitize())
}

// OutboxPrune reads on through the outbox's partitions from p.From, in the
// order of their keys, a range of pages of one partition a step: a
// position is the partition's key << 32 | the page. A pass begins (From
// 0) by making the partitions of the days ahead of p.Now. A day whose ids
// all lie before p.Before, read to its end, is dropped in a step of its
// own (dropPage): its events that may go went in the steps that read it,
// and those that stay move to outbox_default. An outbox that is not
// partitioned (a schema before migration 0025) is read as one table.
func (s *Store) OutboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	got, err := s.outboxPrune(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("postgres: prune the outbox from %d: %w", p.From, err)
	}
	return got, nil
}

func (s *Store) outboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	if p.From == 0 {
		if err := s.ensureOutboxDays(ctx, p.Now); err != nil {
			return nil, err
		}
	}
	parts, err := outboxParts(ctx, s.db)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		parts = []outboxPart{{name: "outbox", key: keyBefore}}
	}
	key, page := p.From>>32, p.From&dropPage
	i := slices.IndexFunc(parts, func(q outboxPart) bool { return q.key >= key })
	if i < 0 {
		return &lapse.OutboxPruned{}, nil // the partitions after From were dropped meanwhile
	}
	if parts[i].key > key {
		page = 0 // From's partition went
	}
	part := parts[i]
	next := func() int64 {
		if i+1 < len(parts) {
			return parts[i+1].key << 32
		}
		return 0
	}
	if page == dropPage {
		if _, err := s.dropOutboxDay(ctx, part); err != nil {
			return nil, err
		}
		return &lapse.OutboxPruned{Next: next()}, nil
	}
	var got lapse.OutboxPruned
	var nextPage int64
	if err := s.db.QueryRow(ctx, outboxPruneSQL(part.name), page, p.Before, p.Limit).Scan(&got.Deleted, &nextPage); err != nil {
		return nil, err
	}
	switch {
	case nextPage != 0:
		got.Next = part.key<<32 | nextPage
	case part.day && !part.hi.After(p.Before):
		got.Next = part.key<<32 | dropPage
	default:
		got.Next = next()
	}
	return &got, nil
}
