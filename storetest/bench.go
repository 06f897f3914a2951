package storetest

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
)

// BenchOpener opens a fresh, migrated, empty store for one benchmark, with
// room for conns transactions at once, closed when b ends. settle, when not
// nil, readies the database for timing once the orders are loaded (VACUUM,
// ANALYZE), as a server that had them for a while would be.
type BenchOpener func(b *testing.B, conns int) (s lapse.Store, settle func())

// BenchTransitionMany is the burn-down of SPEC.md §7 on the stores that open
// makes: N due orders are closed with their outbox events the way the
// deadline engine does it, by claimers that each loop on Tx{OrderClaimDue,
// Plan, OrderTransitionMany} in batches of 500. Loading the orders is not
// timed. It reports closed orders per second; LAPSE_BENCH_ORDERS sets N
// (default 100,000; the spec's figure is for 1,000,000). It runs without
// subscribers and with two, whose deliveries the close writes too, once per
// number of claimers.
//
// The clock is frozen: every close is planned at the same instant, so the
// event ids (UUIDv7, whose leading bits are milliseconds) of a run share
// their time and land across the outbox id index as random ids would, as
// in the pgbench baseline of the PostgreSQL store (postgres/testdata). The
// engine reads a moving clock, whose ids append to the index; that is
// cheaper, on PostgreSQL much cheaper.
func BenchTransitionMany(b *testing.B, claimers []int, open BenchOpener) {
	n := 100_000
	if v := os.Getenv("LAPSE_BENCH_ORDERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("LAPSE_BENCH_ORDERS=%q is not a positive number", v)
		}
	}
	for _, subs := range [][]string{nil, {"webhook", "stock"}} {
		for _, c := range claimers {
			b.Run(fmt.Sprintf("subscribers=%d/claimers=%d", len(subs), c), func(b *testing.B) {
				benchBurnDown(b, open, n, c, 500, subs)
			})
		}
	}
}

func benchBurnDown(b *testing.B, open BenchOpener, n, claimers, batch int, subs []string) {
	s, settle := open(b, claimers+1)
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
				p := newOrder(fmt.Sprintf("BD-%d-%08d", round, j), created.Add(time.Duration(j)*time.Millisecond), created)
				p.Outbox[0].Subscribers = subs
				ps = append(ps, p)
			}
			if err := s.OrderCreateMany(ctx, ps); err != nil {
				b.Fatal(err)
			}
		}
		if settle != nil {
			settle()
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
