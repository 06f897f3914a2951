package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/storetest"
)

// openStore opens a migrated store on a fresh schema, closed when tb ends.
func openStore(tb testing.TB, dsn string, cfg postgres.Config) *postgres.Store {
	tb.Helper()
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	return s
}

// The conformance suite runs its tests in parallel, each on its own store,
// against a server that other packages' tests share in CI. At most
// conformanceStores of them hold a store at once, each with a pool of at
// most conformanceConns connections and one more while it creates or drops
// its schema: 8 × (4 + 1) = 40 connections at most of the server's 100,
// whatever -parallel (GOMAXPROCS by default) allows. Four connections are
// as many as the suite's concurrent tests have workers. A test of the
// sandbox store holds two stores on one schema, as two processes would, of
// half as many connections each.
const (
	conformanceStores = 8
	conformanceConns  = 4
)

var conformanceSlots = make(chan struct{}, conformanceStores)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) lapse.Store {
		conformanceSlots <- struct{}{}
		t.Cleanup(func() { <-conformanceSlots }) // runs last: after the store closes and the schema is dropped
		return openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: conformanceConns})
	})
	storetest.RunSandbox(t, func(t *testing.T) (lapse.SandboxStore, lapse.SandboxStore) {
		conformanceSlots <- struct{}{}
		t.Cleanup(func() { <-conformanceSlots })
		dsn := testenv.PostgresSchema(t)
		cfg := postgres.Config{MaxConns: conformanceConns / 2}
		return openStore(t, dsn, cfg), openStore(t, dsn, cfg)
	})
}

// TestAccessConformance runs the suite of lapse.AccessStore on stores that
// share the conformance slots, so that the server's connections stay within
// the bound above whichever of the two runs.
func TestAccessConformance(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T) lapse.Store {
		conformanceSlots <- struct{}{}
		t.Cleanup(func() { <-conformanceSlots })
		return openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: conformanceConns})
	}
	storetest.RunAccess(t, open)
	storetest.RunAuditLate(t, open)
}

func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := postgres.Open(ctx, dsn, postgres.Config{MaxConns: 1})
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			defer s.Close()
			if err := s.Migrate(ctx); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	s := openStore(t, dsn, postgres.Config{}) // and once more, on a migrated schema
	conn := connect(t, dsn)
	var n, last int
	if err := conn.QueryRow(ctx, "SELECT count(*), max(version) FROM lapse_migrations").Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	// Numbers may skip (a migration another branch holds); each file counts once.
	files, _ := filepath.Glob("migrations/*.sql")
	newest := 0
	for _, f := range files {
		v, err := strconv.Atoi(filepath.Base(f)[:4])
		if err != nil {
			t.Fatalf("migration %s: %v", f, err)
		}
		newest = max(newest, v)
	}
	if n != len(files) || last != newest {
		t.Errorf("lapse_migrations holds %d versions up to %d, want each of the %d files once, up to %d", n, last, len(files), newest)
	}
	if err := s.Ping(ctx); err != nil {
		t.Error(err)
	}
}

// TestMigrateRefusesNewerSchema: a schema that records a migration this
// build does not have (a newer Lapse migrated it) is refused, naming it,
// and nothing is applied, rather than run with a schema this build does not
// know. The same holds when the newer migration was under way.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	s := openStore(t, dsn, postgres.Config{})
	if err := s.MigrateCheck(ctx); err != nil {
		t.Errorf("MigrateCheck of a migrated database = %v", err)
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "INSERT INTO lapse_migrations (version) VALUES (9999)"); err != nil {
		t.Fatal(err)
	}
	// The newest known migration not recorded: Migrate must refuse before
	// it would apply it again.
	if _, err := conn.Exec(ctx, "DELETE FROM lapse_migrations WHERE version = (SELECT max(version) FROM lapse_migrations WHERE version < 9999)"); err != nil {
		t.Fatal(err)
	}
	var before int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM lapse_migrations").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "9999") || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Migrate with an unknown migration recorded = %v, want an error naming 9999 and a newer version", err)
	}
	if err := s.MigrateCheck(ctx); err == nil || !strings.Contains(err.Error(), "9999") {
		t.Errorf("MigrateCheck with an unknown migration recorded = %v, want an error naming 9999", err)
	}
	var after int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM lapse_migrations").Scan(&after); err != nil || after != before {
		t.Errorf("lapse_migrations holds %d versions after the refusal (%v), %d before: want nothing applied", after, err, before)
	}
}

