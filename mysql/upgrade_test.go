package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/column"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/storetest"
)

// TestUpgradeDropsCloseKeys starts from the schema the release before
// 0019 left, with orders, their log and outbox in it, migrates, and checks
// that the foreign keys of the log, outbox and deliveries are gone, that no
// row was lost, and that the due orders then close.
func TestUpgradeDropsCloseKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := storeAt(t, 18)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 100 {
		d := now.Add(-time.Minute)
		if i%2 == 1 {
			d = now.Add(time.Hour)
		}
		ps = append(ps, createParams(fmt.Sprintf("UP-%03d", i), &d, now.Add(-time.Hour)))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	fks := func() int {
		t.Helper()
		var n int
		if err := s.QueryRow(ctx, `SELECT count(*) FROM information_schema.referential_constraints
			WHERE constraint_schema = DATABASE() AND table_name IN ('transitions', 'outbox', 'deliveries')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := fks(); n != 3 {
		t.Fatalf("%d foreign keys on the log, outbox and deliveries before the upgrade, want 3", n)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fks(); n != 0 {
		t.Errorf("%d foreign keys on the log, outbox and deliveries after the upgrade, want none", n)
	}
	var rows [3]int
	if err := s.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM transitions),
		(SELECT count(*) FROM outbox)`).Scan(&rows[0], &rows[1], &rows[2]); err != nil || rows != [3]int{100, 100, 100} {
		t.Fatalf("orders, log rows, events = %v, %v; want 100 each", rows, err)
	}
	var moved []int64
	err := s.Tx(ctx, func(tx lapse.Store) error {
		due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: []string{"checkout"}, Limit: 500})
		if err != nil {
			return err
		}
		var ps []*lapse.OrderTransitionParams
		for _, o := range due {
			p, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, FiredBy: lapse.FiredByTimer, Deadline: true})
			if err != nil {
				return err
			}
			ps = append(ps, p)
		}
		moved, err = tx.OrderTransitionMany(ctx, ps)
		return err
	})
	if err != nil || len(moved) != 50 {
		t.Fatalf("closed %d orders after the upgrade, %v; want 50", len(moved), err)
	}
}

// TestUpgradeReviewOnce starts from the schema before 0024, writes reviews
// as an earlier Lapse could, open duplicates among them, and migrates: the
// duplicates are resolved, one of each stays open
// (storetest.RunReviewOnceUpgrade).
func TestUpgradeReviewOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := storeAt(t, 23)
	storetest.RunReviewOnceUpgrade(t, s, func(r *lapse.Review) {
		if _, err := s.Exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at, resolved_at, resolved_by)
			VALUES (?, ?, ?, NULLIF(?, 0), ?, ?, ?)`,
			r.OrderID, r.OrderNo, r.Reason, r.DeliveryID, column.Micros(r.CreatedAt), column.NullMicros(r.ResolvedAt), r.ResolvedBy); err != nil {
			t.Fatal(err)
		}
	}, func() error { return s.Migrate(ctx) })
}

// storeAt opens a store of a fresh database migrated up to version v, the
// schema an older release left, closed when t ends.
func storeAt(t *testing.T, v int64) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(context.Background(), testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.MigrateTo(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	return s
}
