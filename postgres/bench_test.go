package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// BenchmarkTransitionMany is the burn-down of SPEC.md §7: N due orders are
// closed with their outbox events the way the deadline engine does it, by
// claimers that each loop on Tx{OrderClaimDue, Plan, OrderTransitionMany}
// in batches of 500. It reports closed orders per second; set
// LAPSE_BENCH_ORDERS to change N (default 100,000; the spec's figure is for
// 1,000,000). It runs without subscribers and with two, whose deliveries
// the close writes in the same statement.
//
// testdata/pgbench holds the same close as one raw SQL statement for
// pgbench, the baseline this benchmark is measured against. On a local
// server, add sslmode=disable to the DSN of both: TLS costs the two of them
// alike, and it is not what either measures.
func BenchmarkTransitionMany(b *testing.B) {
	n := 100_000
	if v := os.Getenv("LAPSE_BENCH_ORDERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("LAPSE_BENCH_ORDERS=%q is not a positive number", v)
		}
	}
	// With subscribers, every order.created and order.closed event fans out
	// to that many deliveries, written by the same statements.
	for _, subs := range [][]string{nil, {"webhook", "stock"}} {
		for _, claimers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("subscribers=%d/claimers=%d", len(subs), claimers), func(b *testing.B) { benchBurnDown(b, n, claimers, 500, subs) })
		}
	}
}

func benchBurnDown(b *testing.B, n, claimers, batch int, subs []string) {
	dsn := testenv.PostgresSchema(b)
	s := openStore(b, dsn, postgres.Config{MaxConns: int32(claimers + 1)})
	conn := connect(b, dsn)
	ctx := context.Background()
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	flow := flows.Checkout()
	var closed int
	var elapsed time.Duration
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		const chunk = 50_000
		for i := 0; i < n; i += chunk {
			var ps []*lapse.OrderCreateParams
			for j := i; j < min(i+chunk, n); j++ {
				d := created.Add(time.Duration(j) * time.Millisecond)
				p := createParams(fmt.Sprintf("BD-%d-%08d", round, j), &d, created)
				p.Outbox[0].Subscribers = subs
				ps = append(ps, p)
			}
			if err := s.OrderCreateMany(ctx, ps); err != nil {
				b.Fatal(err)
			}
		}
		// Autovacuum would have settled orders created long before their
		// deadline; do it now so that it does not run during the timing.
		if _, err := conn.Exec(ctx, "VACUUM ANALYZE orders, transitions, outbox, deliveries"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range claimers {
			wg.Go(func() {
				moved := 0
				for {
					var got int
					err := s.Tx(ctx, func(tx lapse.Store) error {
						due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{flow.Name}, Limit: batch})
						if err != nil {
							return err
						}
						ps := make([]*lapse.OrderTransitionParams, 0, len(due))
						for _, o := range due {
							p, err := flow.Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredByTimer, Deadline: true})
							if err != nil {
								return err
							}
							for i := range p.Outbox {
								p.Outbox[i].Subscribers = subs
							}
							ps = append(ps, p)
						}
						ids, err := tx.OrderTransitionMany(ctx, ps)
						got = len(ids)
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
					if got == 0 {
						break
					}
					moved += got
				}
				mu.Lock()
				closed += moved
				mu.Unlock()
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
	}
	if closed != n*round {
		b.Fatalf("closed %d orders, want %d", closed, n*round)
	}
	b.ReportMetric(float64(closed)/elapsed.Seconds(), "orders/s")
}
