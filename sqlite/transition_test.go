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
//
// With subscribers, every event (creation and close) fans out to that many
// deliveries, as the engine's routes would have it; the close path then
// writes them too.
func BenchmarkTransitionMany(b *testing.B) {
	for _, subs := range [][]string{nil, {"stock", "webhook"}} {
		b.Run(fmt.Sprintf("subscribers=%d", len(subs)), func(b *testing.B) { benchTransitionMany(b, subs) })
	}
}

func benchTransitionMany(b *testing.B, subs []string) {
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
			ps[j].Outbox[0].Subscribers = subs
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
					for k := range p.Outbox {
						p.Outbox[k].Subscribers = subs
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
		var events, deliveries int
		if err := s.ReaderDB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM outbox), (SELECT count(*) FROM deliveries)`).
			Scan(&events, &deliveries); err != nil {
			b.Fatal(err)
		}
		if n != benchOrders || events != 2*benchOrders || deliveries != events*len(subs) {
			b.Fatalf("closed %d orders with %d events and %d deliveries in all; want %d, %d and %d",
				n, events, deliveries, benchOrders, 2*benchOrders, 2*benchOrders*len(subs))
		}
		closed += n
		b.StartTimer()
	}
	b.ReportMetric(float64(closed)/elapsed.Seconds(), "orders/s")
}
