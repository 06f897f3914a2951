package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
	"github.com/lapsehq/lapse/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T) lapse.Store { return openStore(t, filepath.Join(t.TempDir(), "lapse.db")) }
	storetest.Run(t, open)
	storetest.RunAccess(t, open)
	// Two stores on one file, as two processes hold it.
	storetest.RunSandbox(t, func(t *testing.T) (lapse.SandboxStore, lapse.SandboxStore) {
		path := filepath.Join(t.TempDir(), "lapse.db")
		return openStore(t, path), openStore(t, path)
	})
}

// openStore opens and migrates the store at path and closes it when the test
// ends.
func openStore(tb testing.TB, path string) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Config{})
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	return s
}

// Open refuses what is not a database file, and a bad Config.
func TestOpenRefusesMemory(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:", "file::memory:"} {
		if _, err := sqlite.Open(context.Background(), path, sqlite.Config{}); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("Open(%q) = %v, want an invalid error", path, err)
		}
	}
	if _, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), sqlite.Config{BusyTimeout: -time.Second}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("Open with a negative busy timeout = %v, want an invalid error", err)
	}
}

// A path with characters that mean something in a URI names that file.
func TestOpenOddPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir?x=1#%41")
	path := filepath.Join(dir, "lapse.db")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the database is not at %s: %v", path, err)
	}
}

// base is the time the tests' orders are created at.
var base = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// newOrder builds the create params of an UNPAID checkout order due at
// deadline, the way the engine does.
func newOrder(orderNo string, deadline time.Time) *lapse.OrderCreateParams {
	req := &lapse.OrderCreate{OrderNo: orderNo, Flow: "checkout", UserID: "u-1", Amount: 1999, Currency: "CNY",
		Items: []lapse.Item{{SKU: "sku-1", Qty: 2}}, DeadlineAt: &deadline}
	o := &lapse.Order{OrderNo: orderNo, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &deadline,
		Amount: req.Amount, Currency: req.Currency, UserID: req.UserID, Items: req.Items, Version: 1,
		CreatedAt: base, UpdatedAt: base, RequestHash: req.Fingerprint()}
	return &lapse.OrderCreateParams{
		Order:  o,
		Log:    lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, Actor: "test", CreatedAt: base},
		Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)},
	}
}
