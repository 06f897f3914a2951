package main_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type paymentView struct {
	TxnID    string `json:"txn_id"`
	Status   string `json:"status"`
	Amount   int64  `json:"amount"`
	RefundID string `json:"refund_id"`
}

// TestSandboxPayments runs the payment path through `lapse serve --sandbox`:
// a customer pays in time (PAID), pays a closed order (refunded), starts
// paying before the deadline and pays within the grace (PAID), or starts and
// never pays (closed after the closer asked the sandbox); the merchant
// refunds an order in two parts; then `lapse reconcile` finds every payment
// applied or refunded.
func TestSandboxPayments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir, "--sandbox", "--sandbox-secret", "e2e-secret", "--payment-grace", "checkout=3s", "--delivery-poll", "100ms")
	create := func(no, ttl string) order {
		t.Helper()
		var o order
		body := map[string]any{"order_no": no, "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY", "ttl": ttl}
		if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code != 201 {
			t.Fatalf("POST /v1/orders %s = %d", no, code)
		}
		return o
	}
	pay := func(no string) {
		t.Helper()
		if code := call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": no, "amount": 2500, "currency": "CNY"}, nil); code != 200 {
			t.Fatalf("POST /sandbox/pay %s = %d", no, code)
		}
	}
	state := func(no string) string {
		var o order
		call(t, "GET", p.URL+"/v1/orders/"+no, nil, &o)
		return o.State
	}
	payments := func(no string) []paymentView {
		var out struct{ Payments []paymentView }
		call(t, "GET", p.URL+"/v1/orders/"+no+"/payments", nil, &out)
		return out.Payments
	}

	// In time: the sandbox's signed callback pays the order before /pay returns.
	create("SB-1", "15m")
	pay("SB-1")
	if st, ps := state("SB-1"), payments("SB-1"); st != "PAID" || len(ps) != 1 || ps[0].Status != "applied" {
		t.Errorf("SB-1 after paying: %s, %+v", st, ps)
	}
	// Paying a closed order: recorded late, refunded through the sandbox.
	create("SB-2", "1s")
	waitFor(t, 10*time.Second, func() bool { return state("SB-2") == "CLOSED" })
	pay("SB-2")
	waitFor(t, 20*time.Second, func() bool {
		ps := payments("SB-2")
		return len(ps) == 1 && ps[0].Status == "refunded"
	})
	// Started in time, paid after the deadline but within the grace: PAID.
	o3 := create("SB-3", "2s")
	var started order
	if code := call(t, "POST", p.URL+"/v1/orders/SB-3/payment-intents", map[string]any{"provider": "sandbox"}, &started); code != 200 ||
		!started.DeadlineAt.Equal(o3.DeadlineAt.Add(3*time.Second)) {
		t.Fatalf("payment-intents = %d, %+v", code, started)
	}
	time.Sleep(time.Until(o3.DeadlineAt.Add(500 * time.Millisecond)))
	if st := state("SB-3"); st != "UNPAID" {
		t.Fatalf("SB-3 is %s within its grace", st)
	}
	pay("SB-3")
	if st, ps := state("SB-3"), payments("SB-3"); st != "PAID" || len(ps) != 1 || ps[0].Status != "applied" {
		t.Errorf("SB-3 paid within the grace: %s, %+v", st, ps)
	}
	// Started, never paid: after the grace the closer closes the payment at
	// the sandbox, then the order.
	create("SB-4", "2s")
	if code := call(t, "POST", p.URL+"/v1/orders/SB-4/payment-intents", map[string]any{"provider": "sandbox"}, nil); code != 200 {
		t.Fatalf("payment-intents SB-4 = %d", code)
	}
	waitFor(t, 15*time.Second, func() bool { return state("SB-4") == "CLOSED" })
	// The sandbox refuses to take a payment for it now.
	if code := call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": "SB-4", "amount": 2500, "currency": "CNY"}, nil); code != 409 {
		t.Errorf("paying SB-4 after the closer closed it at the sandbox = %d, want 409", code)
	}

	// The merchant refunds part of SB-1, then the rest, through the sandbox.
	if code := call(t, "POST", p.URL+"/v1/orders/SB-1/refunds", map[string]any{"amount": 1000, "reason": "one cup broken"}, nil); code != 201 {
		t.Fatalf("POST refunds = %d", code)
	}
	waitOrder(t, p.URL, "SB-1", 20*time.Second, func() bool { return state("SB-1") == "PAID" })
	if code := call(t, "POST", p.URL+"/v1/orders/SB-1/refunds", map[string]any{"amount": 1501}, nil); code != 409 {
		t.Errorf("refund beyond what is left = %d, want 409", code)
	}
	if code := call(t, "POST", p.URL+"/v1/orders/SB-1/refunds", map[string]any{"amount": 1500}, nil); code != 201 {
		t.Fatalf("POST refunds = %d", code)
	}
	waitOrder(t, p.URL, "SB-1", 20*time.Second, func() bool { return state("SB-1") == "REFUNDED" })

	out, err := exec.Command(lapseBin, "reconcile", "--db", filepath.Join(dir, "lapse.db")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CNY (minor units): captured 7500 = applied 2500 + refunded 5000 + in review 0 + not settled 0") {
		t.Errorf("lapse reconcile: %v\n%s", err, out)
	}
}

// waitOrder waits for cond like waitFor and, when it is not met, shows the
// order with its transitions, payments, refunds and deliveries.
func waitOrder(t *testing.T, base, no string, timeout time.Duration, cond func() bool) {
	t.Helper()
	stop := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(stop) {
			var b strings.Builder
			for _, path := range []string{"", "/transitions", "/payments", "/refunds", "/deliveries"} {
				var raw json.RawMessage
				code := call(t, "GET", base+"/v1/orders/"+no+path, nil, &raw)
				fmt.Fprintf(&b, "GET /v1/orders/%s%s = %d %s\n", no, path, code, raw)
			}
			t.Fatalf("condition not met within %v:\n%s", timeout, b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
