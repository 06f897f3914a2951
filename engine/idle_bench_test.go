package engine_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
)

// BenchmarkIdle is the idle and memory lines of SPEC.md §7 on PostgreSQL:
// N pending checkout orders, none due (deadlines from 5 minutes to 7 days
// away: the engine's clock is set back to the start of the load), and the
// real Claimer (precise path and sweep, defaults) running for a while. It
// reports
//
//   - claimer-q/s: the round trips the Claimer's process sends to the
//     database per second (target ≤ 1/s), counted on the wire by a proxy
//     in front of PostgreSQL, so that BEGIN, COMMIT and the pool's pings
//     count too;
//   - serve-q/s: the same with the Deliverer running beside it, with the
//     subscribers lapse serve has by default (the stock and coupon ledgers
//     on, and those of the built-in flows), each of whose loops looks for
//     due retries every DelivererConfig.Poll;
//   - rss-MB and heap-MB: the most this process's VmRSS (/proc/self/status)
//     and Go heap in use reached while the Claimer ran, after the loader's
//     garbage was returned (target ≤ 64 MB at 10 million, and flat in N).
//     The process is the test binary, with the testing package and every
//     store linked in: an upper bound of the engine's own.
//
// Loading is untimed (loadPending, then VACUUM ANALYZE) and logged; the
// schema is dropped at the end. Each size is a sub-benchmark, so that sizes
// are compared side by side in one run.
//
//	LAPSE_TEST_POSTGRES=… LAPSE_BENCH_PENDING=100000,1000000,10000000 LAPSE_BENCH_IDLE_RUN=30s \
//	  go test -run '^$' -bench 'Idle$' -benchtime 1x -timeout 180m ./engine/
//
// LAPSE_BENCH_PENDING lists the sizes (default 1000,100000);
// LAPSE_BENCH_IDLE_RUN is how long each phase runs (default 30s).
func BenchmarkIdle(b *testing.B) {
	sizes := benchSizes(b, "LAPSE_BENCH_PENDING", []int{1000, 100000})
	run := benchDuration(b, "LAPSE_BENCH_IDLE_RUN", 30*time.Second)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			for range b.N {
				idle(b, n, run)
			}
		})
	}
}

func idle(b *testing.B, n int, run time.Duration) {
	ctx := context.Background()
	b.StopTimer()
	dsn := testenv.PostgresSchema(b) + "&application_name=lapse-bench-idle"
	loader := openBench(b, dsn, 0)
	now := time.Now()
	spread := uint64((7*24*time.Hour - 5*time.Minute) / time.Second)
	took := loadPending(b, loader, dsn, "I", n, now, func(i int) time.Time {
		// A multiplicative hash spreads the deadlines over the week
		// whatever the order of creation.
		return now.Add(5*time.Minute + time.Duration(uint64(i)*2654435761%spread)*time.Second)
	})
	vacuum(b, dsn)
	loader.Close()
	runtime.GC()
	debug.FreeOSMemory()

	wire, counted := countWire(b, dsn)
	api := openBench(b, counted, 0)
	work := openBench(b, counted, 8)

	// The engine's clock goes back to the start of the load, so that
	// however long loading took, the next deadline is 5 minutes away.
	clk := &jumpClock{}
	clk.jumpTo(lapse.Truncate(now), 0)

	// The Claimer alone.
	reg := newCounters()
	e, err := engine.New(api, flows.Builtin(), engine.Config{Clock: clk, Registerer: reg, WorkStore: work, Logger: benchLogger()})
	if err != nil {
		b.Fatal(err)
	}
	c := engine.NewClaimer(e, engine.ClaimerConfig{})
	var mem memorySample
	b.StartTimer()
	from := wire.trips.Load()
	wire.statements()
	c.Start(ctx)
	mem.during(run)
	c.Stop()
	claimerQPS := float64(wire.trips.Load()-from) / run.Seconds()
	claimerStmts := wire.statements()
	if fired := reg.sum("lapse_deadline_firings_total"); fired != 0 {
		b.Errorf("idle: the Claimer fired %.0f orders; none should have been due", fired)
	}

	// The Claimer and the Deliverer, as lapse serve runs them by default.
	e, err = engine.New(api, flows.Builtin(), engine.Config{Clock: clk, WorkStore: work, Logger: benchLogger(), StockLedger: true, CouponLedger: true})
	if err != nil {
		b.Fatal(err)
	}
	var subs []string
	for _, s := range e.Subscriptions() {
		subs = append(subs, s.Name)
	}
	c, d := engine.NewClaimer(e, engine.ClaimerConfig{}), engine.NewDeliverer(e, engine.DelivererConfig{})
	from = wire.trips.Load()
	c.Start(ctx)
	d.Start(ctx)
	time.Sleep(run)
	d.Stop()
	c.Stop()
	serveQPS := float64(wire.trips.Load()-from) / run.Seconds()
	serveStmts := wire.statements()
	b.StopTimer()

	b.ReportMetric(claimerQPS, "claimer-q/s")
	b.ReportMetric(serveQPS, "serve-q/s")
	b.ReportMetric(mem.rss/(1<<20), "rss-MB")
	b.ReportMetric(mem.heap/(1<<20), "heap-MB")
	b.Logf("idle, %d pending orders (loaded in %v), none due, %v per phase: the Claimer makes %.2f round trips/s (target ≤ 1), %.2f with the Deliverer and its %d subscribers (%s); the process peaks at %.1f MB RSS, %.1f MB Go heap in use (target ≤ 64 MB RSS at 10 million)",
		n, took.Round(time.Second), run, claimerQPS, serveQPS, len(subs), strings.Join(subs, ", "), mem.rss/(1<<20), mem.heap/(1<<20))
	b.Logf("the Claimer's statements: %s", strings.Join(claimerStmts, "; "))
	b.Logf("with the Deliverer: %s", strings.Join(serveStmts, "; "))
}

// memorySample keeps the highest RSS and Go heap in use seen.
type memorySample struct{ rss, heap float64 }

// during samples the process's memory every 250 ms for d.
func (m *memorySample) during(d time.Duration) {
	end := time.Now().Add(d)
	for {
		m.take()
		if time.Now().After(end) {
			return
		}
		time.Sleep(min(250*time.Millisecond, time.Until(end)))
	}
}

func (m *memorySample) take() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heap = max(m.heap, float64(ms.HeapInuse))
	m.rss = max(m.rss, float64(vmRSS()))
}

// vmRSS returns the resident set size of this process, from
// /proc/self/status (0 where there is none).
func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
