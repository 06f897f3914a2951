package http_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/postgres"
)

// The API benchmarks (callback_bench_test.go, create_bench_test.go) run Lapse
// as lapse serve runs it on PostgreSQL: the engine with its deadline claimer
// and deliverer, an API pool and a work pool, the real handler with access
// control and HMAC callbacks, behind an http.Server on a loopback port, with
// an Info logger whose lines are formatted and thrown away. Each run has a
// database of its own, so that pg_stat_database counts its commits alone.
// LAPSE_BENCH_PARAMS adds parameters to the DSN of the run's stores
// (k=v&k=v), to try a server setting: plan_cache_mode=force_generic_plan;
// LAPSE_BENCH_CONNS sets the API pool's size (default
// postgres.DefaultMaxConns, as lapse serve's --db-conns);
// LAPSE_BENCH_BATCH_GATHER the stores' postgres.Config.BatchGather (a
// duration, 0 for off; default postgres.DefaultBatchGather, as lapse
// serve's --batch-gather).

// benchSecret signs the benchmarks' HMAC callbacks.
const benchSecret = "bench-callback-secret"

// benchSeconds is how long one measured run lasts: LAPSE_BENCH_SECONDS, or 10.
func benchSeconds(b *testing.B) time.Duration {
	if v := os.Getenv("LAPSE_BENCH_SECONDS"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			b.Fatalf("LAPSE_BENCH_SECONDS=%q: want a positive number of seconds", v)
		}
		return time.Duration(n * float64(time.Second))
	}
	return 10 * time.Second
}

// benchWarmup is how long a run sends before it measures:
// LAPSE_BENCH_WARMUP (a duration; 0 for none), or 2s.
func benchWarmup(b *testing.B) time.Duration {
	v := os.Getenv("LAPSE_BENCH_WARMUP")
	if v == "" {
		return 2 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("LAPSE_BENCH_WARMUP=%q: want a duration, 0 for none", v)
	}
	return d
}

// benchDB is a PostgreSQL database made for one run and dropped after it.
type benchDB struct {
	name string
	base string // the DSN of LAPSE_TEST_POSTGRES, where the monitor connects
	dsn  string // the run's database
}

func newBenchDB(b *testing.B) *benchDB {
	b.Helper()
	base := testenv.Require(b, testenv.EnvPostgres, "PostgreSQL")
	name := "lapse_bench_" + strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			b.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			b.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	if v := os.Getenv("LAPSE_BENCH_PARAMS"); v != "" {
		q := u.Query()
		for _, kv := range strings.Split(v, "&") {
			k, val, _ := strings.Cut(kv, "=")
			q.Set(k, val)
		}
		u.RawQuery = q.Encode()
	}
	return &benchDB{name: name, base: base, dsn: u.String()}
}

// commits returns the transactions committed in the database so far, once
// no session is connected to it: a session reports its counts to the
// statistics when it ends, so that none is left out.
func (d *benchDB) commits(b *testing.B) int64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", d.name).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d sessions still connected to %s", n, d.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Each statement here is a transaction of its own, whose statistics
	// snapshot is fresh: it sees what the ended sessions reported.
	var c int64
	if err := conn.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", d.name).Scan(&c); err != nil {
		b.Fatal(err)
	}
	return c
}

// backendCPU returns the CPU time that the sessions now connected to the
// database have used since they started, read from /proc (PostgreSQL on
// this host), and false when it cannot be read.
func (d *benchDB) backendCPU(b *testing.B) (time.Duration, bool) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1", d.name)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		// The fields after the command, which is in parentheses: utime and
		// stime are the 14th and 15th of the line.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		if len(f) < 13 {
			return 0, false
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond, len(pids) > 0 // USER_HZ is 100 on Linux
}

// processCPU is the CPU time this process has used: the server and the
// clients of a benchmark.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per request of this process (server and
// clients) and of the database's sessions, over n requests.
func reportCPU(b *testing.B, n int, proc, db time.Duration, dbOK bool) {
	b.ReportMetric(float64(proc.Microseconds())/float64(n), "go-cpu-us/req")
	if dbOK {
		b.ReportMetric(float64(db.Microseconds())/float64(n), "pg-cpu-us/req")
	}
}

