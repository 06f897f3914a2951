package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// BenchmarkBurnDown measures the close path end to end: N orders are due at
// once and Claimer.RunOnce closes them all, each with its transition log row
// and its order.closed outbox row, in batches. It reports orders closed per
// second. Loading the orders is not timed.
//
//	go test -run x -bench BurnDown -benchtime 3x ./engine/
func BenchmarkBurnDown(b *testing.B) {
	for _, n := range []int{20000} {
		b.Run(fmt.Sprintf("sqlite/%d", n), func(b *testing.B) {
			burnDown(b, n, func(b *testing.B) lapse.Store {
				s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Config{})
				if err != nil {
					b.Fatal(err)
				}
				return s
			})
		})
		b.Run(fmt.Sprintf("postgres/%d", n), func(b *testing.B) {
			burnDown(b, n, func(b *testing.B) lapse.Store {
				s, err := postgres.Open(context.Background(), testenv.PostgresSchema(b), postgres.Config{})
				if err != nil {
					b.Fatal(err)
				}
				return s
			})
		})
	}
}

type migrator interface {
	Migrate(ctx context.Context) error
}

func burnDown(b *testing.B, n int, open func(b *testing.B) lapse.Store) {
	ctx := context.Background()
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		s := open(b)
		if err := s.(migrator).Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		// The wall clock, as in production: event ids (UUIDv7) then grow with
		// time, which is what the outbox id index is built for.
		e, err := engine.New(s, flows.Builtin(), engine.Config{})
		if err != nil {
			b.Fatal(err)
		}
		load(b, s, fmt.Sprintf("run%d", i), n, lapse.SystemClock{}.Now().Add(-time.Hour))
		c := engine.NewClaimer(e, engine.ClaimerConfig{Batch: 500, Workers: 2})
		b.StartTimer()
		start := time.Now()
		fired, err := c.RunOnce(ctx)
		total += time.Since(start)
		b.StopTimer()
		if err != nil || fired != n {
			b.Fatalf("RunOnce fired %d of %d: %v", fired, n, err)
		}
		s.Close()
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "orders/s")
}

// load bulk-inserts n UNPAID checkout orders created at t0 and due within
// the minute after it.
func load(b *testing.B, s lapse.Store, prefix string, n int, t0 time.Time) {
	const chunk = 5000
	for start := 0; start < n; start += chunk {
		var ps []*lapse.OrderCreateParams
		for i := start; i < min(start+chunk, n); i++ {
			req := &lapse.OrderCreate{OrderNo: fmt.Sprintf("%s-%07d", prefix, i), Flow: "checkout", UserID: fmt.Sprintf("u%d", i%1000),
				Amount: 1999, Currency: "CNY", Items: []lapse.Item{{SKU: "sku-1", Qty: 1}}}
			at := t0.Add(time.Duration(i%60000) * time.Millisecond)
			o := &lapse.Order{OrderNo: req.OrderNo, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &at, Amount: req.Amount,
				Currency: req.Currency, UserID: req.UserID, Items: req.Items, Version: 1, CreatedAt: t0, UpdatedAt: t0,
				FiredBy: lapse.FiredByApp, RequestHash: req.Fingerprint()}
			ps = append(ps, &lapse.OrderCreateParams{
				Order:  o,
				Log:    lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, Actor: "bench", CreatedAt: t0},
				Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)},
			})
		}
		if err := s.OrderCreateMany(context.Background(), ps); err != nil {
			b.Fatal(err)
		}
	}
}
