package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/storetest"
)

// openStore opens a migrated store on dsn, closed when tb ends.
func openStore(tb testing.TB, dsn string, cfg mysql.Config) *mysql.Store {
	tb.Helper()
	ctx := context.Background()
	s, err := mysql.Open(ctx, dsn, cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	return s
}

// The conformance suite runs its tests in parallel, each on a database of
// its own, against a server whose max_connections is 151 (MariaDB's
// default) and which other packages' tests share. At most conformanceStores
// of them hold a store at once, each with a pool of at most
// conformanceConns connections, one more while it migrates, and two of the
// admin's while it creates or drops its database: 8 × (4 + 1 + 2) = 56 at
// most, whatever -parallel allows. A test of the sandbox store holds two
// stores on one database, as two processes would, of half as many
// connections each.
const (
	conformanceStores = 8
	conformanceConns  = 4
)

var conformanceSlots = make(chan struct{}, conformanceStores)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) lapse.Store {
		conformanceSlots <- struct{}{}
		t.Cleanup(func() { <-conformanceSlots }) // runs last: after the store closes and the database is dropped
		return openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: conformanceConns})
	})
	storetest.RunSandbox(t, func(t *testing.T) (lapse.SandboxStore, lapse.SandboxStore) {
		conformanceSlots <- struct{}{}
		t.Cleanup(func() { <-conformanceSlots })
		dsn := testenv.MySQLDatabase(t)
		cfg := mysql.Config{MaxConns: conformanceConns / 2}
		return openStore(t, dsn, cfg), openStore(t, dsn, cfg)
	})
}

// TestAccessConformance runs the conformance suite of lapse.AccessStore,
// its stores sharing the slots of TestConformance's.
func TestAccessConformance(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T) lapse.Store {
		conformanceSlots <- struct{}{}
		t.Cleanup(func() { <-conformanceSlots })
		return openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: conformanceConns})
	}
	storetest.RunAccess(t, open)
	storetest.RunAuditLate(t, open)
}