// open opens a store on the run's database with conns connections.
func (d *benchDB) open(b *testing.B, conns int32) *postgres.Store {
	b.Helper()
	cfg := postgres.Config{MaxConns: conns}
	if v := os.Getenv("LAPSE_BENCH_BATCH_GATHER"); v != "" {
		g, err := time.ParseDuration(v)
		if err != nil || g < 0 {
			b.Fatalf("LAPSE_BENCH_BATCH_GATHER=%q: want a duration, 0 for off", v)
		}
		cfg.BatchGather = cmp.Or(g, -1)
	}
	s, err := postgres.Open(context.Background(), d.dsn, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// apiBench is a running Lapse over a benchDB.
type apiBench struct {
	store  *postgres.Store
	client *benchClient
	stop   func() // stops the server, the engine's loops and closes the stores
}

// benchConfig says how to run Lapse for a benchmark.
type benchConfig struct {
	clients int // the HTTP client's idle connections
	// apiConns and workConns are the pools' sizes; zero: lapse serve's
	// defaults (postgres.DefaultMaxConns and 8).
	apiConns, workConns int32
	// unauthenticated serves without access control (no key, no audit row).
	unauthenticated bool
}

// startAPI starts Lapse on d as lapse serve does, with the built-in stock
// and coupon ledgers and HMAC callbacks.
func startAPI(b *testing.B, d *benchDB, cfg benchConfig) *apiBench {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if v, _ := strconv.Atoi(os.Getenv("LAPSE_BENCH_CONNS")); cfg.apiConns == 0 && v > 0 {
		cfg.apiConns = int32(v)
	}
	if cfg.apiConns == 0 {
		cfg.apiConns = postgres.DefaultMaxConns
	}
	if cfg.workConns == 0 {
		cfg.workConns = 8
	}
	store, work := d.open(b, cfg.apiConns), d.open(b, cfg.workConns)
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	e, err := engine.New(store, flows.Builtin(), engine.Config{Logger: log, Registerer: reg, StockLedger: true, CouponLedger: true,
		WorkStore: work, Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{}, Merchants: map[string]string{}}})
	if err != nil {
		b.Fatal(err)
	}
	hcfg := lapsehttp.Config{Logger: log, Gatherer: reg, MaxInFlight: 4 * int(postgres.DefaultMaxConns),
		Callbacks: map[string]lapse.PaymentCallback{"hmac": &payment.HMAC{Provider: "hmac", Secrets: [][]byte{[]byte(benchSecret)}}}}
	a := &apiBench{store: store}
	if cfg.unauthenticated {
		hcfg.Unauthenticated = true
	} else {
		svc, err := access.New(store, access.Config{})
		if err != nil {
			b.Fatal(err)
		}
		hcfg.Access = svc
	}
	claimer := engine.NewClaimer(e, engine.ClaimerConfig{})
	deliverer := engine.NewDeliverer(e, engine.DelivererConfig{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: lapsehttp.NewServer(e, hcfg).Handler(), ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	claimer.Start(ctx)
	deliverer.Start(ctx)
	go func() { _ = srv.Serve(ln) }()
	a.client = newBenchClient(ln.Addr().String(), cfg.clients+8)
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
			a.client.close()
			claimer.Stop()
			deliverer.Stop()
			cancel()
			store.Close()
			work.Close()
		})
	}
	b.Cleanup(a.stop)
	return a
}

// benchKey makes an API key that may create and read orders, through s.
func benchKey(b *testing.B, s lapse.Store) string {
	b.Helper()
	svc, err := access.New(s, access.Config{})
	if err != nil {
		b.Fatal(err)
	}
	admin := &access.Principal{Kind: access.KindKey, ID: "admin", Name: "bench", Scopes: []string{access.ScopeAdmin}}
	key, _, err := svc.CreateKey(context.Background(), admin, "bench", []string{access.ScopeOrdersWrite, access.ScopeOrdersRead})
	if err != nil {
		b.Fatal(err)
	}
	return key
}

// benchOrders writes n UNPAID checkout orders straight to the database,
// named prefix-000000…, of 2500 CNY each, with their order.created events:
// deadline(i) is order i's deadline.
func benchOrders(b *testing.B, s lapse.Store, prefix string, n int, deadline func(i int) time.Time) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	const chunk = 5000
	for i := 0; i < n; i += chunk {
		var ps []*lapse.OrderCreateParams
		for j := i; j < min(i+chunk, n); j++ {
			at := deadline(j)
			o := &lapse.Order{OrderNo: benchOrderNo(prefix, j), Flow: "checkout", State: flows.Unpaid, DeadlineAt: &at, Amount: 2500,
				Currency: "CNY", UserID: "u", Version: 1, CreatedAt: now, UpdatedAt: now, FiredBy: lapse.FiredByApp}
			ps = append(ps, &lapse.OrderCreateParams{Order: o,
				Log:    lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, CreatedAt: now},
				Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)}})
		}
		if err := s.OrderCreateMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
}

