package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/payment"
)

// TestThreeProcessesOneKilled runs three `lapse serve` on one PostgreSQL,
// and on one MySQL, makes 12,000 orders due at the same instant, and
// SIGKILLs one process while they close them: every order must close
// exactly once, with one event. It runs beside the package's other
// parallel tests: most of its time is the lead before the deadline.
func TestThreeProcessesOneKilled(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) { threeProcessesOneKilled(t, testenv.PostgresSchema(t)) })
	t.Run("mysql", func(t *testing.T) { threeProcessesOneKilled(t, testenv.MySQLDatabase(t)) })
}

func threeProcessesOneKilled(t *testing.T, dsn string) {
	var procs []*proc
	for range 3 {
		procs = append(procs, startServe(t, t.TempDir(), "--db", dsn, "--batch", "200"))
	}

	const n = 12000
	// A lead of a minute and a half: each creation through the API is an
	// audited write, and 12,000 of them take several seconds on the 2-core
	// machine alone, and many times that while CI runs other packages
	// beside this one.
	deadline := time.Now().Add(90 * time.Second).UTC().Truncate(time.Millisecond)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 24 {
		p := procs[w%3]
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n || t.Failed() {
					return
				}
				body := map[string]any{"order_no": fmt.Sprintf("K-%05d", i), "flow": "checkout", "user_id": "u1",
					"amount": 500, "currency": "EUR", "deadline_at": deadline.Format(time.RFC3339Nano)}
				if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
					t.Errorf("POST = %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if time.Now().After(deadline) {
		t.Fatalf("creating %d orders took past their deadline", n)
	}
	t.Logf("created %d orders with %v to spare", n, time.Until(deadline).Round(time.Second))

	db := serverDB(t, dsn)
	closed := func() int64 {
		var c int64
		if err := db.QueryRow(`SELECT count(*) FROM transitions WHERE to_state = 'CLOSED'`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Kill the second process once the burn-down is under way.
	time.Sleep(time.Until(deadline))
	waitFor(t, 60*time.Second, func() bool { return closed() >= n/5 })
	procs[1].Kill()
	killedAt := closed()
	t.Logf("SIGKILLed one process with %d of %d orders closed", killedAt, n)
	if killedAt >= n {
		t.Logf("the burn-down finished before the kill landed; the test proves less than it should")
	}

	waitFor(t, 120*time.Second, func() bool { return closed() >= n })
	t.Logf("all closed %v after their deadline", time.Since(deadline).Round(10*time.Millisecond))
	time.Sleep(500 * time.Millisecond) // let a straggler (there must be none) show itself
	c := serverCounter(t, dsn)(t)
	if c.ordersClosed != n || c.closedRows != n || c.closedEvents != n || c.eventOrders != n {
		t.Errorf("exactly once: %+v, want %d of each", c, n)
	}
	rows, err := db.Query(`SELECT actor, count(*) FROM transitions WHERE to_state = 'CLOSED' GROUP BY actor ORDER BY actor`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var byActor []string
	for rows.Next() {
		var a string
		var k int64
		if err := rows.Scan(&a, &k); err != nil {
			t.Fatal(err)
		}
		byActor = append(byActor, fmt.Sprintf("%s: %d", a, k))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("closed by: %v", byActor)
	for _, i := range []int{0, 2} {
		if err := procs[i].Terminate(30 * time.Second); err != nil {
			t.Errorf("survivor %d exited with %v", i, err)
		}
	}
}

// TestDeliveriesTakenOverAfterKill runs two `lapse serve` on one PostgreSQL
// under checkout traffic with stock, a 1 s ttl, payments in time and late
// payments refunded through a gateway both processes share, and SIGKILLs one
// of them while it holds delivery leases (a refund under way at least, and
// a release of stock when it can be caught at one).
// Within 15 s of the kill the other has taken over every delivery the dead
// one held: every closed order's stock is released exactly once, every paid
// order's consumed once, nothing is reserved but by open orders, every late
// payment is refunded once at the gateway, and `lapse reconcile` exits 0.
func TestDeliveriesTakenOverAfterKill(t *testing.T) {
	dsn := testenv.PostgresSchema(t)
	const secret = "takeover-gateway-secret-0123456789"
	var gateway atomic.Pointer[payment.Sandbox]
	// While frozen, the gateway answers no refund: a refund the test saw
	// under way at the victim is still under way when the kill lands.
	var frozen sync.RWMutex
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/refunds" {
			// A slow gateway, so that refunds are under way when the kill
			// lands; it drops a refund whose caller went away first (which
			// the server sees once it has read the body).
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			select {
			case <-time.After(500 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			frozen.RLock()
			frozen.RUnlock()
			if r.Context().Err() != nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		gateway.Load().Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(gw.Close)
	args := []string{"--db", dsn, "--delivery-poll", "100ms", "--hmac-secrets", secret,
		"--payment-providers", "hmac=" + gw.URL, "--payment-provider-secrets", "hmac=" + secret}
	survivor := startServe(t, t.TempDir(), args...) // first: it migrates
	victim := startServe(t, t.TempDir(), args...)
	// The gateway's callbacks go to the victim while it lives, so that it
	// writes the late payments and takes up their refunds at once; then to
	// the survivor.
	callbacks := atomic.Pointer[url.URL]{}
	victimURL, err := url.Parse(victim.URL)
	if err != nil {
		t.Fatal(err)
	}
	callbacks.Store(victimURL)
	relay := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(callbacks.Load()) }})
	t.Cleanup(relay.Close)
	sb := payment.NewSandbox(payment.SandboxConfig{Provider: "hmac", Secret: []byte(secret),
		CallbackURL: relay.URL + "/v1/payments/hmac/callback"})
	gateway.Store(sb)
	pay := func(no string, amount int64, when string) {
		p, err := sb.Pay(context.Background(), no, amount, "CNY")
		for try := 0; errors.Is(err, payment.ErrSandboxCallback) && try < 100; try++ {
			time.Sleep(50 * time.Millisecond) // it went to the victim as it died: the gateway sends it again
			err = sb.Redeliver(context.Background(), p.TxnID)
		}
		if err != nil {
			t.Errorf("paying %s %s: %v", no, when, err)
		}
	}

	const onHand = 1_000_000
	skus := []string{"sku-a", "sku-b", "sku-c", "sku-d"}
	for _, s := range skus {
		if code := call(t, "PUT", survivor.URL+"/v1/stock/"+s, map[string]any{"on_hand": onHand}, nil); code != 200 {
			t.Fatalf("PUT /v1/stock/%s = %d", s, code)
		}
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(query string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}

	// Traffic: orders through both processes (the survivor alone once the
	// victim is gone); every 10th paid at once, every 40th paid after it
	// closed, which the gateway refunds.
	var (
		next, created atomic.Int64
		killed, stop  atomic.Bool
		lateQ         = make(chan string, 1000)
		workers, paid sync.WaitGroup
	)
	amount := func(i int) int64 { return 100 + int64(i%50) }
	for range 4 {
		workers.Go(func() {
			for !stop.Load() && !t.Failed() {
				i := int(next.Add(1) - 1)
				no := fmt.Sprintf("TO-%05d", i)
				body := map[string]any{"order_no": no, "flow": "checkout", "user_id": fmt.Sprintf("u%d", i%31), "amount": amount(i),
					"currency": "CNY", "items": []map[string]any{{"sku": skus[i%len(skus)], "qty": 1 + i%3}}, "ttl": "1s"}
				code := 0
				if i%2 == 1 && !killed.Load() {
					code = callQuiet("POST", victim.URL+"/v1/orders", body)
				}
				if code != 200 && code != 201 { // the survivor's turn, or the victim is gone: the same create again
					code = callQuiet("POST", survivor.URL+"/v1/orders", body)
				}
				if code != 200 && code != 201 {
					t.Errorf("POST /v1/orders %s = %d", no, code)
					return
				}
				created.Add(1)
				switch i % 40 {
				case 0, 10, 20, 30:
					pay(no, amount(i), "in time")
				case 5:
					lateQ <- no
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	paid.Go(func() {
		for no := range lateQ {
			var o order
			for give := time.Now().Add(20 * time.Second); o.State != "CLOSED"; time.Sleep(50 * time.Millisecond) {
				if t.Failed() {
					return
				}
				if call(t, "GET", survivor.URL+"/v1/orders/"+no, nil, &o); time.Now().After(give) {
					t.Errorf("%s is still %s 20 s after it was created with a 1 s ttl", no, o.State)
					return
				}
			}
			var i int
			fmt.Sscanf(no, "TO-%d", &i)
			pay(no, amount(i), "late")
		}
	})
	finish := sync.OnceFunc(func() {
		stop.Store(true)
		workers.Wait()
		close(lateQ)
		paid.Wait()
	})
	t.Cleanup(finish)

	// Kill the victim a few seconds in, while it has a refund under way and,
	// if it can be caught at it (its attempts take milliseconds), a release
	// of stock.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	owner := fmt.Sprintf("%s/%d", host, victim.cmd.Process.Pid)
	time.Sleep(3 * time.Second)
	holding := func() (refunds, stock int64) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE subscriber = 'refund'), count(*) FILTER (WHERE subscriber = 'stock')
			FROM deliveries WHERE status = 'pending' AND lease_owner = $1`, owner).Scan(&refunds, &stock); err != nil {
			t.Error(err) // not Fatal: the gateway may be frozen
		}
		return refunds, stock
	}
	// A refund seen under way is looked at again with the gateway frozen,
	// so that it cannot end between that look and the kill. The second look
	// waits a second: a refund whose request passed the gateway before the
	// freeze still ends, in milliseconds, and only one that stays is stuck
	// at the frozen gateway until the kill.
	isFrozen := false
	for stopAt := time.Now().Add(5 * time.Second); !t.Failed(); time.Sleep(2 * time.Millisecond) {
		if refunds, stock := holding(); refunds > 0 && (stock > 0 || time.Now().After(stopAt)) {
			frozen.Lock()
			time.Sleep(time.Second)
			if refunds, _ = holding(); refunds > 0 {
				isFrozen = true
				break
			}
			frozen.Unlock()
		}
		if time.Now().After(stopAt.Add(20 * time.Second)) {
			break
		}
	}
	if !t.Failed() {
		victim.Kill()
	}
	if isFrozen {
		frozen.Unlock()
	}
	if t.Failed() {
		return
	}
	killedAt := time.Now()
	killed.Store(true)
	survivorURL, err := url.Parse(survivor.URL)
	if err != nil {
		t.Fatal(err)
	}
	callbacks.Store(survivorURL)
	held := map[string]int64{}
	rows, err := conn.Query(ctx, `SELECT subscriber, count(*) FROM deliveries WHERE status = 'pending' AND lease_owner = $1 GROUP BY subscriber`, owner)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var sub string
		var n int64
		if err := rows.Scan(&sub, &n); err != nil {
			t.Fatal(err)
		}
		held[sub] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	t.Logf("SIGKILLed the victim after %d orders; it held the leases of %v", created.Load(), held)
	if held["refund"] == 0 {
		t.Errorf("the victim held no refund when it was killed; the test proves less than it should")
	}
	if held["stock"] == 0 {
		t.Logf("the victim held no stock release when it was killed; the test proves less than it could")
	}
	time.Sleep(time.Second) // traffic goes on through the survivor
	finish()

	// Everything the victim held is taken over and settles within 15 s.
	var out []byte
	for {
		settled := count(`SELECT count(*) FROM orders WHERE state = 'UNPAID'`) == 0 &&
			count(`SELECT count(*) FROM deliveries WHERE status <> 'done'`) == 0 &&
			count(`SELECT count(*) FROM payments WHERE status NOT IN ('applied', 'refunded')`) == 0
		if settled {
			out, err = exec.Command(lapseBin, "reconcile", "--db", dsn).CombinedOutput()
			if err == nil {
				break
			}
		}
		if time.Since(killedAt) > 15*time.Second {
			out, err := exec.Command(lapseBin, "reconcile", "--db", dsn).CombinedOutput()
			t.Fatalf("not settled within 15 s of the kill: %d orders unpaid, %d deliveries not done (%d leased by the victim), %d payments open, %d units of stock reserved; lapse reconcile: %v\n%s",
				count(`SELECT count(*) FROM orders WHERE state = 'UNPAID'`), count(`SELECT count(*) FROM deliveries WHERE status <> 'done'`),
				count(`SELECT count(*) FROM deliveries WHERE status = 'pending' AND lease_owner = $1`, owner),
				count(`SELECT count(*) FROM payments WHERE status NOT IN ('applied', 'refunded')`),
				count(`SELECT coalesce(sum(reserved), 0) FROM stock`), err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("settled and reconciled %v after the kill", time.Since(killedAt).Round(10*time.Millisecond))

	// Exactly once: one release per closed order, one consume per paid one.
	if bad := count(`SELECT count(*) FROM orders o WHERE
		(SELECT count(*) FROM stock_moves m WHERE m.order_id = o.id AND m.kind = 'release') <> (CASE WHEN o.state = 'CLOSED' THEN 1 ELSE 0 END)
		OR (SELECT count(*) FROM stock_moves m WHERE m.order_id = o.id AND m.kind = 'consume') <> (CASE WHEN o.state = 'PAID' THEN 1 ELSE 0 END)
		OR (SELECT count(*) FROM stock_moves m WHERE m.order_id = o.id AND m.kind = 'reserve') <> 1`); bad != 0 {
		t.Errorf("%d orders did not reserve once and then release (closed) or consume (paid) once", bad)
	}
	if bad := count(`SELECT count(*) FROM stock s WHERE s.reserved <> coalesce((SELECT sum(m.qty) FROM stock_moves m
		JOIN orders o ON o.id = m.order_id WHERE m.sku = s.sku AND m.kind = 'reserve' AND o.state = 'UNPAID'), 0)
		OR s.on_hand <> $1 - coalesce((SELECT sum(m.qty) FROM stock_moves m WHERE m.sku = s.sku AND m.kind = 'consume'), 0)`, onHand); bad != 0 {
		t.Errorf("%d SKUs reserve more or less than their open orders hold, or lost stock", bad)
	}
	if twice := count(`SELECT count(*) FROM (SELECT delivery_id FROM delivery_attempts WHERE outcome IN ('ok', 'applied')
		GROUP BY delivery_id HAVING count(*) > 1) x`); twice != 0 {
		t.Errorf("%d deliveries succeeded more than once", twice)
	}
	refunded := map[string]int{}
	for _, r := range sb.Refunds() {
		refunded[r.TxnID]++
	}
	for txn, n := range refunded {
		if n != 1 {
			t.Errorf("payment %s refunded %d times at the gateway", txn, n)
		}
	}
	late := count(`SELECT count(*) FROM payments WHERE status = 'refunded'`)
	if late == 0 || int64(len(refunded)) != late {
		t.Errorf("%d payments refunded in Lapse, %d at the gateway; want as many, and some", late, len(refunded))
	}
	if !strings.Contains(string(out), "in review 0 + not settled 0") {
		t.Errorf("lapse reconcile:\n%s", out)
	}
	t.Logf("%d orders (%d closed, %d paid), %d late payments refunded", created.Load(), count(`SELECT count(*) FROM orders WHERE state = 'CLOSED'`),
		count(`SELECT count(*) FROM orders WHERE state = 'PAID'`), late)
	if err := survivor.Terminate(30 * time.Second); err != nil {
		t.Errorf("the survivor exited with %v", err)
	}
}
