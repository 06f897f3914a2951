package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/sqlite"
)

// createWithSubs loads n orders whose order.created events fan out to subs,
// all due at base.
func createWithSubs(tb testing.TB, s *sqlite.Store, prefix string, n int, subs ...string) {
	tb.Helper()
	ps := make([]*lapse.OrderCreateParams, n)
	for i := range ps {
		ps[i] = newOrder(fmt.Sprintf("%s-%06d", prefix, i), base.Add(time.Hour))
		ps[i].Outbox[0].Subscribers = subs
	}
	if err := s.OrderCreateMany(context.Background(), ps); err != nil {
		tb.Fatal(err)
	}
}

// deliverAll claims the due deliveries of sub, limit at a time, and
// finishes each as done at now, calling each (when not nil) on it.
func deliverAll(t *testing.T, s *sqlite.Store, now time.Time, limit int, sub string, each func(d *lapse.Delivery)) {
	t.Helper()
	ctx := context.Background()
	for {
		ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: now.Add(time.Minute), Subscribers: []string{sub}, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: d.Attempts,
				Status: lapse.DeliveryDone, At: now, Record: lapse.DeliveryAttempt{StartedAt: now, Outcome: lapse.OutcomeOK}}); err != nil {
				t.Fatal(err)
			}
			if each != nil {
				each(d)
			}
		}
	}
}

// The claim reads the partial due index in due order, without a sort for one
// subscriber, checks order with the pending-order index, and
// the counts read only partial indexes, both on an empty database and on an
// analyzed one where most deliveries are done.
func TestDeliveryQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	check := func(when string) {
		t.Helper()
		for _, nsubs := range []int{1, 3} {
			args := []any{int64(0)}
			for i := range nsubs {
				args = append(args, fmt.Sprintf("sub%d", i))
			}
			plan := queryPlan(t, s, sqlite.DeliveryDueQuery(nsubs), append(args, 100)...)
			// The engine claims for one subscriber at a time; a claim for
			// several merges their index ranges with a sort.
			if !strings.Contains(plan, "deliveries_due_idx") || (nsubs == 1 && strings.Contains(plan, "TEMP B-TREE")) ||
				!strings.Contains(plan, "SEARCH e USING INTEGER PRIMARY KEY") {
				t.Errorf("%s, %d subscribers: claim plan is %q; want reads of deliveries_due_idx (without a sort for one subscriber) and a rowid probe of each predecessor", when, nsubs, plan)
			}
		}
		for _, status := range []string{"pending", "dead"} {
			plan := queryPlan(t, s, `SELECT count(*) FROM deliveries WHERE status = '`+status+`'`)
			if !strings.Contains(plan, "COVERING INDEX deliveries_") {
				t.Errorf("%s: count of %s deliveries plan is %q; want a covering partial index", when, status, plan)
			}
		}
	}
	check("empty")

	createWithSubs(t, s, "Q", 2000, "sink")
	deliverAll(t, s, base, 1900, "sink", nil)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	check("analyzed")
}

// A claim returns deliveries earliest first even when the order of their
// ids differs, and its leases are what DeliveryGet reads back.
func TestDeliveryClaimOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	var ps []*lapse.OrderCreateParams
	for i := range 5 {
		p := newOrder(fmt.Sprintf("CO-%d", i), base.Add(time.Hour))
		p.Outbox[0].CreatedAt = base.Add(time.Duration(5-i) * time.Second) // the newest order is due first
		p.Outbox[0].Subscribers = []string{"sink"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	now := base.Add(time.Minute)
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: now, Owner: "w", LeaseUntil: now.Add(time.Minute), Subscribers: []string{"sink"}, Limit: 3})
	if err != nil || len(ds) != 3 {
		t.Fatalf("DeliveryClaim = %d, %v", len(ds), err)
	}
	for i, d := range ds {
		if want := fmt.Sprintf("CO-%d", 4-i); d.OrderNo != want || d.Event == nil || d.Event.OrderNo != want {
			t.Errorf("claim[%d] = %s (event %+v), want %s", i, d.OrderNo, d.Event, want)
		}
		got, err := s.DeliveryGet(ctx, d.ID)
		if err != nil || got.Attempts != 1 || got.LeaseOwner != "w" || !got.UpdatedAt.Equal(now) || !got.NextAttemptAt.Equal(now.Add(time.Minute)) {
			t.Errorf("DeliveryGet(%d) = %+v, %v", d.ID, got, err)
		}
	}
}