// TestSearchPath checks that the tables live in the DSN's schema.
func TestSearchPath(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	openStore(t, dsn, postgres.Config{})
	conn := connect(t, dsn)
	var schema string
	var n int
	err := conn.QueryRow(context.Background(), `SELECT current_schema(), count(*) FROM information_schema.tables
		WHERE table_name IN ('orders', 'transitions', 'outbox', 'lapse_migrations') AND table_schema = current_schema()`).Scan(&schema, &n)
	if err != nil || n != 4 || !strings.HasPrefix(schema, "lapse_test_") {
		t.Errorf("%d of the 4 tables are in schema %q (%v), want all in the test schema", n, schema, err)
	}
}

// TestOpenRefusesSession: a session whose default isolation level is not
// READ COMMITTED, or whose session_replication_role turns the foreign keys'
// triggers off, is refused at Open, whether the DSN sets it or the role
// does (ALTER ROLE … SET).
func TestOpenRefusesSession(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	for _, bad := range []string{
		"default_transaction_isolation=repeatable%20read",
		"default_transaction_isolation=serializable",
		"session_replication_role=replica",
	} {
		if s, err := postgres.Open(ctx, dsn+"&"+bad, postgres.Config{MaxConns: 1}); err == nil {
			s.Close()
			t.Errorf("Open with %s succeeded", bad)
		} else if !strings.Contains(err.Error(), strings.Split(bad, "=")[0]) {
			t.Errorf("Open with %s: %v, want an error that names the setting", bad, err)
		}
	}
	role := testenv.PostgresRole(t, dsn)
	admin := connect(t, dsn)
	if _, err := admin.Exec(ctx, `ALTER ROLE "`+role.Name+`" SET default_transaction_isolation = 'serializable'`); err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.Open(ctx, role.DSN, postgres.Config{MaxConns: 1}); err == nil {
		s.Close()
		t.Error("Open as a role whose default isolation is serializable succeeded")
	}
	openStore(t, dsn+"&default_transaction_isolation=read%20committed", postgres.Config{MaxConns: 1})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	s := openStore(t, dsn+"&lock_timeout=1234", postgres.Config{StatementTimeout: 7 * time.Second, IdleInTransactionTimeout: -1})
	want := map[string]string{
		"statement_timeout":                   "7s",
		"lock_timeout":                        "1234ms", // the DSN's, as the Config leaves it zero
		"idle_in_transaction_session_timeout": "0",
		"application_name":                    "lapse",
	}
	for name, w := range want {
		if got, err := s.Setting(ctx, name); err != nil || got != w {
			t.Errorf("%s = %q, %v; want %q", name, got, err, w)
		}
	}
	if _, err := postgres.Open(ctx, dsn, postgres.Config{MaxConns: -1}); err == nil {
		t.Error("Open with a negative MaxConns succeeded")
	}
	// An idle Claimer looks at the next deadline every --max-sleep (1s):
	// its connection, idle that long, must not cost a ping each time.
	for d, want := range map[time.Duration]bool{time.Second: false, 2 * time.Second: false, postgres.PingAfterIdle + time.Millisecond: true} {
		if got := s.WouldPing(d); got != want {
			t.Errorf("a connection idle for %v is pinged: %v; want %v", d, got, want)
		}
	}
}

