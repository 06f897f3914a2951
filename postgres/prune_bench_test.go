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
// and effect row), a millisecond apart, the newest AGE old.
const pruneFill = `
TRUNCATE outbox, deliveries, delivery_attempts, effects;
INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
SELECT gen_random_uuid(), g, 'PB-' || g, 'order.closed', json_build_object('order', json_build_object('order_no', 'PB-' || g, 'pad', repeat('x', 600))),
	now() - interval 'AGE' - g * interval '1 ms'
FROM generate_series(1, 200000) g;
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
// reports the time per event read.
func BenchmarkOutboxPrune(b *testing.B) {
	for _, c := range []struct {
		name string
		age  string
		gone int
		step int
	}{{"old/500", "8 days", 198_000, 500}, {"old/4000", "8 days", 198_000, 4000}, {"young/500", "1 hour", 0, 500}, {"young/4000", "1 hour", 0, 4000}} {
		b.Run(c.name, func(b *testing.B) {
			dsn := testenv.PostgresSchema(b)
			s := openStore(b, dsn, postgres.Config{})
			conn := connect(b, dsn)
			ctx := context.Background()
			before := time.Now().Add(-7 * 24 * time.Hour)
			for b.Loop() {
				b.StopTimer()
				for _, q := range []string{strings.ReplaceAll(pruneFill, "AGE", c.age), "VACUUM ANALYZE outbox, deliveries, delivery_attempts, effects"} {
					if _, err := conn.Exec(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				deleted, from := 0, int64(0)
				for {
					got, err := s.OutboxPrune(ctx, &lapse.OutboxPruneParams{Before: before, From: from, Limit: c.step})
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
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/200_000, "µs/event")
		})
	}
}
