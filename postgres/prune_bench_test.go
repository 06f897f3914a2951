package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// pruneFill is an outbox of 200,000 events of 200,000 orders, each with a
// delivery (1 in 100 pending, the others done, each with its attempt row
// and effect row), a millisecond apart, the newest at {{at}}. Their ids
// are {{id}}: version 4 (gen_random_uuid(), in outbox_default and
// outbox_before, which the pruner reads row by row) or version 7 of their
// time (in the partition of their day).
const pruneFill = `
TRUNCATE outbox, deliveries, delivery_attempts, effects;
INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
SELECT {{id}}, g, 'PB-' || g, 'order.closed', json_build_object('order', json_build_object('order_no', 'PB-' || g, 'pad', repeat('x', 600))), at
FROM generate_series(1, 200000) g, LATERAL (SELECT {{at}} - g * interval '1 ms' AS at) t;
INSERT INTO deliveries (event_id, order_id, order_no, event_type, subscriber, status, next_attempt_at, created_at, updated_at)
SELECT id, order_id, order_no, type, 'stock', CASE WHEN order_id % 100 = 0 THEN 'pending' ELSE 'done' END, created_at, created_at, created_at FROM outbox;
INSERT INTO delivery_attempts (delivery_id, attempt, started_at, outcome) SELECT id, 1, created_at, 'ok' FROM deliveries WHERE status = 'done';
INSERT INTO effects (consumer, event_id, created_at) SELECT 'stock', event_id::text, created_at FROM deliveries WHERE status = 'done';
`

// BenchmarkOutboxPrune is one pass of the outbox's pruner over 200,000
// events, in steps of 500 and of 4,000 events (the engine's pruner starts at
// 500 and grows its steps up to 4,000 while they are quick): "old", every
// event past the retention (99 % of them go, with their deliveries,
// attempts and effects); "young", none past it, the pass of a pruner that
// finds nothing to do, which reads the whole outbox all the same. It
// reports the time per event read. "day": the events are those of one
// day's partition, every one past the retention (Before and Now moved on
// by days), which the pass reads, deleting 99 % as "old", and then drops,
// moving the pending 1 % to outbox_default. It reports too the outbox's
// heap left after the pass, before any VACUUM: the pages of the deleted
// rows, which a pass that deletes leaves and one that drops does not.
func BenchmarkOutboxPrune(b *testing.B) {
	for _, c := range []struct {
		name string
		age  string
		gone int
		step int
	}{
		{"old/500", "8 days", 198_000, 500}, {"old/4000", "8 days", 198_000, 4000},
		{"young/500", "1 hour", 0, 500}, {"young/4000", "1 hour", 0, 4000},
		{"day/500", "", 198_000, 500}, {"day/4000", "", 198_000, 4000},
	} {
		b.Run(c.name, func(b *testing.B) {
			dsn := testenv.PostgresSchema(b)
			s := openStore(b, dsn, postgres.Config{})
			conn := connect(b, dsn)
			ctx := context.Background()
			now := time.Now()
			before := now.Add(-7 * 24 * time.Hour)
			var left int64
			id, at := "gen_random_uuid()", "now() - interval '"+c.age+"'"
			for k := 0; b.Loop(); k++ {
				b.StopTimer()
				if c.age == "" {
					// The end of a day ahead whose partition exists (the
					// pass before made it), and a pass a week after it.
					day := time.Now().UTC().Truncate(24 * time.Hour).Add(time.Duration(2+9*k) * 24 * time.Hour)
					before, now = day.Add(time.Hour), day.Add(7*24*time.Hour+time.Hour)
					id = "(lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text), 4, 15))::uuid"
					at = "timestamptz '" + day.Add(-time.Millisecond).Format(time.RFC3339Nano) + "'"
				}
				fill := strings.NewReplacer("{{id}}", id, "{{at}}", at).Replace(pruneFill)
				for _, q := range []string{fill, "VACUUM ANALYZE outbox, deliveries, delivery_attempts, effects"} {
					if _, err := conn.Exec(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				deleted, from := 0, int64(0)
				for {
					got, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: before, Now: now, From: from, Limit: c.step})
					if err != nil {
						b.Fatal(err)
					}
					deleted += got.Deleted
					if from = got.Next; from == 0 {
						break
					}
				}
				if deleted != c.gone {
					b.Fatalf("a pass deleted %d events, want %d", deleted, c.gone)
				}
				b.StopTimer()
				if err := conn.QueryRow(ctx, `SELECT sum(pg_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = 'outbox'::regclass`).Scan(&left); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/200_000, "µs/event")
			b.ReportMetric(float64(left)/(1<<20), "MB-heap-left")
		})
	}
}
