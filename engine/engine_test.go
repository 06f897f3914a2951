package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// eachStore runs fn once per store kind, each with a fresh, migrated store;
// a kind whose server the environment does not name is skipped (see testenv).
func eachStore(t *testing.T, fn func(t *testing.T, open func() lapse.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "lapse.db")
		fn(t, func() lapse.Store {
			s, err := sqlite.Open(context.Background(), path, sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.PostgresSchema(t)
		fn(t, func() lapse.Store { return openPostgres(t, dsn) })
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLDatabase(t)
		fn(t, func() lapse.Store {
			// Bounded: MariaDB's max_connections is 151, and the engine's
			// tests run side by side.
			s, err := mysql.Open(context.Background(), dsn, mysql.Config{MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

func newEngine(t *testing.T, s lapse.Store, clk lapse.Clock) *engine.Engine {
	t.Helper()
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

var app = engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func checkout(orderNo string, ttl time.Duration) *lapse.OrderCreate {
	return &lapse.OrderCreate{OrderNo: orderNo, Flow: "checkout", UserID: "u1", Amount: 1000, Currency: "CNY",
		Items: []lapse.Item{{SKU: "tea", Qty: 1}}, TTL: ttl}
}

func create(t *testing.T, e *engine.Engine, req *lapse.OrderCreate) *lapse.Order {
	t.Helper()
	o, created, err := e.CreateOrder(ctxT(t), req, app)
	if err != nil || !created {
		t.Fatalf("CreateOrder(%s) = created %v, %v", req.OrderNo, created, err)
	}
	return o
}

// history returns how many transitions into each state and how many outbox
// events of each type an order has.
func history(t *testing.T, e *engine.Engine, orderNo string) (into map[lapse.State]int, events map[string]int, trs []*lapse.TransitionRecord) {
	t.Helper()
	trs, err := e.Transitions(ctxT(t), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := e.Events(ctxT(t), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	into, events = map[lapse.State]int{}, map[string]int{}
	for _, tr := range trs {
		into[tr.ToState]++
	}
	for _, ev := range evs {
		events[ev.Type]++
	}
	return into, events, trs
}

func orderNo(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

// openPostgres opens a migrated PostgreSQL store on dsn, closed when t ends.
func openPostgres(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dsn, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
