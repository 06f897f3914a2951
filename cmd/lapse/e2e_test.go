package main_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/lapsehq/lapse/internal/testenv"
)

type order struct {
	OrderNo     string     `json:"order_no"`
	State       string     `json:"state"`
	DeadlineAt  *time.Time `json:"deadline_at"`
	ClosedAt    *time.Time `json:"closed_at"`
	CloseReason string     `json:"close_reason"`
	FiredBy     string     `json:"fired_by"`
	Version     int64      `json:"version"`

	ClosedDeadlineAt *time.Time `json:"closed_deadline_at"`
}

type page struct {
	Orders     []order `json:"orders"`
	NextCursor *string `json:"next_cursor"`
}

// TestServeEmbedded is the newcomer's path: `lapse serve` with no flags
// makes ./lapse.db, serves the API, and stops cleanly on SIGTERM.
func TestServeEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "lapse.db")); err != nil {
		t.Fatalf("no ./lapse.db: %v", err)
	}
	if code := call(t, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 100}, nil); code != 200 {
		t.Fatalf("PUT /v1/stock/tea = %d", code)
	}
	var o order
	body := map[string]any{"order_no": "hello-1", "flow": "checkout", "user_id": "u1", "amount": 1999, "currency": "CNY",
		"items": []map[string]any{{"sku": "tea", "qty": 2}}, "ttl": "1s"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code != 201 || o.State != "UNPAID" {
		t.Fatalf("POST /v1/orders = %d %+v", code, o)
	}
	deadline := *o.DeadlineAt
	waitFor(t, 10*time.Second, func() bool {
		call(t, "GET", p.URL+"/v1/orders/hello-1", nil, &o)
		return o.State == "CLOSED"
	})
	if o.CloseReason != "TIMEOUT" || o.FiredBy != "timer" || o.ClosedAt.Before(deadline) {
		t.Errorf("closed order: %+v (deadline %v)", o, deadline)
	}
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json", "/metrics"} {
		if code := call(t, "GET", p.URL+path, nil, nil); code != 200 {
			t.Errorf("GET %s = %d", path, code)
		}
	}
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Errorf("lapse serve exited with %v after SIGTERM", err)
	}
	if !strings.Contains(p.Logs(), "lapse stopped") {
		t.Errorf("no clean stop in the logs:\n%s", p.Logs())
	}

	out, err := exec.Command(lapseBin, "migrate", "--db", filepath.Join(dir, "lapse.db")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "migrated") {
		t.Errorf("lapse migrate: %v\n%s", err, out)
	}
	if out, err := exec.Command(lapseBin, "serve", "--bogus").CombinedOutput(); err == nil {
		t.Errorf("lapse serve --bogus succeeded:\n%s", out)
	}
}

// TestTenThousandOrdersClose creates 10,000 orders with a 2 s ttl through the
// API and checks that each closes once, on time, with one order.closed event.
func TestTenThousandOrdersClose(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		db := filepath.Join(dir, "lapse.db")
		tenThousand(t, startServe(t, dir, "--db", db), sqliteCounter(t, db))
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.PostgresSchema(t)
		tenThousand(t, startServe(t, t.TempDir(), "--db", dsn), serverCounter(t, dsn))
	})
	t.Run("mysql", func(t *testing.T) {
		dsn := testenv.MySQLDatabase(t)
		tenThousand(t, startServe(t, t.TempDir(), "--db", dsn), serverCounter(t, dsn))
	})
}

