package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestUpgradeToDeadlineTable starts from the schema the release before the
// deadline table left (migrations up to 0018), with pending, closed and
// paid orders, their log, outbox and deliveries in it, migrates, and checks
// that every pending deadline carried over, that nothing else changed, and
// that the store then claims and closes exactly the due orders.
func TestUpgradeToDeadlineTable(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.MigrateTo(ctx, 18); err != nil {
		t.Fatal(err)
	}
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
	if next, ok, err := s.OrderNextDeadline(ctx, []string{"checkout"}); err != nil || !ok || !next.After(now) {
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
