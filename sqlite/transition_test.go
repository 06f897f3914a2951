package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// BenchmarkTransitionMany measures the deadline engine's hot path: in one
// transaction, claim up to 500 due orders, plan their TIMEOUT and apply the
// plans with their outbox rows; repeat until none is due. Each iteration
// closes benchOrders orders, loaded beforehand into a fresh database with
// OrderCreateMany; orders/s counts the closing only.
//
// Like the engine, each transaction reads the wall clock once. The clock
// matters: event ids are UUIDv7, whose leading bits are its milliseconds, so
// a moving clock appends to the outbox id index, whereas a frozen one would
// scatter every event of the run across it.
func BenchmarkTransitionMany(b *testing.B) {
	const (
		benchOrders = 20_000
		batch       = 500
	)
	ctx := context.Background()
	checkout := flows.Checkout()
	clock := lapse.SystemClock{}
	var closed int
	var elapsed time.Duration
	for i := range b.N {
		b.StopTimer()
		s := openStore(b, filepath.Join(b.TempDir(), "lapse.db"))
		due := clock.Now().Add(-time.Hour)
		ps := make([]*lapse.OrderCreateParams, benchOrders)
		for j := range ps {
			ps[j] = newOrder(fmt.Sprintf("B-%d-%06d", i, j), due.Add(time.Duration(j)*time.Millisecond))
		}
		if err := s.OrderCreateMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		start := time.Now()
		n := 0
		for {
			var moved []int64
			now := clock.Now()
			err := s.Tx(ctx, func(tx lapse.Store) error {
				due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{checkout.Name}, Limit: batch})
				if err != nil {
					return err
				}
				plans := make([]*lapse.OrderTransitionParams, 0, len(due))
				for _, o := range due {
					p, err := checkout.Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredByTimer,
						Actor: "engine", Reason: "deadline passed", Deadline: true})
					if err != nil {
						return err
					}
					plans = append(plans, p)
				}
				moved, err = tx.OrderTransitionMany(ctx, plans)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			if len(moved) == 0 {
				break
			}
			n += len(moved)
		}
		elapsed += time.Since(start)

		b.StopTimer()
		var events int
		if err := s.ReaderDB().QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&events); err != nil {
			b.Fatal(err)
		}
		if n != benchOrders || events != 2*benchOrders {
			b.Fatalf("closed %d orders with %d events in all; want %d and %d", n, events, benchOrders, 2*benchOrders)
		}
		closed += n
		b.StartTimer()
	}
	b.ReportMetric(float64(closed)/elapsed.Seconds(), "orders/s")
}
