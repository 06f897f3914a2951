package http_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
)

// benchSKUs is how many SKUs the stock lines of BenchmarkCreate spread over.
const benchSKUs = 1000

// BenchmarkCreate measures order creation through the HTTP API on
// PostgreSQL (see apibench_test.go for how Lapse runs), clients at once each
// creating one order after the other for LAPSE_BENCH_SECONDS (10), checkout
// orders with a 15 m ttl:
//
//   - audited: with an API key, as every service calls; each creation
//     writes its audit row in its transaction;
//   - open: with no access control at all (lapsehttp.Config.Unauthenticated),
//     hence no key to look up and no audit row: the API offers no way to
//     authenticate a key without auditing the creation;
//   - stock: each order has two stock lines over benchSKUs SKUs, reserved
//     in the built-in ledger as it is created.
//
// Each run first creates for LAPSE_BENCH_WARMUP (2s) as it then measures,
// and reports that warm-up's p99 (see BenchmarkCallback). It reports
// creates/s, latency p50/p99/max of the measured run, commits/req and CPU
// time per request over the warm-up and the run together, and checks that
// every creation answered 201 left its order, its order.created event and,
// with stock, its reservations.
//
//	LAPSE_TEST_POSTGRES=… go test -run '^$' -bench Create -benchtime 1x ./http/
func BenchmarkCreate(b *testing.B) {
	for _, c := range []struct {
		name    string
		clients int
		open    bool
		stock   bool
	}{
		{"audited/clients=32", 32, false, false},
		{"open/clients=32", 32, true, false},
		{"audited/stock/clients=32", 32, false, true},
		{"open/stock/clients=32", 32, true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				createRun(b, c.clients, c.open, c.stock)
			}
		})
	}
}

func createRun(b *testing.B, clients int, open, stock bool) {
	b.StopTimer()
	ctx := context.Background()
	dur := benchSeconds(b)
	d := newBenchDB(b)
	setup := d.open(b, 8)
	if err := setup.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if stock {
		for i := range benchSKUs {
			if _, err := setup.StockSet(ctx, &lapse.StockSetParams{SKU: benchSKU(i), OnHand: 1 << 40, At: time.Now()}); err != nil {
				b.Fatal(err)
			}
		}
	}
	key := benchKey(b, setup)
	setup.Close()
	before := d.commits(b)
	a := startAPI(b, d, benchConfig{clients: clients, unauthenticated: open})
	hdr := func() http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		if !open {
			h.Set("Authorization", "Bearer "+key)
		}
		return h
	}
	create := func(prefix string, i int) error {
		items := ""
		if stock {
			// Two different SKUs, spread over all of them.
			s1, s2 := (i*7919)%benchSKUs, (i*7919+1+i%(benchSKUs-1))%benchSKUs
			items = fmt.Sprintf(`,"items":[{"sku":%q,"qty":1},{"sku":%q,"qty":2}]`, benchSKU(s1), benchSKU(s2))
		}
		body := `{"order_no":"` + prefix + `-` + strconv.Itoa(i) + `","flow":"checkout","user_id":"u-` + strconv.Itoa(i%1000) +
			`","amount":2500,"currency":"CNY","ttl":"15m"` + items + `}`
		return a.post("/v1/orders", []byte(body), hdr(), http.StatusCreated)
	}
	cpu0 := processCPU()
	warmed := 0
	if warm := benchWarmup(b); warm > 0 {
		wl, _ := closedLoop(b, clients, warm, 1<<30, func(i int) error { return create("W", i) })
		warmed = len(wl.all)
		b.ReportMetric(wl.percentile(0.99), "warmup-p99-ms")
	}
	b.StartTimer()
	lat, took := closedLoop(b, clients, dur, 1<<30, func(i int) error { return create("N", i) })
	b.StopTimer()
	proc := processCPU() - cpu0
	db, dbOK := d.backendCPU(b)
	a.stop()
	commits := d.commits(b) - before
	n := warmed + len(lat.all)
	reportCPU(b, n, proc, db, dbOK)
	lat.report(b, took, "creates/s")
	b.ReportMetric(float64(commits)/float64(n), "commits/req")
	checkCreates(b, d, n, stock, !open)
}

func benchSKU(i int) string { return fmt.Sprintf("SKU-%04d", i) }

// checkCreates checks that n orders were created, each with its
// order.created event, with stock its three units reserved and, audited,
// its one audit row.
func checkCreates(b *testing.B, d *benchDB, n int, stock, audited bool) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(q string) int64 {
		var c int64
		if err := conn.QueryRow(ctx, q).Scan(&c); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
		return c
	}
	if c := count("SELECT count(*) FROM orders"); c != int64(n) {
		b.Errorf("%d creations answered 201, %d orders", n, c)
	}
	if c := count("SELECT count(*) FROM outbox WHERE type = 'order.created'"); c != int64(n) {
		b.Errorf("%d creations answered 201, %d order.created events", n, c)
	}
	if audited {
		q := `SELECT count(*) FROM orders o JOIN audit_log a ON a.target = 'order:' || o.order_no
			WHERE a.action = 'order.create' AND a.result = 'ok'`
		if c, all := count(q), count("SELECT count(*) FROM audit_log WHERE action = 'order.create'"); c != int64(n) || all != int64(n) {
			b.Errorf("%d creations answered 201, %d of their orders with their audit row, %d rows in all", n, c, all)
		}
	}
	if stock {
		if c := count("SELECT coalesce(sum(reserved), 0) FROM stock"); c != 3*int64(n) {
			b.Errorf("%d creations answered 201, %d units reserved, want %d", n, c, 3*n)
		}
	}
}
