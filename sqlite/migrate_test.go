package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}; !slices.Equal(versions, want) {
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
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO lapse_migrations (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "9999") {
		t.Errorf("Migrate with an unknown migration recorded = %v, want an error naming 9999", err)
	}
}
