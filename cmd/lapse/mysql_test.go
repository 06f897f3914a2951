package main_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/testenv"
)

// TestServeMySQL runs `lapse migrate`, `lapse serve` and `lapse reconcile`
// on a mysql:// database: an order closes at its deadline and gives its
// stock back, one is paid through the sandbox, whose state the database
// keeps too, and the books balance.
func TestServeMySQL(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	out, err := exec.Command(lapseBin, "migrate", "--db", dsn).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "migrated mysql://") {
		t.Fatalf("lapse migrate: %v\n%s", err, out)
	}
	p := startServe(t, t.TempDir(), "--db", dsn, "--db-conns", "4", "--db-work-conns", "4",
		"--sandbox", "--sandbox-secret", "e2e-secret", "--delivery-poll", "100ms")
	if code := call(t, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 10}, nil); code != 200 {
		t.Fatalf("PUT /v1/stock/tea = %d", code)
	}
	create := func(no, ttl string) order {
		t.Helper()
		var o order
		body := map[string]any{"order_no": no, "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY",
			"items": []map[string]any{{"sku": "tea", "qty": 2}}, "ttl": ttl}
		if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code != 201 || o.State != "UNPAID" {
			t.Fatalf("POST /v1/orders %s = %d %+v", no, code, o)
		}
		return o
	}
	var stock struct {
		OnHand   int64 `json:"on_hand"`
		Reserved int64 `json:"reserved"`
	}
	stockIs := func(onHand, reserved int64) func() bool {
		return func() bool {
			call(t, "GET", p.URL+"/v1/stock/tea", nil, &stock)
			return stock.OnHand == onHand && stock.Reserved == reserved
		}
	}

	o := create("MY-1", "1s")
	waitOrder(t, p.URL, "MY-1", 10*time.Second, func() bool {
		call(t, "GET", p.URL+"/v1/orders/MY-1", nil, &o)
		return o.State == "CLOSED"
	})
	if o.CloseReason != "TIMEOUT" || o.FiredBy != "timer" {
		t.Errorf("closed order: %+v", o)
	}
	waitFor(t, 10*time.Second, stockIs(10, 0))

	create("MY-2", "15m")
	if code := call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": "MY-2", "amount": 2500, "currency": "CNY"}, nil); code != 200 {
		t.Fatalf("POST /sandbox/pay MY-2 = %d", code)
	}
	waitOrder(t, p.URL, "MY-2", 10*time.Second, func() bool {
		var paid order
		call(t, "GET", p.URL+"/v1/orders/MY-2", nil, &paid)
		return paid.State == "PAID"
	})
	waitFor(t, 10*time.Second, stockIs(8, 0))
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Errorf("lapse serve exited with %v after SIGTERM", err)
	}

	out, err = exec.Command(lapseBin, "reconcile", "--db", dsn).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CNY (minor units): captured 2500 = applied 2500 + refunded 0 + in review 0 + not settled 0") {
		t.Errorf("lapse reconcile: %v\n%s", err, out)
	}
}
