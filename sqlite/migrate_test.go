package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
	"github.com/lapsehq/lapse/storetest"
)

// Migrate is idempotent, and a reopened file keeps its orders and schema.
func TestMigrateTwiceAndReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	o, _, err := s.OrderCreate(ctx, newOrder("K-1", base))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openStore(t, path) // migrates again
	got, err := s2.OrderGet(ctx, "K-1")
	if err != nil {
		t.Fatalf("OrderGet after reopening: %v", err)
	}
	if got.ID != o.ID || got.Version != 1 || !got.DeadlineAt.Equal(*o.DeadlineAt) {
		t.Errorf("reopened order = %+v, want %+v", got, o)
	}
	var versions []int64
	rows, err := s2.ReaderDB().QueryContext(ctx, `SELECT version FROM lapse_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	files, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, f := range files {
		v, err := strconv.ParseInt(f.Name()[:4], 10, 64)
		if err != nil {
			t.Fatalf("migration %s: %v", f.Name(), err)
		}
		want = append(want, v)
	}
	if !slices.Equal(versions, want) {
		t.Errorf("lapse_migrations holds versions %v, want %v, each once", versions, want)
	}
}

// A database migrated by a newer build is refused rather than run with a
// schema this build does not know.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	if err := s.MigrateCheck(ctx); err != nil {
		t.Errorf("MigrateCheck of a migrated database = %v", err)
	}
	db := openRaw(t, path)
	if _, err := db.ExecContext(ctx, `INSERT INTO lapse_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "9999") {
		t.Errorf("Migrate with an unknown migration recorded = %v, want an error naming 9999", err)
	}
	if err := s.MigrateCheck(ctx); err == nil || !strings.Contains(err.Error(), "9999") {
		t.Errorf("MigrateCheck with an unknown migration recorded = %v, want an error naming 9999", err)
	}
}

// TestUpgradeReviewOnce undoes migration 0028 on a migrated file (its
// indexes and columns dropped, its record deleted), writes reviews as an
// earlier Lapse could, open duplicates among them, and migrates again: the
// duplicates are resolved, one of each stays open
// (storetest.RunReviewOnceUpgrade).
func TestUpgradeReviewOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	db := openRaw(t, path)
	for _, q := range []string{`DROP INDEX reviews_open_once_key`, `DROP INDEX group_members_txn_idx`,
		`ALTER TABLE group_members DROP COLUMN captured_amount`, `ALTER TABLE group_members DROP COLUMN captured_currency`,
		`DELETE FROM lapse_migrations WHERE version = 28`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	storetest.RunReviewOnceUpgrade(t, s, func(r *lapse.Review) {
		if _, err := db.ExecContext(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at, resolved_at, resolved_by)
			VALUES (?, ?, ?, nullif(?, 0), ?, ?, ?)`,
			r.OrderID, r.OrderNo, r.Reason, r.DeliveryID, column.Micros(r.CreatedAt), column.NullMicros(r.ResolvedAt), r.ResolvedBy); err != nil {
			t.Fatal(err)
		}
	}, func() error { return s.Migrate(ctx) })
}

// openRaw opens the database file at path without a store, closed when t
// ends: for what a test writes past the store.
func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
