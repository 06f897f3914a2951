package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/benchload"
	"github.com/lapsehq/lapse/postgres"
)

// What the §7 benchmarks (flash sale, idle, memory, long transaction) share:
// their sizes from the environment, a bulk loader, a clock that can jump to
// a deadline, and counters read without asking the database.

// benchInt returns the integer in the environment variable env, or def.
func benchInt(b *testing.B, env string, def int) int {
	b.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", env, v)
	}
	return n
}

// benchSizes returns the comma-separated sizes in the environment variable
// env, or def.
func benchSizes(b *testing.B, env string, def []int) []int {
	b.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", env, v)
		}
		out = append(out, n)
	}
	return out
}

// benchDuration returns the duration in the environment variable env, or def.
func benchDuration(b *testing.B, env string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 30s", env, v)
	}
	return d
}

// benchLogger shows the engine's warnings and errors: a benchmark that
// fails quietly measures nothing.
func benchLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openBench opens and migrates a PostgreSQL store on dsn with a pool of
// conns (zero: the store's default), closed when b ends.
func openBench(b *testing.B, dsn string, conns int32) *postgres.Store {
	b.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Config{MaxConns: conns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

// loadOrders bulk-inserts n UNPAID checkout orders created at created, the
// i-th due at deadline(i), through OrderCreateMany (COPY on PostgreSQL) from
// two loaders, and returns how long it took. The orders carry no outbox
// rows: their order.created events are taken as delivered long ago.
func loadOrders(b *testing.B, s lapse.Store, prefix string, n int, created time.Time, deadline func(i int) time.Time) time.Duration {
	b.Helper()
	const chunk, loaders = 10000, 2
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, loaders)
	for range loaders {
		wg.Go(func() {
			for {
				from := int(next.Add(chunk)) - chunk
				if from >= n {
					return
				}
				ps := make([]*lapse.OrderCreateParams, 0, chunk)
				for i := from; i < min(from+chunk, n); i++ {
					ps = append(ps, pendingOrder(fmt.Sprintf("%s-%08d", prefix, i), created, deadline(i)))
				}
				if err := s.OrderCreateMany(context.Background(), ps); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// loadPending inserts n UNPAID checkout orders created at created, the i-th
// due at deadline(i), each with its creation log row and its deadline row,
// as loadOrders does, into the PostgreSQL store s on dsn, and returns how
// long it took. The server makes most of them from templates
// (benchload.Pending); the rows are those loadOrders would have written.
func loadPending(b *testing.B, s *postgres.Store, dsn, prefix string, n int, created time.Time, deadline func(i int) time.Time) time.Duration {
	b.Helper()
	start := time.Now()
	err := benchload.Pending(context.Background(), s, dsn, prefix+"-", n, func(i int) *lapse.OrderCreateParams {
		return pendingOrder(fmt.Sprintf("%s-%08d", prefix, i), created, deadline(i))
	})
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// pendingOrder is a new UNPAID checkout order as the engine creates one.
func pendingOrder(orderNo string, created, deadline time.Time) *lapse.OrderCreateParams {
	req := &lapse.OrderCreate{OrderNo: orderNo, Flow: "checkout", UserID: "u-" + orderNo[len(orderNo)-3:],
		Amount: 1999, Currency: "CNY", Items: []lapse.Item{{SKU: "sku-flash", Qty: 1}}}
	o := &lapse.Order{OrderNo: req.OrderNo, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &deadline, Amount: req.Amount,
		Currency: req.Currency, UserID: req.UserID, Items: req.Items, Version: 1, CreatedAt: created, UpdatedAt: created,
		FiredBy: lapse.FiredByApp, RequestHash: req.Fingerprint()}
	return &lapse.OrderCreateParams{Order: o,
		Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, Actor: "bench", CreatedAt: created}}
}

// vacuum settles the orders just loaded (benchload.Vacuum).
func vacuum(b *testing.B, dsn string) {
	b.Helper()
	if err := benchload.Vacuum(context.Background(), dsn); err != nil {
		b.Fatal(err)
	}
}

// jumpClock is the wall clock moved by an offset that the benchmark sets
// once its orders are loaded, so that a deadline set before the load comes
// due right after it.
type jumpClock struct{ offset atomic.Int64 }

// Now returns the wall clock plus the offset, as Lapse stores times.
func (c *jumpClock) Now() time.Time {
	return lapse.Truncate(time.Now().Add(time.Duration(c.offset.Load())))
}

// jumpTo moves the clock so that it reads at in lead from now, and returns
// the wall time at which it will.
func (c *jumpClock) jumpTo(at time.Time, lead time.Duration) time.Time {
	wall := time.Now().Add(lead)
	c.offset.Store(int64(at.Sub(wall)))
	return wall
}

// counters is a prometheus.Registerer for the engine's metrics that leaves
// out the collectors that ask the database at scrape time, so that reading
// a counter while the engine runs adds no load.
type counters struct{ reg *prometheus.Registry }

func newCounters() *counters { return &counters{reg: prometheus.NewRegistry()} }

// askingDatabase are the metrics read from the database when scraped: the
// flash sale polls every 25 ms, where a Prometheus server scrapes every
// 15 s or so, and lapse_due_oldest_seconds reads the deadline index's first
// live entry, behind the entries of the orders just closed.
var askingDatabase = []string{"lapse_due_open_orders", "lapse_due_oldest_seconds", "lapse_clock_skew_seconds", "lapse_deliveries_"}

func (c *counters) Register(col prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { col.Describe(ch); close(ch) }()
	asks := false
	for d := range ch {
		for _, name := range askingDatabase {
			asks = asks || strings.Contains(d.String(), `fqName: "`+name)
		}
	}
	if asks {
		return nil
	}
	return c.reg.Register(col)
}

func (c *counters) MustRegister(cols ...prometheus.Collector) {
	for _, col := range cols {
		if err := c.Register(col); err != nil {
			panic(err)
		}
	}
}

func (c *counters) Unregister(col prometheus.Collector) bool { return c.reg.Unregister(col) }

// sum adds up the counter called name over the series that carry every
// label=value pair of match (label, value, label, value, …).
func (c *counters) sum(name string, match ...string) float64 { return c.snapshot()(name, match...) }

// snapshot gathers the metrics once and returns sum on what it gathered,
// for a poll that reads several: a gather reads every series of every
// metric, histograms too, which a poll every few milliseconds makes a
// cost of its own.
func (c *counters) snapshot() func(name string, match ...string) float64 {
	mfs, err := c.reg.Gather()
	return func(name string, match ...string) float64 {
		if err != nil {
			return 0
		}
		total := 0.0
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		series:
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				for i := 0; i+1 < len(match); i += 2 {
					if labels[match[i]] != match[i+1] {
						continue series
					}
				}
				total += m.GetCounter().GetValue()
			}
		}
		return total
	}
}

// pgConnect opens a plain connection on dsn.
func pgConnect(b *testing.B, dsn string) *pgx.Conn {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	return conn
}