// A failed finish inside Tx writes nothing, and a dead delivery with no
// review, outbox rows or delivery id still finishes.
func TestDeliveryFinishInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	createWithSubs(t, s, "FT", 1, "sink")
	ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: base, Owner: "w", LeaseUntil: base.Add(time.Minute), Subscribers: []string{"sink"}, Limit: 1})
	if err != nil || len(ds) != 1 {
		t.Fatalf("DeliveryClaim = %d, %v", len(ds), err)
	}
	d := ds[0]
	finish := &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: 1, Status: lapse.DeliveryDead, Error: "refused", At: base,
		Record: lapse.DeliveryAttempt{StartedAt: base, Outcome: lapse.OutcomeRefused}}
	err = s.Tx(ctx, func(tx lapse.Store) error {
		if _, err := tx.DeliveryFinish(ctx, finish); err != nil {
			return err
		}
		_, err := tx.DeliveryFinish(ctx, finish) // the lease is gone now
		return err
	})
	if !errors.Is(err, lapse.ErrLeaseLost) {
		t.Fatalf("Tx = %v, want ErrLeaseLost", err)
	}
	if got, _ := s.DeliveryGet(ctx, d.ID); got.Status != lapse.DeliveryPending || got.LeaseOwner != "w" {
		t.Errorf("after a rolled-back finish: %+v", got)
	}
	if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: d.ID, Owner: "w", Attempt: 1, Status: "gone"}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("finish with an unknown status = %v", err)
	}
	got, err := s.DeliveryFinish(ctx, finish)
	if err != nil || got.Status != lapse.DeliveryDead || got.LeaseUntil != nil {
		t.Fatalf("DeliveryFinish = %+v, %v", got, err)
	}
	if c, err := s.DeliveryCount(ctx); err != nil || c.Dead != 1 || c.Pending != 0 || c.OldestPending != nil {
		t.Errorf("DeliveryCount = %+v, %v", c, err)
	}
}

// BenchmarkDeliveryClaim measures the delivery workers' claim: lease up to
// 100 due deliveries at a time until none is left, among 5,000 events that
// each fan out to four subscribers. "all" claims for the four; "1of4" for
// one, as when the claimers of the other three lag and their due deliveries
// stay in front of the due index. deliveries/s counts the claiming only.
func BenchmarkDeliveryClaim(b *testing.B) {
	all := []string{"a", "b", "c", "d"}
	b.Run("all", func(b *testing.B) { benchDeliveryClaim(b, all, all) })
	b.Run("1of4", func(b *testing.B) { benchDeliveryClaim(b, all, all[1:2]) })
}

func benchDeliveryClaim(b *testing.B, subs, claimFor []string) {
	const (
		benchOrders = 5_000
		batch       = 100
	)
	ctx := context.Background()
	var claimed int
	var elapsed time.Duration
	for i := range b.N {
		b.StopTimer()
		s := openStore(b, filepath.Join(b.TempDir(), "lapse.db"))
		createWithSubs(b, s, fmt.Sprintf("BC-%d", i), benchOrders, subs...)
		b.StartTimer()
		start := time.Now()
		for {
			ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: base, Owner: "w", LeaseUntil: base.Add(time.Minute),
				Subscribers: claimFor, Limit: batch})
			if err != nil {
				b.Fatal(err)
			}
			if len(ds) == 0 {
				break
			}
			claimed += len(ds)
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(claimed)/elapsed.Seconds(), "deliveries/s")
}
