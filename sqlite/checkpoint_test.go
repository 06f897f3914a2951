package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckpointsInTheBackground: commits reach the database file through
// the store's own checkpointer, well before the WAL holds the 1,000 pages at
// which SQLite would checkpoint inside a commit, and the writer checkpoints
// itself only past fallbackCheckpointPages. A checkpoint inside a commit
// held every write, the closing of due orders too, for the length of an
// fsync, seconds on a busy disk.
func TestCheckpointsInTheBackground(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s, err := Open(ctx, path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	var pages int
	if err := s.begin(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&pages)
	}); err != nil {
		t.Fatal(err)
	}
	if pages != fallbackCheckpointPages {
		t.Errorf("the writer checkpoints itself every %d pages, want %d", pages, fallbackCheckpointPages)
	}

	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	time.Sleep(2 * checkpointInterval) // the migrations' pages are in
	before := size()
	// About 300 pages: a fraction of SQLite's own threshold.
	if err := s.begin(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "CREATE TABLE checkpoint_test (b BLOB)"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
			INSERT INTO checkpoint_test SELECT randomblob(3000) FROM n`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); size() < before+800_000; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the database file is %d bytes, %d before a commit of about 900 kB: nothing checkpointed it", size(), before)
		}
	}
}
