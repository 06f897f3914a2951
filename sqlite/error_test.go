package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/lapsehq/lapse"
	lapsesqlite "github.com/lapsehq/lapse/sqlite"
)

// TestUnavailable has another connection, as another process would, hold
// the file's write lock past the store's busy timeout: writes and
// transactions say the store is unavailable, with SQLite's SQLITE_BUSY
// inside, and reads still work. Once the lock is gone the store writes again.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	openStore(t, path) // migrated
	s, err := lapsesqlite.Open(ctx, path, lapsesqlite.Config{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, _, err := s.OrderCreate(ctx, newOrder("BUSY-1", base.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	lock, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	_, _, err = s.OrderCreate(ctx, newOrder("BUSY-2", base.Add(time.Hour)))
	if !errors.Is(err, lapse.ErrStoreUnavailable) || !errors.Is(err, lapse.ErrStoreBusy) || lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
		t.Errorf("OrderCreate while another process holds the lock: %v (code %s), want lapse.ErrStoreBusy", err, lapse.ErrorCode(err))
	}
	if se, ok := errors.AsType[*sqlite.Error](err); !ok || se.Code()&0xff != 5 {
		t.Errorf("OrderCreate: %v does not hold SQLITE_BUSY", err)
	}
	if err := s.Tx(ctx, func(lapse.Store) error { return nil }); !errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("Tx while another process holds the lock: %v, want lapse.ErrStoreUnavailable", err)
	}
	if _, err := s.OrderGet(ctx, "BUSY-1"); err != nil {
		t.Errorf("OrderGet while another process holds the lock: %v", err)
	}

	if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	_ = lock.Close()
	if _, _, err := s.OrderCreate(ctx, newOrder("BUSY-2", base.Add(time.Hour))); err != nil {
		t.Errorf("OrderCreate once the lock is gone: %v", err)
	}
	if _, err := s.OrderGet(ctx, "NOPE"); !errors.Is(err, lapse.ErrOrderNotFound) || errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("OrderGet of a missing order: %v, want lapse.ErrOrderNotFound", err)
	}
}
