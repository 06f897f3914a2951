package engine_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/burndown"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/nats"
)

// BenchmarkFlashSale is the flash sale of SPEC.md §7 on PostgreSQL: N
// checkout orders share one deadline, and the target is all of them closed
// within 40 s of it and their order.closed events in NATS JetStream within
// 45 s. The process is wired as lapse serve wires it: an API pool and a
// work pool of 8 connections, the Claimer and the Deliverer with their
// defaults, and the nats subscription (order.*, 1,024 in flight, yielding
// to closes for at most CloseHold while the backlog burns). Nothing else
// subscribes (no stock or coupon ledger), so what is measured is the close
// and the publish.
//
// The orders are loaded before the timing, with COPY (OrderCreateMany),
// then VACUUM ANALYZE settles them; the engine's clock then jumps to just
// before the deadline, as if the sale had been created 15 minutes earlier.
// It reports, from the deadline, the time until the last order closed and
// until the last event's PubAck (the Deliverer's own count, polled every
// 25 ms), the rates over those spans, and checks afterwards that every order
// is CLOSED, no delivery is left pending and the stream holds N messages.
//
//	LAPSE_TEST_POSTGRES=… LAPSE_TEST_NATS=nats://127.0.0.1:4222 \
//	  LAPSE_BENCH_FLASH=1000000 go test -run '^$' -bench FlashSale -benchtime 1x -timeout 60m ./engine/
//
// LAPSE_BENCH_FLASH is N (default 50,000); LAPSE_BENCH_FLASH_INFLIGHT the
// nats subscription's Concurrency (default 1,024, lapse serve's).
// LAPSE_BENCH_FLASH_HOLD is the Deliverer's CloseHold (default 1m; 0: the
// subscription does not yield to the closes).
// LAPSE_BENCH_FLASH_RELAY=1 relays the subscription's events
// (Subscription.Relay) instead of writing a delivery per event.
// LAPSE_BENCH_FLASH_CLOSE_ONLY=1 leaves the subscription out: the orders
// are closed with no deliveries, so that the CPU and WAL a delivery costs
// are the difference between the two runs.
//
// Beside the times it reports what the run cost from the deadline to the
// last publish: CPU per order in this process and in the run's own
// database sessions (read from /proc, so only for a server on this host),
// the WAL written (the server's, so other work on it counts too), and how
// many of the deliveries' row updates were HOT.
func BenchmarkFlashSale(b *testing.B) {
	n := benchInt(b, "LAPSE_BENCH_FLASH", 50000)
	inflight := benchInt(b, "LAPSE_BENCH_FLASH_INFLIGHT", 1024)
	closeOnly := os.Getenv("LAPSE_BENCH_FLASH_CLOSE_ONLY") == "1"
	hold := time.Duration(0) // the Deliverer's default
	if v := os.Getenv("LAPSE_BENCH_FLASH_HOLD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("LAPSE_BENCH_FLASH_HOLD=%q: want a duration, 0 for no hold", v)
		}
		hold = cmp.Or(d, -1)
	}
	relay := os.Getenv("LAPSE_BENCH_FLASH_RELAY") == "1"
	for range b.N {
		flashSale(b, n, inflight, closeOnly, relay, hold)
	}
}

