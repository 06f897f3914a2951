package main_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLedgersSwitchedOff: --stock-ledger=false and --coupon-ledger=false
// mean that new orders hold nothing, never that what orders already hold is
// forgotten (S4). lapse close with the ledgers off closes an order that
// holds, and lapse serve (ledgers on) gives its stock and coupon back; then
// lapse serve restarts with the ledgers off, says at start what orders still
// hold, and gives it back when their deadline passes.
func TestLedgersSwitchedOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir, "--delivery-poll", "100ms")
	if code := call(t, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 10}, nil); code != http.StatusOK {
		t.Fatalf("PUT /v1/stock/tea = %d", code)
	}
	for _, c := range []string{"C1", "C2"} {
		if code := call(t, "POST", p.URL+"/v1/coupons", map[string]any{"code": c}, nil); code != http.StatusCreated {
			t.Fatalf("POST /v1/coupons %s = %d", c, code)
		}
	}
	create := func(no, coupon string, qty int64, ttl string) {
		t.Helper()
		body := map[string]any{"order_no": no, "flow": "checkout", "user_id": "u-off", "amount": 1000, "currency": "CNY",
			"items": []map[string]any{{"sku": "tea", "qty": qty}}, "coupon": coupon, "ttl": ttl}
		if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != http.StatusCreated {
			t.Fatalf("POST /v1/orders %s = %d", no, code)
		}
	}
	create("K-1", "C1", 2, "1h")
	create("K-2", "C2", 3, "12s")
	coupon := func(base, code string) string {
		t.Helper()
		var c struct {
			Status string `json:"status"`
		}
		if got := call(t, "GET", base+"/v1/coupons/"+code, nil, &c); got != http.StatusOK {
			t.Fatalf("GET /v1/coupons/%s = %d", code, got)
		}
		return c.Status
	}

	out, errOut, code := tool(t, dir, "", "close", "--order", "K-1", "--reason", "the customer asked by phone",
		"--stock-ledger=false", "--coupon-ledger=false")
	if code != 0 || !strings.Contains(out, "1 closed") {
		t.Fatalf("lapse close = %d:\n%s%s", code, out, errOut)
	}
	waitFor(t, 30*time.Second, func() bool {
		_, reserved := stockOf(t, p.URL, "tea")
		return reserved == 3 && coupon(p.URL, "C1") == "available"
	})

	if err := p.Terminate(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, dir, "--delivery-poll", "100ms", "--stock-ledger=false", "--coupon-ledger=false")
	for _, want := range []string{"the stock ledger is off", `"skus_reserved":1`, "the coupon ledger is off", `"coupons_locked":1`} {
		if !strings.Contains(p.Logs(), want) {
			t.Errorf("the start's log does not say %q:\n%s", want, p.Logs())
		}
	}
	waitFor(t, 30*time.Second, func() bool {
		_, reserved := stockOf(t, p.URL, "tea")
		return reserved == 0 && coupon(p.URL, "C2") == "available"
	})
	if onHand, _ := stockOf(t, p.URL, "tea"); onHand != 10 {
		t.Errorf("tea on hand %d after the closes, want 10", onHand)
	}
}