// TestMigrateConcurrent migrates one database from four stores at once:
// each migration is applied once, and a fifth Migrate finds nothing to do.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := mysql.Open(ctx, dsn, mysql.Config{MaxConns: 1})
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
	s := openStore(t, dsn, mysql.Config{MaxConns: 2}) // and once more, on a migrated database
	var n, last int
	if err := s.QueryRow(ctx, "SELECT count(*), max(version) FROM lapse_migrations").Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("migrations/*.sql")
	slices.Sort(files)
	newest, _ := strconv.Atoi(filepath.Base(files[len(files)-1])[:4])
	if n != len(files) || last != newest {
		t.Errorf("lapse_migrations holds %d versions up to %d, want each of the %d files once", n, last, len(files))
	}
	var engines int
	if err := s.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = DATABASE() AND engine <> 'InnoDB'`).Scan(&engines); err != nil || engines != 0 {
		t.Errorf("%d tables are not InnoDB (%v)", engines, err)
	}
}

// TestMigrateResumes: a migration that stopped after some of its
// statements carries on from the next one.
func TestMigrateResumes(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	s := openStore(t, dsn, mysql.Config{MaxConns: 2})
	ctx := context.Background()
	// 0004 creates deliveries, delivery_attempts and effects: undo the last
	// two as if Migrate had stopped after the first.
	for _, q := range []string{"DROP TABLE effects", "DROP TABLE delivery_attempts",
		"UPDATE lapse_migrations SET statements = 1 WHERE version = 4"} {
		if _, err := s.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a stop halfway: %v", err)
	}
	if first, err := s.EffectClaim(ctx, "c", "e", time.Now()); err != nil || !first {
		t.Errorf("EffectClaim after the resumed migration = %v, %v", first, err)
	}
}

// TestMigrateRefusesNewerSchema: a database that records a migration this
// build does not have (a newer Lapse migrated it, or was migrating it when
// it stopped) is refused, naming it, and nothing is applied, rather than
// run with a schema this build does not know.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	s := openStore(t, dsn, mysql.Config{MaxConns: 2})
	ctx := context.Background()
	if err := s.MigrateCheck(ctx); err != nil {
		t.Errorf("MigrateCheck of a migrated database = %v", err)
	}
	// A newer migration stopped after its first statement, and the newest
	// known one not recorded: Migrate must refuse before it would apply it
	// again.
	for _, q := range []string{"INSERT INTO lapse_migrations (version, statements, applied_at) VALUES (9999, 1, 0)",
		"DELETE FROM lapse_migrations WHERE version = (SELECT v FROM (SELECT max(version) AS v FROM lapse_migrations WHERE version < 9999) AS newest)"} {
		if _, err := s.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var before int
	if err := s.QueryRow(ctx, "SELECT count(*) FROM lapse_migrations").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "9999") || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Migrate with an unknown migration recorded = %v, want an error naming 9999 and a newer version", err)
	}
	if err := s.MigrateCheck(ctx); err == nil || !strings.Contains(err.Error(), "9999") {
		t.Errorf("MigrateCheck with an unknown migration recorded = %v, want an error naming 9999", err)
	}
	var after int
	if err := s.QueryRow(ctx, "SELECT count(*) FROM lapse_migrations").Scan(&after); err != nil || after != before {
		t.Errorf("lapse_migrations holds %d versions after the refusal (%v), %d before: want nothing applied", after, err, before)
	}
}

// TestOpen checks what Open refuses and what it sets up.
func TestOpen(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	ctx := context.Background()
	s := openStore(t, dsn, mysql.Config{MaxConns: 2, LockTimeout: 1500 * time.Millisecond, StatementTimeout: 7 * time.Second})
	want := map[string]string{
		"time_zone":                "+00:00",
		"innodb_lock_wait_timeout": "2", // whole seconds, rounded up
		"character_set_client":     "utf8mb4",
	}
	if s.MariaDB() {
		want["tx_isolation"], want["max_statement_time"] = "READ-COMMITTED", "7"
	} else {
		want["transaction_isolation"], want["max_execution_time"] = "READ-COMMITTED", "7000"
	}
	for name, w := range want {
		var got string
		if err := s.QueryRow(ctx, "SELECT @@SESSION."+name).Scan(&got); err != nil || got != w {
			t.Errorf("@@%s = %q, %v; want %q", name, got, err, w)
		}
	}

	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for name, bad := range map[string]string{
		"not strict":             dsn + sep + "sql_mode=%27NO_ENGINE_SUBSTITUTION%27",
		"another time zone":      dsn + sep + "time_zone=%27%2B08:00%27",
		"repeatable read":        dsn + sep + "tx_isolation=%27REPEATABLE-READ%27",
		"autocommit off":         dsn + sep + "autocommit=0",
		"no foreign key checks":  dsn + sep + "foreign_key_checks=0",
		"no unique checks":       dsn + sep + "unique_checks=0",
		"a select limit":         dsn + sep + "sql_select_limit=1000",
		"read-only transactions": dsn + sep + "tx_read_only=1",
		"read-only (MySQL 8)":    dsn + sep + "transaction_read_only=ON",
		"results in latin1":      dsn + sep + "character_set_results=latin1",
		"empty strings are null": dsn + sep + "sql_mode=%27STRICT_ALL_TABLES,EMPTY_STRING_IS_NULL%27",
		"statements in latin1":   dsn + sep + "character_set_client=latin1",
		"literals in latin1":     dsn + sep + "character_set_connection=latin1",
		"changed rows only":      dsn + sep + "clientFoundRows=false",
		"local times":            dsn + sep + "loc=Local",
		"another character set":  dsn + sep + "charset=latin1",
		"no database":            strings.Replace(dsn, "/lapse_test_", "/?x=lapse_test_", 1),
		"not a mysql URL":        "postgres://root:secret@127.0.0.1:3306/lapse",
		"not a URL":              "mysql://root:secret@127.0.0.1:3306/lapse%zz",
		"a DSN of the driver":    "root@tcp(127.0.0.1:3306)/lapse",
		"a negative pool bound":  "",
		"interpolation disabled": dsn + sep + "interpolateParams=false",
	} {
		cfg := mysql.Config{}
		if bad == "" {
			bad, cfg.MaxConns = dsn, -1
		}
		if s, err := mysql.Open(ctx, bad, cfg); err == nil {
			s.Close()
			t.Errorf("Open with %s succeeded", name)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open with %s: the error repeats the password: %v", name, err)
		}
	}
	// Read-only transactions are a setting, not a demotion: Open says so
	// rather than start a store whose every write is answered 503.
	for _, v := range []string{"tx_read_only=1", "transaction_read_only=ON"} {
		_, err := mysql.Open(ctx, dsn+sep+v, mysql.Config{})
		if name, _, _ := strings.Cut(v, "="); err == nil || !strings.Contains(err.Error(), "DSN sets "+name) || errors.Is(err, lapse.ErrStoreUnavailable) {
			t.Errorf("Open with %s: %v; want an error naming the DSN's %s, not unavailable", v, err, name)
		}
	}
	// Sessions read-only by the server's default rather than the DSN are
	// refused as well, naming the variable.
	if ro, err := mysql.OpenSessionVar(ctx, dsn, mysql.Config{}, s.ReadOnlyVar(), "1"); err == nil {
		ro.Close()
		t.Errorf("Open on sessions whose transactions are read-only succeeded")
	} else if !strings.Contains(err.Error(), s.ReadOnlyVar()+"=1") || errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("Open on sessions whose transactions are read-only: %v; want an error naming %s, not unavailable", err, s.ReadOnlyVar())
	}
	// The DSN's own setting stands where the Config leaves it zero.
	other := openStore(t, dsn+sep+"innodb_lock_wait_timeout=9", mysql.Config{MaxConns: 1})
	var got string
	if err := other.QueryRow(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&got); err != nil || got != "9" {
		t.Errorf("innodb_lock_wait_timeout from the DSN = %q, %v; want 9", got, err)
	}
}

// TestKeysExact: keys compare byte for byte, as in the other stores: case,
// accents and trailing spaces make different keys.
func TestKeysExact(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, sku := range []string{"tea", "Tea", "tea ", "téa", "tea\u0301"} {
		if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: sku, OnHand: int64(len(sku)), At: now}); err != nil {
			t.Fatalf("StockSet(%q): %v", sku, err)
		}
	}
	for _, sku := range []string{"tea", "Tea", "tea ", "téa", "tea\u0301"} {
		if st, err := s.StockGet(ctx, sku); err != nil || st.SKU != sku || st.OnHand != int64(len(sku)) {
			t.Errorf("StockGet(%q) = %+v, %v", sku, st, err)
		}
	}
	for _, no := range []string{"K-a", "K-A"} {
		if _, created, err := s.OrderCreate(ctx, createParams(no, &now, now)); err != nil || !created {
			t.Errorf("OrderCreate(%s) = %v, %v; want a new order", no, created, err)
		}
	}
}

// TestRoundTrip: what the API lets through comes back as it went in:
// metadata nested deeper than MariaDB's json_valid allows, in the caller's
// bytes, and a provider's transaction id and merchant longer than a key of
// 255 bytes.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := createParams("RT-1", &now, now)
	p.Order.Metadata = json.RawMessage(`{ "z" : 1,"a":` + strings.Repeat(`{"x":`, 40) + `"日本"` + strings.Repeat("}", 40) + ` }`)
	p.Outbox = []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, p.Order, nil)}
	o, _, err := s.OrderCreate(ctx, p)
	if err != nil {
		t.Fatalf("OrderCreate with deep metadata: %v", err)
	}
	if got, err := s.OrderGet(ctx, "RT-1"); err != nil || string(got.Metadata) != string(p.Order.Metadata) {
		t.Errorf("metadata came back as %s, %v", got.Metadata, err)
	}
	if evs, err := s.OutboxList(ctx, o.ID); err != nil || len(evs) != 1 || string(evs[0].Payload) != string(p.Outbox[0].Payload) {
		t.Errorf("the event's payload did not come back as written: %v", err)
	}
	long := strings.Repeat("t", 600)
	pay := &lapse.Payment{Provider: "hmac", TxnID: long, OrderID: o.ID, OrderNo: o.OrderNo, Amount: 1, Currency: "CNY",
		Merchant: long, PaidAt: now, Status: lapse.PaymentApplied, CreatedAt: now}
	if _, created, err := s.PaymentCreate(ctx, &lapse.PaymentCreateParams{Payment: pay}); err != nil || !created {
		t.Fatalf("PaymentCreate with a long txn id = %v, %v", created, err)
	}
	if got, err := s.PaymentGet(ctx, "hmac", long); err != nil || got.Merchant != long {
		t.Errorf("PaymentGet = %v", err)
	}
}

// TestDueIndex checks the plans of the deadline engine's and the delivery
// claim's queries on a table shaped like production: most orders have no
// deadline any more, few are pending. Each must read its index in order and
// stop at the limit: no filesort.
func TestDueIndex(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var ps []*lapse.OrderCreateParams
	for i := range 5000 {
		var deadline *time.Time
		if i%50 == 0 {
			d := now.Add(time.Duration(i) * time.Second)
			deadline = &d
		}
		p := createParams(fmt.Sprintf("IX-%06d", i), deadline, now)
		p.Outbox[0].Subscribers = []string{"sink", "stock"}
		ps = append(ps, p)
	}
	if err := s.OrderCreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"orders", "deliveries"} {
		if _, err := s.Exec(ctx, "ANALYZE TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	at := now.Add(time.Hour).UnixMicro()
	for _, c := range []struct {
		name, key string
		sql       string
		args      []any
	}{
		{"claim", "orders_due_idx", mysql.OrderClaimDueSQL(1) + " FOR UPDATE SKIP LOCKED", []any{at, now.UnixMicro(), now.UnixMicro(), int64(1000), "checkout", 500}},
		{"next deadline", "orders_due_idx", mysql.OrderNextDeadlineSQL(2), []any{int64(-62135596800000000), "checkout", "groupbuy"}},
		{"next deadline from", "orders_due_idx", mysql.OrderNextDeadlineSQL(2), []any{now.UnixMicro(), "checkout", "groupbuy"}},
		{"count due", "orders_due_idx", mysql.OrderCountDueSQL, []any{at}},
		{"deadline list", "orders_due_idx", mysql.OrderDeadlineListAfterSQL, []any{at, at, 10, 500}},
		{"delivery claim", "deliveries_due_idx", mysql.DeliveryClaimSQL(1), []any{"sink", at, 100}},
	} {
		plan := explain(t, s, c.sql, c.args...)
		t.Logf("%s:\n%s", c.name, plan)
		if !strings.Contains(plan, "key="+c.key+" ") || strings.Contains(plan, "filesort") || strings.Contains(plan, "type=ALL") {
			t.Errorf("%s: does not read %s in order:\n%s", c.name, c.key, plan)
		}
		if c.name == "delivery claim" && !strings.Contains(plan, "key=deliveries_pending_order_idx ") {
			t.Errorf("%s: the test for an earlier pending delivery does not probe deliveries_pending_order_idx:\n%s", c.name, plan)
		}
	}
}

// explain returns EXPLAIN's rows for query, one line each of name=value.
func explain(t *testing.T, s *mysql.Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.Query(context.Background(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var lines []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		var line []string
		for i, c := range cols {
			line = append(line, c+"="+vals[i].String)
		}
		lines = append(lines, strings.Join(line, " ")+" ")
	}
	return strings.Join(lines, "\n")
}

// createParams builds a new UNPAID checkout order the way the engine does.
func createParams(orderNo string, deadline *time.Time, now time.Time) *lapse.OrderCreateParams {
	req := &lapse.OrderCreate{
		OrderNo: orderNo, Flow: "checkout", UserID: "u-" + orderNo[len(orderNo)-2:], Amount: 1999, Currency: "CNY",
		Items: []lapse.Item{{SKU: "sku-1", Qty: 1}}, DeadlineAt: deadline, Metadata: json.RawMessage(`{"channel":"test"}`),
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

// TestSQLMode: the store's sessions run under its own sql_mode, whatever
// the server's default, or under the DSN's when it is strict and has no
// flag that changes how the store's SQL parses or compares; any other
// sql_mode in the DSN is refused before a connection is made.
func TestSQLMode(t *testing.T) {
	dsn := testenv.MySQLDatabase(t)
	ctx := context.Background()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	mode := func(s *mysql.Store) string {
		t.Helper()
		var got string
		if err := s.QueryRow(ctx, "SELECT @@SESSION.sql_mode").Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	const own = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

	for _, bad := range []string{
		"STRICT_ALL_TABLES,ANSI_QUOTES",
		"STRICT_ALL_TABLES,PIPES_AS_CONCAT",
		"STRICT_ALL_TABLES,ORACLE",
		"STRICT_ALL_TABLES,ANSI",
		"STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES",
		"STRICT_ALL_TABLES,PAD_CHAR_TO_FULL_LENGTH",
		"STRICT_ALL_TABLES,HIGH_NOT_PRECEDENCE",
		"STRICT_ALL_TABLES,IGNORE_SPACE",
		"STRICT_ALL_TABLES,SIMULTANEOUS_ASSIGNMENT",
		"STRICT_ALL_TABLES,NO_UNSIGNED_SUBTRACTION",
		"STRICT_ALL_TABLES,EMPTY_STRING_IS_NULL",
		"STRICT_ALL_TABLES,MSSQL",
		"STRICT_ALL_TABLES,SOMETHING_NEW",
		"NO_ENGINE_SUBSTITUTION",
	} {
		s, err := mysql.Open(ctx, dsn+sep+"sql_mode=%27"+bad+"%27", mysql.Config{MaxConns: 1})
		if err == nil {
			t.Errorf("Open with sql_mode=%s succeeded, session sql_mode %q", bad, mode(s))
			s.Close()
		} else if !strings.Contains(err.Error(), "sql_mode") {
			t.Errorf("Open with sql_mode=%s: %v, want an error about sql_mode", bad, err)
		}
	}
	for _, bad := range []string{"%27STRICT_ALL_TABLES%27,ANSI_QUOTES", "STRICT_ALL_TABLES,ANSI_QUOTES", "%27STRICT_ALL_TABLES", "%27STRICT_ALL_TABLES%5C%27%27"} {
		if s, err := mysql.Open(ctx, dsn+sep+"sql_mode="+bad, mysql.Config{MaxConns: 1}); err == nil {
			t.Errorf("Open with sql_mode=%s succeeded, session sql_mode %q", bad, mode(s))
			s.Close()
		}
	}

	// No sql_mode in the DSN: the store's own.
	s := openStore(t, dsn, mysql.Config{MaxConns: 1})
	if got := mode(s); got != own {
		t.Errorf("session sql_mode = %q, want the store's %q", got, own)
	}
	// A DSN's that the store can run under stands.
	s = openStore(t, dsn+sep+"sql_mode=%27strict_all_tables,only_full_group_by%27", mysql.Config{MaxConns: 1})
	if got := mode(s); got != "ONLY_FULL_GROUP_BY,STRICT_ALL_TABLES" {
		t.Errorf("session sql_mode from the DSN = %q, want ONLY_FULL_GROUP_BY,STRICT_ALL_TABLES", got)
	}

	// A server whose default parses "…" as a name and || as concatenation:
	// the store's session does neither. The server is shared with other
	// tests, so its default changes only while Open makes its connections
	// (one, kept: MaxConns 1), and only by flags that Lapse's SQL never
	// meets.
	admin := testenv.MySQLAdmin(t)
	var global string
	if err := admin.QueryRowContext(ctx, "SELECT @@GLOBAL.sql_mode").Scan(&global); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if _, err := admin.ExecContext(context.Background(), "SET GLOBAL sql_mode = ?", global); err != nil {
			t.Errorf("restore the server's sql_mode %q: %v", global, err)
		}
	}
	t.Cleanup(restore)
	if _, err := admin.ExecContext(ctx, "SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',ANSI_QUOTES,PIPES_AS_CONCAT')"); err != nil {
		t.Fatal(err)
	}
	s, err := mysql.Open(ctx, dsn, mysql.Config{MaxConns: 1})
	restore()
	if err != nil {
		t.Fatalf("Open on a server whose sql_mode has ANSI_QUOTES: %v", err)
	}
	defer s.Close()
	if got := mode(s); got != own {
		t.Errorf("session sql_mode under a server default with ANSI_QUOTES = %q, want the store's %q", got, own)
	}
	var concat, quoted string
	if err := s.QueryRow(ctx, `SELECT 'a' || 'b', "x"`).Scan(&concat, &quoted); err != nil || concat != "0" || quoted != "x" {
		t.Errorf(`SELECT 'a' || 'b', "x" = %q, %q, %v; want 0 (OR) and x (a string)`, concat, quoted, err)
	}
}

// TestSessionParamsOneEach: a DSN parameter that would set a variable the
// store sets or checks under another spelling, or set two variables at
// once, is refused. The driver sets them all in one SET, in no fixed
// order, so that such a DSN would pass Open's check on some connections
// and not hold on others: each is opened several times.
func TestSessionParamsOneEach(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	ctx := context.Background()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, bad := range []string{
		"SQL_MODE=%27STRICT_ALL_TABLES,PIPES_AS_CONCAT%27",
		"Time_Zone=%27%2B08:00%27",
		"TX_ISOLATION=%27REPEATABLE-READ%27",
		"innodb_lock_wait_timeout=5%2C%20sql_mode%3D%27STRICT_ALL_TABLES%2CANSI_QUOTES%27",
		"max_statement_time=10%2C%20time_zone%3D%27%2B08:00%27",
		"sql_mode=%27STRICT_ALL_TABLES%27%2C%20time_zone%3D%27%2B08:00%27",
	} {
		for range 8 {
			s, err := mysql.Open(ctx, dsn+sep+bad, mysql.Config{MaxConns: 1})
			if err == nil {
				s.Close()
				t.Errorf("Open with %s succeeded", bad)
				break
			}
		}
	}
	// One value each, in lower case, stands.
	s := openStore(t, dsn+sep+"innodb_lock_wait_timeout=7&sql_mode=%27STRICT_ALL_TABLES%27", mysql.Config{MaxConns: 1})
	var wait, mode string
	if err := s.QueryRow(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.sql_mode").Scan(&wait, &mode); err != nil || wait != "7" || mode != "STRICT_ALL_TABLES" {
		t.Errorf("session = %s, %s, %v; want 7 and STRICT_ALL_TABLES", wait, mode, err)
	}
}
