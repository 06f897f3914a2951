package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/payment"
)

// BenchmarkCallback measures signed HMAC payment callbacks through the HTTP
// API on PostgreSQL (see apibench_test.go for how Lapse runs), one callback
// per order, each signed as the provider signs it:
//
//   - max: clients send callbacks one after the other for
//     LAPSE_BENCH_SECONDS (10): callbacks/s, latency p50/p99/max;
//   - deadlines: the same while deadlines come due at 2,000/s (orders
//     written beforehand with deadlines spread over the run, the claimer
//     firing them), and a tenth of those orders paid by a callback sent at
//     its deadline, give or take 5 ms (by 8 clients of their own, not
//     counted in the rate), so that payments race closes;
//   - paced: callbacks sent at 70 % of the deadlines run's rate (or
//     LAPSE_BENCH_RATE a second), beside the deadlines, each at its time
//     whether or not earlier ones were answered: latency from each
//     callback's scheduled time; sent-late-p99-ms is the p99 of how late
//     each was sent after that time, the part of its latency that is the
//     sender's (all its workers busy, or its goroutine not yet run).
//
// Each run first sends callbacks for LAPSE_BENCH_WARMUP (2s; 0: none) as
// it then measures (the same clients, or the same pace, beside the
// deadlines), on orders of their own, and reports their p99 as
// warmup-p99-ms; the rate and latencies are those of the measured run after
// it. A server just started serves its first second or so slowly: each new
// database connection loads the catalog entries of the tables it touches
// and parses and plans each statement the first time it runs it, tens of
// milliseconds a statement while the pool fills under load, and the
// callbacks queue behind that (2026-12-03: at 2,600/s, p50 about 300 ms in
// the first 250 ms, back to about 5 ms after 1.5 s).
//
// Each run reports commits/req: the database's committed transactions
// (pg_stat_database.xact_commit, reads included) over the callbacks, the
// claimer's and the delivery loops' own included; go-cpu-us/req, the CPU
// time of this process (the server and its clients) over the callbacks;
// and pg-cpu-us/req, that of the database's sessions (read from /proc, so
// PostgreSQL on this host; its WAL writer and other background processes
// are not counted). These three count the warm-up's callbacks with the
// run's. After each run it checks
// that every callback was applied once and that no order was both PAID and
// CLOSED.
//
//	LAPSE_TEST_POSTGRES=… go test -run '^$' -bench Callback -benchtime 1x ./http/
func BenchmarkCallback(b *testing.B) {
	var deadlineRate float64 // the deadlines run's callbacks/s, for the paced run
	for _, c := range []struct {
		name      string
		clients   int
		deadlines bool
		paced     bool
	}{
		{"max/clients=16", 16, false, false},
		{"max/clients=32", 32, false, false},
		{"deadlines=2000/clients=32", 32, true, false},
		{"paced=70%/deadlines=2000", 48, true, true}, // 48 + 8 racers: within the 64 in flight
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				rate := 0.0
				if c.paced {
					rate = 0.7 * deadlineRate
					if v := os.Getenv("LAPSE_BENCH_RATE"); v != "" {
						rate, _ = strconv.ParseFloat(v, 64)
					}
					if rate <= 0 {
						b.Skip("no rate to pace at: run the deadlines benchmark first, or set LAPSE_BENCH_RATE")
					}
				}
				got := callbackRun(b, c.clients, c.deadlines, rate)
				if c.deadlines && !c.paced {
					deadlineRate = got
				}
			}
		})
	}
}