func flashSale(b *testing.B, n, inflight int, closeOnly, relay bool, hold time.Duration) {
	ctx := context.Background()
	b.StopTimer()
	// The application_name is the run's own, so that the CPU meter counts
	// this run's sessions alone.
	dsn := testenv.PostgresSchema(b) + fmt.Sprintf("&application_name=lapse-bench-flash-%d", os.Getpid())
	store := openBench(b, dsn, 0)
	work := openBench(b, dsn, 8) // lapse serve's --db-work-conns
	sink, js, stream := flashStream(b)

	clk := &jumpClock{}
	reg := newCounters()
	var subs []engine.Subscription
	if !closeOnly {
		subs = []engine.Subscription{{Name: "nats", Handler: sink, Events: []string{"order.*"}, Concurrency: inflight, YieldsToCloses: true,
			Relay: relay}}
	}
	e, err := engine.New(store, flows.Builtin(), engine.Config{Clock: clk, Logger: benchLogger(), Registerer: reg, WorkStore: work,
		Subscriptions: subs})
	if err != nil {
		b.Fatal(err)
	}
	created := clk.Now()
	deadline := created.Add(15 * time.Minute)
	took := loadOrders(b, store, "F", n, created, func(int) time.Time { return deadline })
	vacuum(b, dsn)
	b.Logf("flash sale: loaded %d orders in %v", n, took.Round(time.Millisecond))

	c := engine.NewClaimer(e, engine.ClaimerConfig{})
	d := engine.NewDeliverer(e, engine.DelivererConfig{CloseHold: hold})
	// The claimer starts 2 s before the deadline, as a running one would
	// be: sleeping with the next deadline known.
	meterConn := pgConnect(b, dsn)
	defer meterConn.Close(ctx)
	meter := burndown.NewCPUMeter(meterConn)
	before := flashReadCost(b, meterConn, 0)
	due := clk.jumpTo(deadline, 2*time.Second)
	if err := meter.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	c.Start(ctx)
	d.Start(ctx)
	var closedAt, publishedAt time.Time
	var progress []string // closed/published at each second after the deadline
	giveUp := due.Add(10 * time.Minute)
	// One gather every 25 ms: at two every 10 ms, the poll took a tenth of
	// the process's CPU, beside the engine it measures.
	for tick := time.NewTicker(25 * time.Millisecond); publishedAt.IsZero() || closedAt.IsZero(); <-tick.C {
		now := time.Now()
		snap := reg.snapshot()
		closed := snap("lapse_deadline_firings_total")
		published := snap("lapse_delivery_attempts_total", "subscriber", "nats", "outcome", lapse.OutcomeOK)
		if closedAt.IsZero() && closed >= float64(n) {
			closedAt = now
		}
		if publishedAt.IsZero() && (published >= float64(n) || closeOnly && !closedAt.IsZero()) {
			publishedAt = now
		}
		if s := int(now.Sub(due) / time.Second); s >= 0 && s >= len(progress) {
			progress = append(progress, fmt.Sprintf("%d/%d", int(closed), int(published)))
		}
		if now.After(giveUp) {
			b.Fatalf("flash sale: after 10 min, %v closed and %v published of %d", reg.sum("lapse_deadline_firings_total"),
				reg.sum("lapse_delivery_attempts_total", "subscriber", "nats", "outcome", lapse.OutcomeOK), n)
		}
	}
	b.StopTimer()
	cpu, err := meter.Stop(ctx)
	if err != nil {
		b.Fatal(err)
	}
	d.Stop()
	c.Stop()
	after := flashReadCost(b, meterConn, 11*time.Second)

	counts, err := store.DeliveryCount(ctx)
	if err != nil {
		b.Fatal(err)
	}
	open, err := store.OrderCountDue(ctx, clk.Now())
	if err != nil {
		b.Fatal(err)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	want := uint64(n)
	if closeOnly {
		want = 0
	}
	if open != 0 || counts.Pending != 0 || counts.Dead != 0 || info.State.Msgs != want {
		b.Errorf("flash sale: %d orders still due, %d deliveries pending and %d dead, %d messages in the stream; want 0, 0, 0, %d",
			open, counts.Pending, counts.Dead, info.State.Msgs, want)
	}
	toClosed, toPublished := closedAt.Sub(due), publishedAt.Sub(due)
	b.ReportMetric(toClosed.Seconds(), "s-to-all-closed")
	b.ReportMetric(toPublished.Seconds(), "s-to-all-published")
	b.ReportMetric(float64(n)/toClosed.Seconds(), "closes/s")
	b.ReportMetric(float64(n)/toPublished.Seconds(), "publishes/s")
	process, server := cpu.Per(n)
	b.ReportMetric(process, "µs-process/order")
	b.ReportMetric(server, "µs-server/order")
	wal := float64(after.wal-before.wal) / float64(n)
	b.ReportMetric(wal, "B-WAL/order")
	upd, hot := after.updates-before.updates, after.hot-before.hot
	b.Logf("flash sale: CPU an order, close and delivery: %.1f µs in this process, %.1f µs in its database sessions; WAL %.0f B an order; deliveries: %d row updates, %d of them HOT (%.0f %%), %d inserted",
		process, server, wal, upd, hot, 100*float64(hot)/float64(max(upd, 1)), after.inserts-before.inserts)
	b.Logf("flash sale: closed/published at each second after the deadline: %s; failed publishes: %.0f", strings.Join(progress, " "),
		reg.sum("lapse_delivery_attempts_total", "subscriber", "nats", "outcome", lapse.OutcomeError))
	b.Logf("flash sale: %d orders due at once (%d publishes in flight): all closed %.2f s after the deadline (%.0f/s; target 40 s), all published to JetStream %.2f s after it (%.0f/s; target 45 s)",
		n, inflight, toClosed.Seconds(), float64(n)/toClosed.Seconds(), toPublished.Seconds(), float64(n)/toPublished.Seconds())
}

// flashCost is what the server has counted of a run's cost: the WAL
// position and the deliveries table's row updates (all and HOT) and
// inserts.
type flashCost struct{ wal, updates, hot, inserts int64 }

// flashReadCost reads a flashCost through conn, in the run's schema, after
// waiting settle: an idle session reports its table counts up to 10 s
// late.
func flashReadCost(b *testing.B, conn *pgx.Conn, settle time.Duration) flashCost {
	b.Helper()
	time.Sleep(settle)
	var c flashCost
	err := conn.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		coalesce((SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'deliveries'::regclass), 0),
		coalesce((SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'deliveries'::regclass), 0),
		coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = 'deliveries'::regclass), 0)`).Scan(&c.wal, &c.updates, &c.hot, &c.inserts)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// flashStream returns a NATS sink on a stream of its own, deleted when b
// ends, with a JetStream handle to read it.
func flashStream(b *testing.B) (*nats.Sink, jetstream.JetStream, string) {
	b.Helper()
	url := testenv.Require(b, testenv.EnvNATS, "NATS")
	nc, err := natsgo.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	suffix := strings.ToLower(lapse.NewEventID(time.Now())[24:])
	stream := "LAPSE_FLASH_" + strings.ToUpper(suffix)
	sink, err := nats.New(context.Background(), nats.Config{URL: url, Stream: stream, Subject: "lapseflash_" + suffix,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = sink.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			b.Errorf("delete stream %s: %v", stream, err)
		}
		nc.Close()
	})
	return sink, js, stream
}