func benchOrderNo(prefix string, i int) string { return fmt.Sprintf("%s-%07d", prefix, i) }

// latencies collects request latencies from many goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
	// late is, in an open loop, how long after its scheduled time each
	// request was sent (waiting for a free worker, or for the sender's
	// goroutine to run): the part of its latency that is the client's.
	late []time.Duration
}

func (l *latencies) add(d []time.Duration) { l.addLate(d, nil) }

func (l *latencies) addLate(d, late []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.late = append(l.late, late...)
	l.mu.Unlock()
}

// report reports the rate of n requests over took, and p50, p99 and max.
func (l *latencies) report(b *testing.B, took time.Duration, unit string) {
	b.Helper()
	if len(l.all) == 0 {
		b.Fatal("no request completed")
	}
	b.ReportMetric(float64(len(l.all))/took.Seconds(), unit)
	b.ReportMetric(l.percentile(0.5), "p50-ms")
	b.ReportMetric(l.percentile(0.99), "p99-ms")
	b.ReportMetric(l.percentile(1), "max-ms")
}

// percentile is the latency below which a fraction p of l's fall, in
// milliseconds (0 when l is empty).
func (l *latencies) percentile(p float64) float64 { return percentileMS(l.all, p) }

// percentileMS is the duration below which a fraction p of ds fall, in
// milliseconds (0 when ds is empty); it sorts ds.
func percentileMS(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000
}

// closedLoop runs clients goroutines for dur, each sending one request after
// the other with do(i), i counting from 0 across all of them, until dur has
// passed or limit requests were sent. It returns the latencies and how long
// it ran.
func closedLoop(b *testing.B, clients int, dur time.Duration, limit int, do func(i int) error) (*latencies, time.Duration) {
	b.Helper()
	var next atomic.Int64
	var lat latencies
	var failed atomic.Value
	start := time.Now()
	end := start.Add(dur)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			defer func() { lat.add(mine) }()
			for time.Now().Before(end) {
				i := int(next.Add(1) - 1)
				if i >= limit {
					return
				}
				t0 := time.Now()
				if err := do(i); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	if int(next.Load()) >= limit {
		b.Logf("all %d prepared requests were sent before %v passed", limit, dur)
	}
	return &lat, took
}

// openLoop sends rate requests a second for dur, each at its time whether
// or not the ones before it were answered, through up to workers requests
// in flight; a request's latency counts from its scheduled time, so that
// waiting for a free worker counts too (and is also kept apart, in late).
func openLoop(b *testing.B, rate float64, workers int, dur time.Duration, limit int, do func(i int) error) (*latencies, time.Duration) {
	b.Helper()
	type job struct {
		i  int
		at time.Time
	}
	jobs := make(chan job)
	var lat latencies
	var failed atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			mine, late := make([]time.Duration, 0, 1024), make([]time.Duration, 0, 1024)
			defer func() { lat.addLate(mine, late) }()
			for j := range jobs {
				sent := time.Now()
				if err := do(j.i); err != nil {
					failed.CompareAndSwap(nil, err)
					continue
				}
				mine = append(mine, time.Since(j.at))
				late = append(late, sent.Sub(j.at))
			}
		})
	}
	start := time.Now()
	n := min(limit, int(rate*dur.Seconds()))
	for i := range n {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		jobs <- job{i, at}
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return &lat, took
}

// post sends body to path and fails unless the answer is want.
func (a *apiBench) post(path string, body []byte, hdr http.Header, want int) error {
	status, got, err := a.client.post(path, body, hdr)
	if err != nil {
		return err
	}
	if status != want {
		return &statusError{path: path, status: status, body: got, want: want}
	}
	return nil
}

// statusError is an answer other than the one wanted.
type statusError struct {
	path         string
	status, want int
	body         []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("POST %s = %d %s, want %d", e.path, e.status, e.body, e.want)
}