// callbackRun runs one measured run and returns its callbacks/s.
func callbackRun(b *testing.B, clients int, deadlines bool, rate float64) float64 {
	b.StopTimer()
	ctx := context.Background()
	dur := benchSeconds(b)
	d := newBenchDB(b)
	setup := d.open(b, 8)
	if err := setup.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	warm := benchWarmup(b)
	// sends is more than a loop of d sends.
	sends := func(d time.Duration) int {
		if rate > 0 {
			return int(rate*d.Seconds()) + 1
		}
		return int(10_000 * d.Seconds())
	}
	limit, warmLimit := sends(dur), sends(warm)
	far := time.Now().Add(time.Hour)
	benchOrders(b, setup, "C", limit, func(int) time.Time { return far })
	benchOrders(b, setup, "W", warmLimit, func(int) time.Time { return far })
	const dueRate = 2000
	var start time.Time
	due := 0
	dueAt := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second / dueRate) }
	if deadlines { // due through the warm-up and the run
		due = int(dueRate * (warm + dur).Seconds())
		start = time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
		benchOrders(b, setup, "D", due, dueAt)
	}
	setup.Close()
	before := d.commits(b)

	a := startAPI(b, d, benchConfig{clients: clients})
	signer := &payment.HMAC{Provider: "hmac", Secrets: [][]byte{[]byte(benchSecret)}}
	// pay sends the callback of a payment made now. A callback shed (503,
	// every in-flight slot taken) is sent again 10 ms later, as providers
	// send it again, and counted.
	var shed atomic.Int64
	pay := func(no, txn string) error {
		for {
			now := time.Now()
			body, err := json.Marshal(payment.Notice{Kind: lapse.NoticePaid, TxnID: txn, OrderNo: no, Amount: 2500, Currency: "CNY",
				Merchant: "m-1", PaidAt: now})
			if err != nil {
				return err
			}
			hdr := http.Header{"Content-Type": {"application/json"}, payment.SignatureHeader: {signer.Sign(body, now)}}
			err = a.post("/v1/payments/hmac/callback", body, hdr, http.StatusOK)
			var se *statusError
			if errors.As(err, &se) && se.status == http.StatusServiceUnavailable && shed.Add(1) < 100_000 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
	}
	callback := func(i int) error { return pay(benchOrderNo("C", i), "T-C-"+strconv.Itoa(i)) }
	warmCallback := func(i int) error { return pay(benchOrderNo("W", i), "T-W-"+strconv.Itoa(i)) }
	loop := func(d time.Duration, limit int, do func(int) error) (*latencies, time.Duration) {
		if rate > 0 {
			return openLoop(b, rate, clients, d, limit, do)
		}
		return closedLoop(b, clients, d, limit, do)
	}

	var racers sync.WaitGroup
	var raced atomic.Int64
	var racerErr atomic.Value
	if deadlines {
		if time.Now().After(start) {
			b.Fatalf("loading took past the first deadline")
		}
		time.Sleep(time.Until(start))
		// A tenth of the due orders are paid at their deadline, give or
		// take 5 ms: before it they are PAID, after it recorded late. They
		// are sent by a few clients of their own, so that a slow server
		// makes them late rather than many.
		jobs := make(chan int)
		racers.Go(func() {
			defer close(jobs)
			for i := 0; i < due; i += 10 {
				time.Sleep(time.Until(dueAt(i).Add(time.Duration(i%11-5) * time.Millisecond)))
				jobs <- i
			}
		})
		for range 8 {
			racers.Go(func() {
				for i := range jobs {
					if err := pay(benchOrderNo("D", i), "T-D-"+strconv.Itoa(i)); err != nil {
						racerErr.CompareAndSwap(nil, err)
						continue
					}
					raced.Add(1)
				}
			})
		}
	}
	cpu0 := processCPU()
	warmed := 0
	if warm > 0 {
		wl, _ := loop(warm, warmLimit, warmCallback)
		warmed = len(wl.all)
		b.ReportMetric(wl.percentile(0.99), "warmup-p99-ms")
	}
	b.StartTimer()
	lat, took := loop(dur, limit, callback)
	b.StopTimer()
	if rate > 0 {
		b.ReportMetric(percentileMS(lat.late, 0.99), "sent-late-p99-ms")
	}
	racers.Wait()
	if err, _ := racerErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	if deadlines { // every due order closes, or is paid, before the books are checked
		waitClosed(b, d, due)
	}
	proc := processCPU() - cpu0
	db, dbOK := d.backendCPU(b)
	a.stop()
	commits := d.commits(b) - before
	sent := len(lat.all)
	reportCPU(b, warmed+sent, proc, db, dbOK)
	lat.report(b, took, "callbacks/s")
	b.ReportMetric(float64(commits)/float64(warmed+sent+int(raced.Load())), "commits/req")
	b.ReportMetric(float64(shed.Load()), "shed")
	checkCallbacks(b, d, map[string]int{"C": sent, "W": warmed}, int(raced.Load()), deadlines)
	if deadlines {
		b.ReportMetric(closeLagP99(b, d, dueAt), "close-lag-p99-ms")
	}
	return float64(sent) / took.Seconds()
}

