package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/storetest"
)

// TestUpgradeToDeadlineTable starts from the schema the release before the
// deadline table left (migrations up to 0018), with pending, closed and
// paid orders, their log, outbox and deliveries in it, migrates, and checks
// that every pending deadline carried over, that nothing else changed, and
// that the store then claims and closes exactly the due orders.
func TestUpgradeToDeadlineTable(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 18)
	var err error
	ctx := context.Background()
	conn := connect(t, dsn)
	// 1,000 orders: every third due an hour ago, every third due in a day,
	// the rest closed or paid (no deadline); each with its creation log
	// row and event, and one delivery of the event.
	for _, q := range []string{
		`INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, metadata, version,
			created_at, updated_at, closed_at, fired_by, request_hash)
		SELECT 'UP-' || g, 'checkout', CASE g % 3 WHEN 2 THEN (CASE WHEN g % 2 = 0 THEN 'CLOSED' ELSE 'PAID' END) ELSE 'UNPAID' END,
			CASE g % 3 WHEN 0 THEN timestamptz '2026-11-29 11:00:00+00' + g * interval '1 s'
				WHEN 1 THEN timestamptz '2026-11-30 12:00:00+00' + g * interval '1 s' END,
			1999, 'CNY', 'u-' || (g % 10), '[{"sku":"sku-1","qty":1}]', '{"channel":"old"}', CASE g % 3 WHEN 2 THEN 2 ELSE 1 END,
			'2026-11-29 10:00:00+00', '2026-11-29 10:00:00+00',
			CASE WHEN g % 3 = 2 AND g % 2 = 0 THEN timestamptz '2026-11-29 10:30:00+00' END, 'app', md5(g::text)
		FROM generate_series(1, 1000) g`,
		`INSERT INTO transitions (order_id, to_state, event, version, fired_by, actor, created_at)
		SELECT id, 'UNPAID', 'CREATE', 1, 'app', 'old', created_at FROM orders`,
		`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
		SELECT gen_random_uuid(), id, order_no, 'order.created', '{"type":"order.created"}', created_at FROM orders`,
		`INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status, next_attempt_at, created_at, updated_at)
		SELECT id, order_id, order_no, type, 'webhook', 'done', created_at, created_at, created_at FROM outbox`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() []int64 {
		t.Helper()
		var c [4]int64
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM transitions),
			(SELECT count(*) FROM outbox), (SELECT count(*) FROM deliveries)`).Scan(&c[0], &c[1], &c[2], &c[3]); err != nil {
			t.Fatal(err)
		}
		return c[:]
	}
	before := counts()
	var pendingBefore []time.Time
	rows, _ := conn.Query(ctx, "SELECT deadline_at FROM orders WHERE deadline_at IS NOT NULL ORDER BY id")
	if pendingBefore, err = pgx.CollectRows(rows, pgx.RowTo[time.Time]); err != nil {
		t.Fatal(err)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := counts(); !slices.Equal(after, before) {
		t.Fatalf("rows (orders, log, outbox, deliveries) = %v after the upgrade, %v before", after, before)
	}
	rows, _ = conn.Query(ctx, "SELECT d.deadline_at FROM order_deadlines d JOIN orders o ON o.id = d.order_id ORDER BY o.id")
	pendingAfter, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(pendingAfter, pendingBefore, time.Time.Equal) || len(pendingAfter) != 667 {
		t.Fatalf("%d deadline rows after the upgrade, want the %d pending deadlines (667)", len(pendingAfter), len(pendingBefore))
	}
	if n := deadlinesDisagree(t, conn); n != 0 {
		t.Fatalf("%d orders disagree with their deadline rows after the upgrade", n)
	}
	var ff string
	if err := conn.QueryRow(ctx, "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'orders'::regclass").Scan(&ff); err != nil || ff != "fillfactor=50" {
		t.Errorf("orders reloptions = %q, %v; want fillfactor=50", ff, err)
	}
	var fks int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f'
		AND conrelid IN ('transitions'::regclass, 'outbox'::regclass, 'deliveries'::regclass)`).Scan(&fks); err != nil || fks != 0 {
		t.Errorf("%d foreign keys left on the log, outbox and deliveries, %v; want none", fks, err)
	}

	// The store reads the carried-over deadlines: 333 due, then the rest.
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if n, err := s.OrderCountDue(ctx, now); err != nil || n != 333 {
		t.Fatalf("OrderCountDue = %d, %v; want 333", n, err)
	}
	if n := closeDue(t, s, now); n != 333 {
		t.Fatalf("closed %d orders after the upgrade, want 333", n)
	}
	if next, ok, err := s.OrderNextDeadline(ctx, []string{"checkout"}, time.Time{}); err != nil || !ok || !next.After(now) {
		t.Fatalf("OrderNextDeadline = %v, %v, %v; want one after %v", next, ok, err, now)
	}
	if n := deadlinesDisagree(t, conn); n != 0 {
		t.Fatalf("%d orders disagree with their deadline rows after closing", n)
	}
	o, err := s.OrderGet(ctx, "UP-3")
	if err != nil || o.State != "CLOSED" || o.DeadlineAt != nil {
		t.Fatalf("UP-3 after the close = %+v, %v", o, err)
	}
	log, err := s.TransitionList(ctx, o.ID)
	if err != nil || len(log) != 2 || log[1].ToState != "CLOSED" {
		t.Fatalf("log of UP-3 = %d rows, %v; want its creation and its close", len(log), err)
	}
	evs, err := s.OutboxList(ctx, o.ID)
	if err != nil || len(evs) != 2 || evs[1].Type != "order.closed" {
		t.Fatalf("events of UP-3 = %d, %v; want order.created then order.closed", len(evs), err)
	}
}