func tenThousand(t *testing.T, p *proc, count counter) {
	const n = 10000
	if code := call(t, "PUT", p.URL+"/v1/stock/sku-1", map[string]any{"on_hand": n}, nil); code != 200 {
		t.Fatalf("PUT /v1/stock/sku-1 = %d", code)
	}
	deadlines := make(map[string]time.Time, n)
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n || t.Failed() {
					return
				}
				no := fmt.Sprintf("TT-%05d", i)
				var o order
				body := map[string]any{"order_no": no, "flow": "checkout", "user_id": fmt.Sprintf("u%d", i%97),
					"amount": 100 + i, "currency": "CNY", "items": []map[string]any{{"sku": "sku-1", "qty": 1}}, "ttl": "2s"}
				if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code != 201 || o.DeadlineAt == nil {
					t.Errorf("POST %s = %d", no, code)
					return
				}
				mu.Lock()
				deadlines[no] = *o.DeadlineAt
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("created %d orders through the API in %v", n, time.Since(start).Round(time.Millisecond))
	waitFor(t, 60*time.Second, func() bool {
		var pg page
		call(t, "GET", p.URL+"/v1/orders?state=UNPAID&limit=1", nil, &pg)
		return len(pg.Orders) == 0
	})

	// Read every order back through the paged list.
	var lags []time.Duration
	seen := 0
	cursor := ""
	for {
		var pg page
		u := p.URL + "/v1/orders?limit=500"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		if code := call(t, "GET", u, nil, &pg); code != 200 {
			t.Fatalf("GET %s = %d", u, code)
		}
		for _, o := range pg.Orders {
			seen++
			d, ok := deadlines[o.OrderNo]
			if !ok || o.State != "CLOSED" || o.CloseReason != "TIMEOUT" || o.ClosedAt == nil {
				t.Fatalf("order %+v", o)
			}
			if o.ClosedAt.Before(d) {
				t.Errorf("%s closed %v before its deadline", o.OrderNo, d.Sub(*o.ClosedAt))
			}
			// Which deadline it closed at stays visible.
			if o.DeadlineAt != nil || o.ClosedDeadlineAt == nil || !o.ClosedDeadlineAt.Equal(d) {
				t.Fatalf("%s: deadline_at %v, closed_deadline_at %v; want null and its deadline %v", o.OrderNo, o.DeadlineAt, o.ClosedDeadlineAt, d)
			}
			lags = append(lags, o.ClosedAt.Sub(d))
		}
		if pg.NextCursor == nil {
			break
		}
		cursor = *pg.NextCursor
	}
	if seen != n {
		t.Errorf("the list showed %d orders, want %d", seen, n)
	}
	slices.Sort(lags)
	pct := func(q float64) time.Duration { return lags[int(q*float64(len(lags)-1))] }
	t.Logf("close lag over %d orders: p50 %v, p99 %v, max %v", len(lags), pct(.5), pct(.99), lags[len(lags)-1])
	// The bound is what the precise path alone achieves on a CI machine
	// whose two cores and disk also serve other packages' tests (typical
	// figures are in the log line above; the precision targets are
	// benchmarks, see the README). It fails when orders wait for the sweep
	// (10 s plus its grace) or queue behind a stalled writer.
	if worst := lags[len(lags)-1]; worst > 3*time.Second {
		t.Errorf("worst close lag %v; every order must close within a few seconds of its deadline, not wait for the sweep", worst)
	}

	c := count(t)
	if c.ordersClosed != n || c.closedRows != n || c.closedEvents != n || c.eventOrders != n {
		t.Errorf("exactly once: %+v, want %d of each", c, n)
	}
	// Every reservation comes back, once: the built-in ledger's deliveries.
	var st struct {
		OnHand   int64 `json:"on_hand"`
		Reserved int64 `json:"reserved"`
	}
	// 10,000 releases through the deliverer: on MariaDB under a loaded CI
	// machine they took over 3 minutes once.
	waitFor(t, 6*time.Minute, func() bool {
		call(t, "GET", p.URL+"/v1/stock/sku-1", nil, &st)
		return st.Reserved == 0
	})
	if st.OnHand != n {
		t.Errorf("stock after every order closed: %+v, want %d on hand, none reserved", st, n)
	}
}

// tally is what the database says about closing.
type tally struct {
	ordersClosed int64 // orders in CLOSED
	closedRows   int64 // transitions into CLOSED
	closedEvents int64 // order.closed events
	eventOrders  int64 // distinct orders with an order.closed event
}

type counter func(t *testing.T) tally

const tallySQL = `SELECT
	(SELECT count(*) FROM orders WHERE state = 'CLOSED'),
	(SELECT count(*) FROM transitions WHERE to_state = 'CLOSED'),
	(SELECT count(*) FROM outbox WHERE type = 'order.closed'),
	(SELECT count(DISTINCT order_id) FROM outbox WHERE type = 'order.closed')`

