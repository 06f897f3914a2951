package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/nats"
)

// BenchmarkFlashSale is the flash sale of SPEC.md §7 on PostgreSQL: N
// checkout orders share one deadline, and the target is all of them closed
// within 40 s of it and their order.closed events in NATS JetStream within
// 45 s. The process is wired as lapse serve wires it: an API pool and a
// work pool of 8 connections, the Claimer and the Deliverer with their
// defaults, and the nats subscription (order.*, 1,024 in flight). Nothing else
// subscribes (no stock or coupon ledger), so what is measured is the close
// and the publish.
//
// The orders are loaded before the timing, with COPY (OrderCreateMany),
// then VACUUM ANALYZE settles them; the engine's clock then jumps to just
// before the deadline, as if the sale had been created 15 minutes earlier.
// It reports, from the deadline, the time until the last order closed and
// until the last event's PubAck (the Deliverer's own count, polled every
// 10 ms), the rates over those spans, and checks afterwards that every order
// is CLOSED, no delivery is left pending and the stream holds N messages.
//
//	LAPSE_TEST_POSTGRES=… LAPSE_TEST_NATS=nats://127.0.0.1:4222 \
//	  LAPSE_BENCH_FLASH=1000000 go test -run '^$' -bench FlashSale -benchtime 1x -timeout 60m ./engine/
//
// LAPSE_BENCH_FLASH is N (default 50,000); LAPSE_BENCH_FLASH_INFLIGHT the
// nats subscription's Concurrency (default 1,024, lapse serve's).
func BenchmarkFlashSale(b *testing.B) {
	n := benchInt(b, "LAPSE_BENCH_FLASH", 50000)
	inflight := benchInt(b, "LAPSE_BENCH_FLASH_INFLIGHT", 1024)
	for range b.N {
		flashSale(b, n, inflight)
	}
}

func flashSale(b *testing.B, n, inflight int) {
	ctx := context.Background()
	b.StopTimer()
	dsn := testenv.PostgresSchema(b) + "&application_name=lapse-bench-flash"
	store := openBench(b, dsn, 0)
	work := openBench(b, dsn, 8) // lapse serve's --db-work-conns
	sink, js, stream := flashStream(b)

	clk := &jumpClock{}
	reg := newCounters()
	e, err := engine.New(store, flows.Builtin(), engine.Config{Clock: clk, Logger: benchLogger(), Registerer: reg, WorkStore: work,
		Subscriptions: []engine.Subscription{{Name: "nats", Handler: sink, Events: []string{"order.*"}, Concurrency: inflight}}})
	if err != nil {
		b.Fatal(err)
	}
	created := clk.Now()
	deadline := created.Add(15 * time.Minute)
	took := loadOrders(b, store, "F", n, created, func(int) time.Time { return deadline })
	vacuum(b, dsn)
	b.Logf("flash sale: loaded %d orders in %v", n, took.Round(time.Millisecond))

	c := engine.NewClaimer(e, engine.ClaimerConfig{})
	d := engine.NewDeliverer(e, engine.DelivererConfig{})
	// The claimer starts 2 s before the deadline, as a running one would
	// be: sleeping with the next deadline known.
	due := clk.jumpTo(deadline, 2*time.Second)
	b.StartTimer()
	c.Start(ctx)
	d.Start(ctx)
	var closedAt, publishedAt time.Time
	var progress []string // closed/published at each second after the deadline
	giveUp := due.Add(10 * time.Minute)
	for tick := time.NewTicker(10 * time.Millisecond); publishedAt.IsZero() || closedAt.IsZero(); <-tick.C {
		now := time.Now()
		closed := reg.sum("lapse_deadline_firings_total")
		published := reg.sum("lapse_delivery_attempts_total", "subscriber", "nats", "outcome", lapse.OutcomeOK)
		if closedAt.IsZero() && closed >= float64(n) {
			closedAt = now
		}
		if publishedAt.IsZero() && published >= float64(n) {
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
	d.Stop()
	c.Stop()

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
	if open != 0 || counts.Pending != 0 || counts.Dead != 0 || info.State.Msgs != uint64(n) {
		b.Errorf("flash sale: %d orders still due, %d deliveries pending and %d dead, %d messages in the stream; want 0, 0, 0, %d",
			open, counts.Pending, counts.Dead, info.State.Msgs, n)
	}
	toClosed, toPublished := closedAt.Sub(due), publishedAt.Sub(due)
	b.ReportMetric(toClosed.Seconds(), "s-to-all-closed")
	b.ReportMetric(toPublished.Seconds(), "s-to-all-published")
	b.ReportMetric(float64(n)/toClosed.Seconds(), "closes/s")
	b.ReportMetric(float64(n)/toPublished.Seconds(), "publishes/s")
	b.Logf("flash sale: closed/published at each second after the deadline: %s; failed publishes: %.0f", strings.Join(progress, " "),
		reg.sum("lapse_delivery_attempts_total", "subscriber", "nats", "outcome", lapse.OutcomeError))
	b.Logf("flash sale: %d orders due at once (%d publishes in flight): all closed %.2f s after the deadline (%.0f/s; target 40 s), all published to JetStream %.2f s after it (%.0f/s; target 45 s)",
		n, inflight, toClosed.Seconds(), float64(n)/toClosed.Seconds(), toPublished.Seconds(), float64(n)/toPublished.Seconds())
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