// TestUpgradeDeliveryWrites starts from the schema before delivery ids were
// drawn in blocks (migrations up to 0021), with chains of deliveries in it:
// each of 200 due orders has a done and then a pending delivery for each of
// two subscribers. It migrates, checks that every delivery is as it was,
// closes the orders with their event fanned out to the two subscribers, and
// checks that each new delivery got an id above every old one and joined
// the end of its order's chain, so that it waits for the pending one
// before it.
func TestUpgradeDeliveryWrites(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 21)
	var err error
	ctx := context.Background()
	conn := connect(t, dsn)
	for _, q := range []string{
		`INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, metadata, version,
			created_at, updated_at, fired_by, request_hash)
		SELECT 'UD-' || g, 'checkout', 'UNPAID', timestamptz '2026-11-29 11:00:00+00' + g * interval '1 s',
			1999, 'CNY', 'u-' || (g % 10), '[{"sku":"sku-1","qty":1}]', '{"channel":"old"}', 1,
			'2026-11-29 10:00:00+00', '2026-11-29 10:00:00+00', 'app', md5(g::text)
		FROM generate_series(1, 200) g`,
		`INSERT INTO order_deadlines (order_id, deadline_at, flow) SELECT id, deadline_at, flow FROM orders`,
		`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
		SELECT gen_random_uuid(), o.id, o.order_no, t, '{}', o.created_at + k * interval '1 s'
		FROM orders o, unnest('{order.created,order.noted}'::text[]) WITH ORDINALITY AS e(t, k)`,
		// The first event's deliveries are done, the second's pending, each
		// chained after the first's, as the store wrote them.
		`INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status, next_attempt_at,
			created_at, updated_at, done_at)
		SELECT x.id, x.order_id, x.order_no, x.type, s, 'done', x.created_at, x.created_at, x.created_at, x.created_at
		FROM outbox x, unnest('{webhook,stock}'::text[]) s WHERE x.type = 'order.created' ORDER BY x.seq, s`,
		`INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status, next_attempt_at,
			created_at, updated_at, after_id)
		SELECT x.id, x.order_id, x.order_no, x.type, s, 'pending', x.created_at, x.created_at, x.created_at,
			(SELECT max(p.id) FROM deliveries p WHERE p.order_id = x.order_id AND p.subscriber = s)
		FROM outbox x, unnest('{webhook,stock}'::text[]) s WHERE x.type = 'order.noted' ORDER BY x.seq, s`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		t.Helper()
		var sum string
		// Without ended, which migration 0034 adds (and sets on the
		// pending ones).
		if err := conn.QueryRow(ctx, `SELECT count(*) || ':' || md5(string_agg((to_jsonb(d) - 'ended')::text, '|' ORDER BY id))
			FROM deliveries d`).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	before := snapshot()
	var oldMax int64
	if err := conn.QueryRow(ctx, "SELECT max(id) FROM deliveries").Scan(&oldMax); err != nil {
		t.Fatal(err)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before || !strings.HasPrefix(after, "800:") {
		t.Fatalf("deliveries after the upgrade = %s, before %s; want the 800 unchanged", after, before)
	}
	var def string
	if err := conn.QueryRow(ctx, "SELECT pg_get_indexdef('deliveries_order_idx'::regclass)").Scan(&def); err != nil ||
		!strings.HasSuffix(def, "(order_id, subscriber, id)") {
		t.Errorf("deliveries_order_idx = %q, %v; want it on (order_id, subscriber, id)", def, err)
	}
	// The store numbers a statement's deliveries within the blocks it draws:
	// an identity that drew smaller steps would hand the next statement ids
	// that this one took.
	var step int64
	// Read by the sequence's oid: a cast of every sequence's name in
	// pg_sequences would fail on another test's schema dropped meanwhile.
	if err := conn.QueryRow(ctx, `SELECT seqincrement FROM pg_sequence
		WHERE seqrelid = pg_get_serial_sequence('deliveries', 'id')::regclass`).Scan(&step); err != nil || step != 1024 {
		t.Errorf("the identity of deliveries increments by %d, %v; want 1024", step, err)
	}

	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var moved []int64
	err = s.Tx(ctx, func(tx lapse.Store) error {
		due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{"checkout"}, Limit: 1000})
		if err != nil {
			return err
		}
		var ps []*lapse.OrderTransitionParams
		for _, o := range due {
			closed := *o
			closed.State, closed.DeadlineAt, closed.ClosedAt, closed.Version = flows.Closed, nil, &now, o.Version+1
			ev := lapse.NewOutboxEvent(flows.EventOrderClosed, &closed, nil)
			ev.Subscribers = []string{"webhook", "stock"}
			ps = append(ps, &lapse.OrderTransitionParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
				ToState: flows.Closed, Event: flows.Timeout, ClosedAt: &now, CloseReason: "TIMEOUT", FiredBy: lapse.FiredByTimer,
				At: now, ClosedDeadlineAt: o.DeadlineAt, Outbox: []lapse.OutboxEvent{ev}})
		}
		moved, err = tx.OrderTransitionMany(ctx, ps)
		return err
	})
	if err != nil || len(moved) != 200 {
		t.Fatalf("closed %d orders after the upgrade, %v; want 200", len(moved), err)
	}
	// Each new delivery: above every old id, after the old pending one of
	// its order and subscriber.
	var n, wrong int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE d.id <= $1 OR d.after_id IS DISTINCT FROM (
			SELECT p.id FROM deliveries p
			WHERE p.order_id = d.order_id AND p.subscriber = d.subscriber AND p.status = 'pending' AND p.id <= $1))
		FROM deliveries d WHERE d.event_type = 'order.closed'`, oldMax).Scan(&n, &wrong); err != nil {
		t.Fatal(err)
	}
	if n != 400 || wrong != 0 {
		t.Fatalf("%d new deliveries, %d of them not chained after their old pending one; want 400, none", n, wrong)
	}
	// The claim hands out the old pending deliveries and holds the new.
	got, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Subscribers: []string{"webhook"}, Limit: 1000,
		Owner: "w", LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(got) != 200 {
		t.Fatalf("claimed %d deliveries, %v; want the 200 old pending ones", len(got), err)
	}
	for _, d := range got {
		if d.EventType != "order.noted" {
			t.Fatalf("claimed %s delivery %d before the pending one before it", d.EventType, d.ID)
		}
	}
}

// TestUpgradeDeliveryHOT starts from the schema before leases were HOT
// updates (migrations up to 0022), with deliveries of every kind in it:
// done and dead ones with their attempt rows, pending ones due, and
// pending ones leased as claims then leased them, with next_attempt_at
// moved to the end of the lease. It migrates, checks that no row changed,
// that the schema is 0023's, and that the store reads and claims the old
// rows as it did: a lease taken before the upgrade still keeps its
// delivery from other workers until it ends.
func TestUpgradeDeliveryHOT(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 22)
	ctx := context.Background()
	conn := connect(t, dsn)
	dropStandIn := relayStandIn(t, conn)
	// 400 events, one delivery each: g % 4 = 0 done, 1 dead, 2 pending and
	// due at 11:00, 3 pending and leased by "old" until 12:05.
	for _, q := range []string{
		`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
		SELECT gen_random_uuid(), g, 'UH-' || g, 'order.closed', '{}', timestamptz '2026-11-29 10:00:00+00' + g * interval '1 s'
		FROM generate_series(1, 400) g`,
		`INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status, attempts, next_attempt_at,
			lease_owner, lease_until, last_error, created_at, updated_at, done_at)
		SELECT x.id, x.order_id, x.order_no, x.type, 'nats',
			(ARRAY['done', 'dead', 'pending', 'pending'])[x.order_id % 4 + 1],
			CASE x.order_id % 4 WHEN 0 THEN 1 WHEN 1 THEN 5 WHEN 2 THEN 0 ELSE 1 END,
			CASE x.order_id % 4 WHEN 3 THEN timestamptz '2026-11-29 12:05:00+00' ELSE timestamptz '2026-11-29 11:00:00+00' END,
			CASE x.order_id % 4 WHEN 3 THEN 'old' ELSE '' END,
			CASE x.order_id % 4 WHEN 3 THEN timestamptz '2026-11-29 12:05:00+00' END,
			CASE x.order_id % 4 WHEN 1 THEN 'HTTP 500' ELSE '' END,
			x.created_at, x.created_at, CASE x.order_id % 4 WHEN 0 THEN x.created_at END
		FROM outbox x ORDER BY x.seq`,
		`INSERT INTO delivery_attempts (delivery_id, attempt, worker, started_at, duration_us, outcome, error)
		SELECT d.id, a, 'old', d.created_at, 1000, CASE d.status WHEN 'done' THEN 'ok' ELSE 'error' END,
			CASE d.status WHEN 'done' THEN '' ELSE 'HTTP 500' END
		FROM deliveries d, generate_series(1, d.attempts) a WHERE d.status IN ('done', 'dead')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		t.Helper()
		var sum string
		// The deliveries without ended, which migration 0034 adds (and
		// sets on the pending ones).
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) || ':' || md5(string_agg((to_jsonb(d) - 'ended')::text, '|' ORDER BY id)) FROM deliveries d)
			|| ' ' || (SELECT count(*) || ':' || md5(string_agg(a::text, '|' ORDER BY delivery_id, attempt)) FROM delivery_attempts a)`).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	before := snapshot()
	countsBefore, err := s.DeliveryCount(ctx)
	if err != nil {
		t.Fatal(err)
	}

	dropStandIn()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before || !strings.HasPrefix(after, "400:") || !strings.Contains(after, " 600:") {
		t.Fatalf("deliveries and attempts after the upgrade = %s, before %s; want the 400 and 600 unchanged", after, before)
	}
	var def, opts string
	var keys int
	if err := conn.QueryRow(ctx, `SELECT pg_get_indexdef('deliveries_dead_idx'::regclass),
		array_to_string((SELECT reloptions FROM pg_class WHERE oid = 'deliveries'::regclass), ','),
		(SELECT count(*) FROM pg_constraint WHERE conrelid = 'delivery_attempts'::regclass AND contype = 'f')`).Scan(&def, &opts, &keys); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(def, "(subscriber) WHERE (status = 'dead'::text)") || opts != "fillfactor=50" || keys != 0 {
		t.Errorf("after the upgrade: deliveries_dead_idx %q, deliveries options %q, %d foreign keys on delivery_attempts; want it on (subscriber) of the dead, fillfactor=50, none",
			def, opts, keys)
	}
	countsAfter, err := s.DeliveryCount(ctx)
	if err != nil || countsAfter.Pending != 200 || countsAfter.Dead != 100 || !countsAfter.OldestPending.Equal(*countsBefore.OldestPending) {
		t.Errorf("DeliveryCount = %+v, %v after the upgrade, %+v before; want 200 pending, 100 dead, the same oldest", countsAfter, err, countsBefore)
	}
	leaseEnd := time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC)
	old, err := s.DeliveryList(ctx, 3)
	if err != nil || len(old) != 1 || !old[0].NextAttemptAt.Equal(leaseEnd) || old[0].LeaseOwner != "old" {
		t.Fatalf("a delivery leased before the upgrade reads %+v, %v; want it leased by old, next attempt at %v", old, err, leaseEnd)
	}

	// Before the old leases end, a claim takes the 100 due ones alone; at
	// their end, it takes the old leases over.
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	due, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Subscribers: []string{"nats"}, Limit: 1000, Owner: "new", LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(due) != 100 {
		t.Fatalf("claimed %d deliveries, %v; want the 100 due and not leased", len(due), err)
	}
	for _, d := range due {
		if d.OrderID%4 != 2 || d.Attempts != 1 || !d.NextAttemptAt.Equal(now.Add(time.Minute)) {
			t.Fatalf("claimed %+v; want the deliveries due, at their first attempt, next due at the lease's end", d)
		}
	}
	taken, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: leaseEnd, Subscribers: []string{"nats"}, Limit: 1000, Owner: "new",
		LeaseUntil: leaseEnd.Add(time.Minute)})
	if err != nil || len(taken) != 200 {
		t.Fatalf("claimed %d deliveries at the old leases' end, %v; want those 100 and the 100 new leases, ended too", len(taken), err)
	}
	// An attempt row is still written with its finish, without the key.
	d := taken[0]
	lost, err := s.DeliveryDoneMany(ctx, &lapse.DeliveryDoneManyParams{Owner: "new", At: leaseEnd,
		Attempts: []lapse.DeliveryAttempt{{DeliveryID: d.ID, Attempt: d.Attempts, Worker: "new", StartedAt: leaseEnd, Outcome: lapse.OutcomeOK}}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("DeliveryDoneMany = %v, %v", lost, err)
	}
	atts, err := s.DeliveryAttemptList(ctx, d.OrderID)
	if err != nil || len(atts) != 1 || atts[0].Attempt != d.Attempts || atts[0].Outcome != lapse.OutcomeOK {
		t.Errorf("attempts of order %d = %+v, %v; want its one attempt, ok", d.OrderID, atts, err)
	}
	done, err := s.DeliveryGet(ctx, d.ID)
	if err != nil || done.Status != lapse.DeliveryDone || !done.NextAttemptAt.Equal(leaseEnd.Add(time.Minute)) || done.LeaseUntil != nil {
		t.Errorf("the delivery done reads %+v, %v; want done, its next attempt kept at its lease's end", done, err)
	}
}

// TestUpgradeOutboxPartitions starts from the schema before the outbox was
// partitioned (migrations up to 0024), with events in it: UUIDv7 ids of the
// past, one an hour ahead (a clock that runs fast), and version 4 ids, each
// with a delivery, most of them done. It migrates and checks that every
// event is there as it was, the old ones in outbox_before and the rest in
// outbox_default; that the day partitions begin after the event ahead;
// that new events take the next sequence numbers and their day's
// partition; that an old id still exists (lapse.ErrEventExists); that a
// pending delivery of an old event is claimed with it; and that a pass of
// the pruner deletes the old events whose deliveries are done.
func TestUpgradeOutboxPartitions(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 24)
	ctx := context.Background()
	conn := connect(t, dsn)
	// 300 past events (two days ago, a second apart), one an hour ahead,
	// 40 of version 4, of orders that are not there; a delivery each, every
	// tenth pending.
	v7 := `(lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text), 4, 15))::uuid`
	for _, q := range []string{
		`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
		SELECT ` + v7 + `, 1000000 + g, 'UO-' || g, 'order.created', json_build_object('n', g), at
		FROM generate_series(1, 300) g, LATERAL (SELECT now() - interval '2 days' + g * interval '1 s' AS at) t`,
		`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
		SELECT ` + v7 + `, 1000000 + g, 'UO-' || g, 'order.created', json_build_object('n', g), at
		FROM generate_series(301, 301) g, LATERAL (SELECT now() + interval '1 hour' AS at) t`,
		`INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
		SELECT gen_random_uuid(), 1000000 + g, 'UO-' || g, 'order.created', json_build_object('n', g), now() - interval '2 days'
		FROM generate_series(302, 341) g`,
		`INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status, next_attempt_at, created_at, updated_at)
		SELECT id, order_id, order_no, type, 'webhook', CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'done' END,
			created_at, created_at, created_at FROM outbox, LATERAL (SELECT order_id - 1000000 AS g) n`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		t.Helper()
		var sum string
		if err := conn.QueryRow(ctx, `SELECT count(*) || ':' || md5(string_agg(format('%s %s %s %s %s %s %s', seq, id, order_id, order_no, type, payload, created_at), '|' ORDER BY seq))
			FROM outbox`).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	was := snapshot()
	var maxSeq int64
	var ahead, oldID, v4 string
	if err := conn.QueryRow(ctx, `SELECT (SELECT max(seq) FROM outbox), (SELECT id::text FROM outbox WHERE order_id = 1000301),
		(SELECT id::text FROM outbox WHERE order_id = 1000007), (SELECT id::text FROM outbox WHERE order_id = 1000302)`).Scan(&maxSeq, &ahead, &oldID, &v4); err != nil {
		t.Fatal(err)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if now := snapshot(); now != was || !strings.HasPrefix(now, "341:") {
		t.Fatalf("events after the upgrade = %s, before %s", now, was)
	}
	var homes string
	if err := conn.QueryRow(ctx, `SELECT string_agg(h || ' ' || n, ', ' ORDER BY h) FROM (
		SELECT tableoid::regclass::text AS h, count(*) AS n FROM outbox WHERE order_id <= 1000301 GROUP BY 1) x`).Scan(&homes); err != nil {
		t.Fatal(err)
	}
	if homes != "outbox_before 300, outbox_default 1" {
		t.Errorf("the v7 events after the upgrade: %s, want the 300 past ones in outbox_before and the one ahead in outbox_default", homes)
	}
	var strays int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE order_id > 1000301 AND tableoid NOT IN ('outbox_before'::regclass, 'outbox_default'::regclass)`).Scan(&strays); err != nil || strays != 0 {
		t.Errorf("version 4 events outside outbox_before and outbox_default: %d, %v", strays, err)
	}
	var first string
	if err := conn.QueryRow(ctx, `SELECT min(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([0-9a-f-]+)''\)'))
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'outbox'::regclass AND c.relname LIKE 'outbox_d2%'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first <= ahead {
		t.Errorf("the first day partition begins at %s, not after the event ahead (%s) in the default", first, ahead)
	}

	later := time.Now().Add(3 * time.Hour)
	p := createParams("UO-new", nil, later)
	o, _, err := s.OrderCreate(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.OutboxList(ctx, o.ID)
	if err != nil || len(evs) != 1 || evs[0].Seq <= maxSeq {
		t.Fatalf("the new event: %+v, %v; want its seq after %d", evs, err, maxSeq)
	}
	if home := eventHome(t, conn, evs[0].ID); home != dayPartition(later) {
		t.Errorf("the new event is in %s, want %s", home, dayPartition(later))
	}
	for _, id := range []string{oldID, v4, ahead} {
		again := createParams("UO-again", nil, later)
		again.Outbox[0].ID = id
		if _, _, err := s.OrderCreate(ctx, again); !errors.Is(err, lapse.ErrEventExists) {
			t.Errorf("an event id from before the upgrade, %s: %v, want ErrEventExists", id, err)
		}
	}
	now := time.Now()
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: now.Add(time.Minute), Subscribers: []string{"webhook"}, Limit: 100})
	if err != nil || len(ds) != 34 {
		t.Fatalf("claimed %d deliveries after the upgrade, %v; want the 34 pending", len(ds), err)
	}
	for _, d := range ds {
		if d.Event == nil || string(d.Event.Payload) != fmt.Sprintf(`{"n" : %d}`, d.OrderID-1000000) {
			t.Fatalf("a delivery claimed after the upgrade: %+v", d)
		}
	}
	if n := prunePass(t, s, now.Add(-time.Hour), now); n != 300+40-30-4 {
		t.Errorf("a pass after the upgrade deleted %d events, want the %d past ones whose deliveries are done", n, 300+40-30-4)
	}
}

// storeAt opens a store on a schema of its own, migrated up to version only,
// as a database that release left, and returns it with the schema's DSN.
// relayStandIn makes, in a schema before migration 0027, empty stand-ins
// of the tables today's statements name (every write of events names
// outbox_relay, DeliveryCount relay_cursors, every write of a payment
// held_payments, of 0032), so that a test can write and count its old
// data through the store; the returned function drops them, before the
// upgrade makes the real ones.
func relayStandIn(t *testing.T, conn *pgx.Conn) (drop func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox_relay (subscriber text, xid xid8 DEFAULT pg_current_xact_id(), seq bigint,
		order_id bigint, event_id uuid, ahead bool DEFAULT false);
		CREATE TABLE relay_cursors (subscriber text, lo pg_snapshot, hi pg_snapshot, after_xid xid8, after_seq bigint);
		CREATE TABLE held_payments (provider text, txn_id text, order_no text, amount bigint, currency text, status text)`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := conn.Exec(ctx, `DROP TABLE outbox_relay, relay_cursors, held_payments`); err != nil {
			t.Fatal(err)
		}
	}
}

func storeAt(t *testing.T, version int64) (*postgres.Store, string) {
	t.Helper()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.MigrateTo(ctx, version); err != nil {
		t.Fatal(err)
	}
	return s, dsn
}

// TestUpgradeReviewOnce starts from the schema before 0030, writes reviews
// as an earlier Lapse could, open duplicates among them, and migrates: the
// duplicates are resolved, one of each stays open
// (storetest.RunReviewOnceUpgrade).
func TestUpgradeReviewOnce(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 29)
	ctx := context.Background()
	conn := connect(t, dsn)
	storetest.RunReviewOnceUpgrade(t, s, func(r *lapse.Review) {
		if _, err := conn.Exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at, resolved_at, resolved_by)
			VALUES ($1, $2, $3, nullif($4::bigint, 0), $5, $6, $7)`,
			r.OrderID, r.OrderNo, r.Reason, r.DeliveryID, r.CreatedAt, r.ResolvedAt, r.ResolvedBy); err != nil {
			t.Fatal(err)
		}
	}, func() error { return s.Migrate(ctx) })
}
