package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
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
// long it took. The first templates orders go through OrderCreateMany
// (COPY); the rest are made by the server from them, chunk by chunk, in one
// statement each: every column of the orders row and of its log row is the
// template's of the same user (pendingOrder's request hash depends on
// nothing else), but for the order number and the deadline, which the
// client sends; the identity column numbers them in order, as
// OrderCreateMany's ids do. The rows are those loadOrders would have
// written (the first and the last are read back and compared); the server
// only spares the client building and sending them.
func loadPending(b *testing.B, s *postgres.Store, dsn, prefix string, n int, created time.Time, deadline func(i int) time.Time) time.Duration {
	b.Helper()
	const templates, chunk, loaders = 1000, 100000, 2
	ctx := context.Background()
	start := time.Now()
	order := func(i int) *lapse.OrderCreateParams {
		return pendingOrder(fmt.Sprintf("%s-%08d", prefix, i), created, deadline(i))
	}
	var first []*lapse.OrderCreateParams
	for i := range min(n, templates) {
		first = append(first, order(i))
	}
	if err := s.OrderCreateMany(ctx, first); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	next.Store(templates)
	var wg sync.WaitGroup
	errs := make(chan error, loaders)
	for range loaders {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			for {
				from := int(next.Add(chunk)) - chunk
				if from >= n {
					return
				}
				ats := make([]time.Time, 0, chunk)
				for i := from; i < min(from+chunk, n); i++ {
					ats = append(ats, deadline(i))
				}
				if _, err := conn.Exec(ctx, fromTemplates, prefix+"-", from, ats, templates); err != nil {
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
	took := time.Since(start)
	for _, i := range []int{0, n - 1} {
		want := order(i)
		got, err := s.OrderGet(ctx, want.Order.OrderNo)
		if err != nil {
			b.Fatal(err)
		}
		log, err := s.TransitionList(ctx, got.ID)
		if err != nil {
			b.Fatal(err)
		}
		// As stored: to the microsecond, in UTC.
		at, made := lapse.Truncate(*want.Order.DeadlineAt), lapse.Truncate(created)
		want.Order.ID, want.Order.DeadlineAt, want.Order.CreatedAt, want.Order.UpdatedAt, want.Log.CreatedAt = got.ID, &at, made, made, made
		if len(log) == 1 {
			want.Log.ID, want.Log.OrderID = log[0].ID, got.ID
		}
		if !reflect.DeepEqual(got, want.Order) || len(log) != 1 || !reflect.DeepEqual(*log[0], want.Log) {
			b.Fatalf("order %d reads back as %+v with log %+v, want %+v with %+v", i, got, log, want.Order, want.Log)
		}
	}
	return took
}

// fromTemplates inserts the orders numbered $2 onwards, prefixed $1, due at
// $3, each a copy of template $2 % $4 (which has the same user) with its
// creation log row and its deadline row.
const fromTemplates = `WITH g AS (
	SELECT $2::bigint + k - 1 AS i, at FROM unnest($3::timestamptz[]) WITH ORDINALITY AS u(at, k)
), o AS (
	INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon, metadata,
		version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash)
	SELECT $1 || lpad(g.i::text, 8, '0'), t.flow, t.state, g.at, t.amount, t.currency, t.user_id, t.items, t.coupon, t.metadata,
		t.version, t.created_at, t.updated_at, t.closed_at, t.close_reason, t.fired_by, t.request_hash
	FROM g JOIN orders t ON t.order_no = $1 || lpad((g.i % $4)::text, 8, '0')
	ORDER BY g.i
	RETURNING id, deadline_at, flow
), d AS (
	INSERT INTO order_deadlines (order_id, deadline_at, flow) SELECT id, deadline_at, flow FROM o
)
INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
SELECT o.id, l.from_state, l.to_state, l.event, l.version, l.fired_by, l.actor, l.reason, l.created_at
FROM o, (SELECT * FROM transitions WHERE order_id = (SELECT id FROM orders WHERE order_no = $1 || lpad('0', 8, '0'))) l`

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

// vacuum runs VACUUM ANALYZE on the tables that hold the orders just
// loaded (orders, and order_deadlines where the schema has it), as
// autovacuum would have done for orders created long before their
// deadline.
func vacuum(b *testing.B, dsn string) {
	b.Helper()
	ctx := context.Background()
	conn := pgConnect(b, dsn)
	defer conn.Close(ctx)
	tables := "orders"
	var deadlines *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('order_deadlines')::text").Scan(&deadlines); err != nil {
		b.Fatal(err)
	}
	if deadlines != nil {
		tables += ", order_deadlines"
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+tables); err != nil {
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

// askingDatabase are the metrics read from the database when scraped.
var askingDatabase = []string{"lapse_due_open_orders", "lapse_deliveries_"}

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