// TestDueIndex checks that the deadline engine's queries read the due index
// of order_deadlines on tables shaped like production: most orders have no
// deadline any more, few are pending.
func TestDueIndex(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	// Every fifth order pending: the deadline table is large enough that
	// only its index finds the earliest deadlines cheaply.
	for i := range 50000 {
		var deadline *time.Time
		if i%5 == 0 {
			d := now.Add(time.Duration(i) * time.Second)
			deadline = &d
		}
		ps = append(ps, createParams(fmt.Sprintf("IX-%06d", i), deadline, now))
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE orders, order_deadlines"); err != nil {
		t.Fatal(err)
	}
	flowsArg := []string{"checkout"}
	queries := []struct {
		name      string
		sql       string
		args      []any
		indexOnly bool
	}{
		{"claim", postgres.OrderClaimDueSQL, []any{now.Add(time.Hour), flowsArg, 500, time.Time{}, int64(0)}, false},
		{"claim locked", postgres.OrderClaimDueLockedSQL, []any{now.Add(time.Hour), flowsArg, 500, time.Time{}, int64(0)}, false},
		{"claim from", postgres.OrderClaimDueLockedSQL, []any{now.Add(time.Hour), flowsArg, 500, now, int64(1000)}, false},
		{"next deadline", postgres.OrderNextDeadlineSQL, []any{flowsArg, time.Time{}}, true},
		{"next deadline from", postgres.OrderNextDeadlineSQL, []any{flowsArg, now}, true},
		{"count due", postgres.OrderCountDueSQL, []any{now.Add(time.Hour)}, false},
		{"deadline list", postgres.OrderDeadlineListSQL, []any{500, now, int64(0)}, false},
	}
	// pgx prepares statements, and after a few runs PostgreSQL may switch a
	// prepared statement to its generic plan: check both.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		for _, c := range queries {
			plan := explain(t, conn, c.sql, c.args...)
			// The due index, and (below) in deadline order where order
			// matters: a sort would mean reading every due order to return
			// the first few.
			if !strings.Contains(plan, "order_deadlines_due_idx") {
				t.Errorf("%s, %s: does not scan order_deadlines_due_idx:\n%s", c.name, mode, plan)
			}
			if strings.Contains(plan, "Sort") {
				t.Errorf("%s, %s: sorts:\n%s", c.name, mode, plan)
			}
			if c.indexOnly && !strings.Contains(plan, "Index Only Scan") {
				t.Errorf("%s, %s: not an index-only scan:\n%s", c.name, mode, plan)
			}
			// A claim starts its scan where it reads on from, (deadline,
			// id), rather than filtering the entries before it.
			if strings.HasPrefix(c.name, "claim") && !planHasIndexCond(plan, "ROW(deadline_at, order_id) > ROW(") {
				t.Errorf("%s, %s: the scan does not start at (From, FromID):\n%s", c.name, mode, plan)
			}
		}
	}
}

// planHasIndexCond reports whether an Index Cond line of plan holds cond.
func planHasIndexCond(plan, cond string) bool {
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, cond) {
			return true
		}
	}
	return false
}

func explain(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	return strings.Join(lines, "\n")
}

// connect opens a plain connection on dsn, closed when tb ends.
func connect(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// createParams builds a new UNPAID checkout order the way the engine does.
func createParams(orderNo string, deadline *time.Time, now time.Time) *lapse.OrderCreateParams {
	req := &lapse.OrderCreate{
		OrderNo: orderNo, Flow: "checkout", UserID: "u-" + orderNo[len(orderNo)-2:], Amount: 1999, Currency: "CNY",
		Items: []lapse.Item{{SKU: "sku-1", Qty: 1}}, DeadlineAt: deadline, Metadata: json.RawMessage(`{"channel":"bench"}`),
	}
	o := &lapse.Order{
		OrderNo: req.OrderNo, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: deadline, Amount: req.Amount,
		Currency: req.Currency, UserID: req.UserID, Items: req.Items, Metadata: req.Metadata, Version: 1,
		CreatedAt: now, UpdatedAt: now, FiredBy: lapse.FiredByApp, RequestHash: req.Fingerprint(),
	}
	return &lapse.OrderCreateParams{
		Order:  o,
		Log:    lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, Actor: "test", CreatedAt: now},
		Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)},
	}
}
