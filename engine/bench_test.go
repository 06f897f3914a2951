package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/burndown"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// BenchmarkBurnDown measures the close path end to end on each store: N
// orders are due at once among 4N that are not, all with their history
// (creation log row and event), and Claimer.RunOnce closes the due ones,
// each with its transition-log row, its order.closed outbox row and a
// delivery per subscriber, in batches of 500 with 2 workers
// (internal/burndown, the workload of lapse bench). It reports orders
// closed per second and the close lag's p99 with the whole backlog due at
// once. Loading is not timed. LAPSE_BENCH_ORDERS sets N (default 20,000).
//
//	LAPSE_TEST_POSTGRES=… LAPSE_TEST_MYSQL=… go test -run x -bench BurnDown -benchtime 3x ./engine/
func BenchmarkBurnDown(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("LAPSE_BENCH_ORDERS")); err == nil && v > 0 {
		n = v
	}
	stores := []struct {
		name string
		open func(b *testing.B) (lapse.Store, string)
	}{
		{"sqlite", func(b *testing.B) (lapse.Store, string) {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return s, ""
		}},
		{"postgres", func(b *testing.B) (lapse.Store, string) {
			dsn := testenv.PostgresSchema(b)
			s, err := postgres.Open(context.Background(), dsn, postgres.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return s, dsn
		}},
		{"mysql", func(b *testing.B) (lapse.Store, string) {
			s, err := mysql.Open(context.Background(), testenv.MySQLDatabase(b), mysql.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return s, ""
		}},
	}
	for _, st := range stores {
		for _, subs := range []int{0, 2} {
			b.Run(fmt.Sprintf("%s/subscribers=%d/%d", st.name, subs, n), func(b *testing.B) {
				burnDown(b, burndown.Config{Orders: n, Subscribers: subs}, st.open)
			})
		}
	}
}

type migrator interface {
	Migrate(ctx context.Context) error
}

func burnDown(b *testing.B, cfg burndown.Config, open func(b *testing.B) (lapse.Store, string)) {
	ctx := context.Background()
	var total time.Duration
	var closed int
	var p99 time.Duration
	for range b.N {
		b.StopTimer()
		s, dsn := open(b)
		if err := s.(migrator).Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		cfg.Postgres = dsn
		res, err := burndown.Run(ctx, s, cfg)
		if err != nil {
			b.Fatal(err)
		}
		total += res.Elapsed
		closed += res.Closed
		p99 = max(p99, res.Lag.P99)
		s.Close()
	}
	b.ReportMetric(float64(closed)/total.Seconds(), "orders/s")
	b.ReportMetric(float64(p99.Milliseconds()), "lag-p99-ms")
}
