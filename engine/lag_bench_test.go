package engine_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/burndown"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/redis"
)

// BenchmarkCloseLag measures precision on PostgreSQL: deadlines come due at
// a sustained rate (2,000/s for 10 s), set by "another process" (written
// straight to the database, and to the shared trigger when there is one), so
// this process's in-process timer knows nothing of them; the claimer fires
// them as they come due. It reports the close lag (close time - deadline)
// at p50, p99, p99.9 and max, with the Redis trigger and with the database
// alone (whose precise path asks the deadline index every MaxSleep, 1 s),
// and what a close cost: this process's CPU time and that of its database
// sessions, and the database's commits, each over the orders closed.
// LAPSE_BENCH_GATHER sets the claimer's Gather (-1ns turns it off).
//
//	LAPSE_TEST_POSTGRES=… LAPSE_TEST_REDIS=redis://127.0.0.1:6379/0 \
//	  go test -run x -bench CloseLag -benchtime 1x ./engine/
func BenchmarkCloseLag(b *testing.B) {
	const rate, seconds = 2000, 10
	for _, withRedis := range []bool{true, false} {
		name := "database"
		if withRedis {
			name = "redis"
		}
		b.Run(fmt.Sprintf("%s/%d-per-s", name, rate), func(b *testing.B) {
			for range b.N {
				closeLag(b, rate, seconds, withRedis)
			}
		})
	}
}

func closeLag(b *testing.B, rate, seconds int, withRedis bool) {
	ctx := context.Background()
	b.StopTimer()
	// The application_name is the run's own, so that the CPU meter counts
	// this run's database sessions alone.
	dsn := testenv.PostgresSchema(b) + fmt.Sprintf("&application_name=lapse-bench-lag-%d", os.Getpid())
	s, err := postgres.Open(ctx, dsn, postgres.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	cfg := engine.Config{}
	var tr *redis.Trigger
	if withRedis {
		tr, err = redis.New(redis.Config{URL: testenv.Redis(b), Prefix: "lapse-bench-" + rand.Text()[:8] + ":"})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		if err := tr.MarkSeeded(ctx); err != nil {
			b.Fatal(err)
		}
		cfg.Trigger = tr
	}
	e, err := engine.New(s, flows.Builtin(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	n := rate * seconds
	if dead := benchInt(b, "LAPSE_BENCH_LAG_DEAD", 0); dead > 0 {
		lagDeadEntries(b, dsn, dead)
	}
	start := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	deadline := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / time.Duration(rate)) }
	var ps []*lapse.OrderCreateParams
	for i := range n {
		at := deadline(i)
		o := &lapse.Order{OrderNo: fmt.Sprintf("L-%06d", i), Flow: "checkout", State: flows.Unpaid, DeadlineAt: &at, Amount: 100,
			Currency: "CNY", UserID: "u", Version: 1, CreatedAt: time.Now(), UpdatedAt: time.Now(), FiredBy: lapse.FiredByApp}
		ps = append(ps, &lapse.OrderCreateParams{Order: o, Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate,
			Version: 1, FiredBy: lapse.FiredByApp, CreatedAt: time.Now()}})
	}
	for i := 0; i < n; i += 2000 {
		if err := s.OrderCreateMany(ctx, ps[i:min(i+2000, n)]); err != nil {
			b.Fatal(err)
		}
	}
	if tr != nil {
		// The trigger names orders by id, which the store assigned: read
		// them back from the deadline index.
		var after *lapse.OrderDeadline
		for {
			page, err := s.OrderDeadlineList(ctx, &lapse.OrderDeadlineListParams{After: after, Limit: 2000})
			if err != nil {
				b.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			due := make([]engine.TriggerDue, len(page))
			for i, d := range page {
				due[i] = engine.TriggerDue{OrderID: d.ID, At: d.DeadlineAt}
			}
			if err := tr.Add(ctx, due); err != nil {
				b.Fatal(err)
			}
			after = &page[len(page)-1]
		}
	}
	if time.Now().After(start) {
		b.Fatalf("loading took past the first deadline")
	}
	ccfg := engine.ClaimerConfig{}
	if g := os.Getenv("LAPSE_BENCH_GATHER"); g != "" {
		if ccfg.Gather, err = time.ParseDuration(g); err != nil {
			b.Fatal(err)
		}
	}
	c := engine.NewClaimer(e, ccfg)
	meterConn := pgConnect(b, dsn)
	defer meterConn.Close(ctx)
	meter := burndown.NewCPUMeter(meterConn)
	commits := func() int64 {
		var n int64
		if err := meterConn.QueryRow(ctx, "SELECT pg_stat_force_next_flush()").Scan(new(any)); err != nil {
			b.Fatal(err)
		}
		if err := meterConn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	time.Sleep(time.Until(start.Add(-time.Second)))
	commits0 := commits()
	if err := meter.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	c.Start(ctx)
	time.Sleep(time.Until(deadline(n - 1).Add(3 * time.Second)))
	c.Stop()
	b.StopTimer()
	cpu, err := meter.Stop(ctx)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second) // the sessions' counts reach pg_stat_database within one
	commitsPer := float64(commits()-commits0) / float64(n)

	lags := make([]time.Duration, 0, n)
	for i := range n {
		o, err := s.OrderGet(ctx, fmt.Sprintf("L-%06d", i))
		if err != nil {
			b.Fatal(err)
		}
		if o.ClosedAt == nil {
			b.Fatalf("%s is %s", o.OrderNo, o.State)
		}
		lags = append(lags, o.ClosedAt.Sub(deadline(i)))
	}
	slices.Sort(lags)
	if lags[0] < 0 {
		b.Errorf("an order closed %v before its deadline", -lags[0])
	}
	pct := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(0.999), "p99.9-ms")
	b.ReportMetric(pct(1), "max-ms")
	proc, server := cpu.Per(n)
	b.ReportMetric(proc, "go-cpu-us/close")
	b.ReportMetric(server, "pg-cpu-us/close")
	b.ReportMetric(commitsPer, "commits/close")
}

// lagDeadEntries leaves the entries of n closed orders at the head of the
// due index, as a table between two vacuums has them: n deadline rows due
// an hour ago, deleted, with autovacuum off for the table (at its default
// scale factor it would wait for a fifth of the table: 2,000,000 dead rows
// at 10,000,000 pending). A scan reads past them, and marks them dead in
// the index as it goes; vacuum alone removes them.
func lagDeadEntries(b *testing.B, dsn string, n int) {
	ctx := context.Background()
	conn := pgConnect(b, dsn)
	defer conn.Close(ctx)
	for _, q := range []string{
		"ALTER TABLE order_deadlines SET (autovacuum_enabled = false)",
		fmt.Sprintf(`INSERT INTO order_deadlines (order_id, deadline_at, flow)
			SELECT -g, now() - interval '1 hour' + g * interval '1 microsecond', 'checkout' FROM generate_series(1, %d) g`, n),
		"VACUUM ANALYZE order_deadlines",
		"DELETE FROM order_deadlines WHERE order_id < 0",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}