// waitClosed waits until none of the n due orders is UNPAID.
func waitClosed(b *testing.B, d *benchDB, n int) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(15 * time.Second); ; {
		var open int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders WHERE order_no LIKE 'D-%' AND state = 'UNPAID'").Scan(&open); err != nil {
			b.Fatal(err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d due orders are still UNPAID 15 s after the run", open, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkCallbacks checks the books after a run: each of the sent[prefix]
// callbacks to the orders named prefix-… applied once and its order PAID;
// each of the raced D- orders paid either applied (PAID) or late (CLOSED);
// no order both PAID and CLOSED, by its state or by its transition log.
func checkCallbacks(b *testing.B, d *benchDB, sent map[string]int, raced int, deadlines bool) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(q string) int {
		var n int
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
		return n
	}
	for prefix, sent := range sent {
		if n := count("SELECT count(*) FROM payments WHERE order_no LIKE '" + prefix + "-%' AND status = 'applied'"); n != sent {
			b.Errorf("%d callbacks to %s- orders answered 200, %d payments applied", sent, prefix, n)
		}
		if n := count("SELECT count(*) FROM orders WHERE order_no LIKE '" + prefix + "-%' AND state = 'PAID'"); n != sent {
			b.Errorf("%d callbacks to %s- orders answered 200, %d orders PAID", sent, prefix, n)
		}
	}
	if n := count("SELECT count(*) FROM payments WHERE order_no LIKE 'D-%'"); n != raced {
		b.Errorf("%d racing callbacks answered 200, %d payments recorded", raced, n)
	}
	if n := count(`SELECT count(*) FROM payments p JOIN orders o ON o.id = p.order_id
		WHERE (p.status = 'applied') <> (o.state = 'PAID')`); n != 0 {
		b.Errorf("%d payments disagree with their orders (applied but not PAID, or PAID without it)", n)
	}
	if n := count(`SELECT count(*) FROM transitions a JOIN transitions c ON c.order_id = a.order_id
		WHERE a.to_state = 'PAID' AND c.to_state = 'CLOSED'`); n != 0 {
		b.Errorf("%d orders were both PAID and CLOSED", n)
	}
	if n := count("SELECT count(*) FROM orders WHERE state = 'PAID' AND closed_at IS NOT NULL"); n != 0 {
		b.Errorf("%d PAID orders have a close time", n)
	}
	if deadlines {
		applied := count("SELECT count(*) FROM payments WHERE order_no LIKE 'D-%' AND status = 'applied'")
		b.Logf("racing callbacks: %d, applied before the close %d, recorded late %d", raced, applied, raced-applied)
	}
}

// closeLagP99 is the p99 of closed_at − deadline of the due orders that
// closed (order D-i was due at dueAt(i)), in milliseconds; it fails the run
// if one closed early.
func closeLagP99(b *testing.B, d *benchDB, dueAt func(i int) time.Time) float64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT substr(order_no, 3)::int, closed_at FROM orders WHERE order_no LIKE 'D-%' AND state = 'CLOSED'`)
	if err != nil {
		b.Fatal(err)
	}
	var lags []float64
	var i int
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&i, &at}, func() error {
		lags = append(lags, float64(at.Sub(dueAt(i)).Microseconds())/1000)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if len(lags) == 0 {
		b.Fatal("no due order closed")
	}
	slices.Sort(lags)
	if lags[0] < 0 {
		b.Errorf("an order closed %.3f ms before its deadline", -lags[0])
	}
	return lags[int(0.99*float64(len(lags)-1))]
}