func sqliteCounter(t *testing.T, path string) counter {
	return func(t *testing.T) tally {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var c tally
		if err := db.QueryRow(tallySQL).Scan(&c.ordersClosed, &c.closedRows, &c.closedEvents, &c.eventOrders); err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// serverCounter counts on the database of a postgres:// or mysql:// dsn.
func serverCounter(t *testing.T, dsn string) counter {
	db := serverDB(t, dsn)
	return func(t *testing.T) tally {
		var c tally
		if err := db.QueryRow(tallySQL).Scan(&c.ordersClosed, &c.closedRows, &c.closedEvents, &c.eventOrders); err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// serverDB opens the database of a postgres:// or mysql:// dsn for the
// test's own queries, closed when t ends.
func serverDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	if strings.HasPrefix(dsn, "mysql://") {
		return testenv.MySQLOpen(t, dsn)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	stop := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(stop) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeRefusesOutOfRange checks that lapse serve refuses, before it
// opens anything, a value outside its setting's range (settings.go): each
// of these used to be taken, as the engine's default (a batch of 0 or -3
// claimed 500, a sweep grace of 0s waited 1s) or as given (a batch of
// 100,000,000 orders, 1,000,000 workers, a failure rate of 2).
func TestServeRefusesOutOfRange(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--outbox-retention", "-1h"}, {"--outbox-prune-interval", "0"}, {"--outbox-prune-interval", "10ms"},
		{"--claim-gather", "-1ms"}, {"--claim-gather", "2s"}, {"--delivery-close-hold", "-1s"},
		{"--batch-gather", "-1ms"}, {"--batch-gather", "101ms"},
		{"--batch", "0"}, {"--batch", "-3"}, {"--batch", "100000000"}, {"--workers", "0"}, {"--workers", "1000000"},
		{"--sweep-batch", "0"}, {"--max-sleep", "0s"}, {"--sweep-interval", "-1s"}, {"--sweep-grace", "0s"},
		{"--degraded-sweep", "0s"}, {"--stop-timeout", "-1s"}, {"--redis-timeout", "0s"}, {"--delivery-poll", "0s"},
		{"--port-connect-timeout", "0s"}, {"--port-read-timeout", "-1s"}, {"--port-concurrency", "0"},
		{"--sandbox-fail-rate", "2"}, {"--sandbox-unknown-rate", "-0.1"}, {"--probe-interval", "500ms"},
		{"--session-ttl", "0s"}, {"--approval-ttl", "0s"}, {"--second-factor-window", "-1m"},
		{"--db-work-conns", "0"}, {"--body-timeout", "0s"}, {"--audit-seal-interval", "0s"},
		{"--db-conns", "100000000"}, {"--max-in-flight", "-1"}, {"--port-concurrency", "100000000"}} {
		serveRefuses(t, args, args[0]+" must be")
	}
}

// TestServeRefusesUnknownEvents: an event pattern of the webhook or a
// broker that matches no event Lapse writes (a typo) stops lapse serve
// before it opens anything, rather than subscribing to nothing.
func TestServeRefusesUnknownEvents(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--webhook-events", "order.clsed"}, {"--nats-events", "order.*,ordr.*"}, {"--rabbitmq-events", ","}} {
		serveRefuses(t, args, args[0]+": ")
	}
}

// TestServeRefusesPaymentFlags: a secret that signs payment callbacks or a
// provider's requests, and so can mark an order paid, is refused under 16
// bytes (--hmac-secrets x used to be taken), as is a provider without one,
// before lapse serve opens anything; so are sandbox rates that add up past
// 1, which used to be refused only once the database was open, and
// payment settings that used to be ignored without a word: WeChat Pay's
// and Alipay's without the id that turns them on, a secret for a provider
// port not configured, and a merchant account for a provider not
// configured (misspelt, it left the provider meant unchecked).
func TestServeRefusesPaymentFlags(t *testing.T) {
	t.Parallel()
	gw := "gw=http://127.0.0.1:9"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hmac-secrets", "x"}, "--hmac-secrets: secret 1 is 1 bytes; at least 16"},
		{[]string{"--hmac-secrets", "0123456789abcdef,short"}, "--hmac-secrets: secret 2 is 5 bytes"},
		{[]string{"--hmac-secrets", ","}, "--hmac-secrets: give at least one secret"},
		{[]string{"--stripe-secrets", "whsec_x"}, "--stripe-secrets: secret 1 is 7 bytes"},
		{[]string{"--stripe-test-mode"}, "--stripe-test-mode needs --stripe-secrets"},
		{[]string{"--payment-providers", gw, "--payment-provider-secrets", "gw=short"}, "--payment-provider-secrets: secret 1 is 5 bytes"},
		{[]string{"--payment-providers", gw}, "--payment-providers: gw has no secret"},
		{[]string{"--sandbox", "--sandbox-fail-rate", "0.8", "--sandbox-unknown-rate", "0.8"}, "add up to more than 1"},
		{[]string{"--wechatpay-apiv3-key", "0123456789abcdef0123456789abcdef"}, "need --wechatpay-mchid, which turns WeChat Pay on"},
		{[]string{"--wechatpay-appid", "wx8888888888888888"}, "need --wechatpay-mchid"},
		{[]string{"--alipay-seller-id", "2088102147948060"}, "need --alipay-app-id, which turns Alipay on"},
		{[]string{"--payment-provider-secrets", "gw=0123456789abcdef"}, "--payment-provider-secrets: gw is not in --payment-providers"},
		{[]string{"--hmac-secrets", "0123456789abcdef", "--payment-merchants", "wechat=1900000109"},
			"--payment-merchants: wechat is not a configured payment provider (hmac)"},
		{[]string{"--payment-merchants", "sandbox=m-1"}, "--payment-merchants: sandbox: no payment provider is configured"},
		{[]string{"--payment-merchants", "sandbox"}, `"sandbox" is not NAME=VALUE`},
		{[]string{"--payment-grace", "checkout=367d"}, `--payment-grace: checkout=367d: flow "checkout": grace must be at most 366 days`},
	} {
		serveRefuses(t, tc.args, tc.want)
	}
}

// serveRefuses checks that lapse serve with args exits with status 2 and
// an error that says want, having made nothing.
func serveRefuses(t *testing.T, args []string, want string) {
	t.Helper()
	dir := t.TempDir()
	// A serve that takes the value runs until the timeout stops it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, lapseBin, append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), want) {
		t.Errorf("lapse serve %v = %v, want exit status 2 and an error saying %q:\n%s", args, err, want, out)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*")); len(entries) != 0 {
		t.Errorf("lapse serve %v left %v behind", args, entries)
	}
}
