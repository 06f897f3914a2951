package main_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// deadlineSecret signs the callbacks of TestPassedPayByCannotMove.
const deadlineSecret = "deadline-secret-0123456789"

// TestPassedPayByCannotMove is the hostile tester's S2 case, through the
// binary: a customer starts paying, the provider cannot close the payment
// (so the order stays UNPAID past its pay_by, to be asked again), and then
// an extension of the deadline is refused with 409, and a callback for a
// payment made after pay_by is recorded late, not applied.
func TestPassedPayByCannotMove(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--sandbox", "--sandbox-fail-rate", "1", "--payment-grace", "checkout=1s",
		"--hmac-secrets", deadlineSecret, "--delivery-poll", "100ms")
	body := map[string]any{"order_no": "PB-1", "flow": "checkout", "user_id": "u1", "amount": 1999, "currency": "CNY", "ttl": "2s"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
		t.Fatalf("create = %d", code)
	}
	var o struct {
		State string     `json:"state"`
		PayBy *time.Time `json:"pay_by"`
	}
	if code := call(t, "POST", p.URL+"/v1/orders/PB-1/payment-intents", map[string]any{"provider": "sandbox"}, &o); code != 200 || o.PayBy == nil {
		t.Fatalf("payment intent = %d %+v", code, o)
	}
	payBy := *o.PayBy
	time.Sleep(time.Until(payBy.Add(500 * time.Millisecond)))

	var prob struct{ Code, Detail string }
	if code := call(t, "PATCH", p.URL+"/v1/orders/PB-1/deadline", map[string]any{"extend_by": "1m"}, &prob); code != 409 || prob.Code != "conflict" {
		t.Fatalf("extending a passed pay_by = %d %+v, want 409", code, prob)
	}
	t.Logf("refused: %s", prob.Detail)
	if code := call(t, "PATCH", p.URL+"/v1/orders/PB-1/deadline", map[string]any{"deadline_at": time.Now().Add(time.Hour)}, nil); code != 409 {
		t.Fatalf("moving a passed pay_by to a new deadline_at = %d, want 409", code)
	}
	call(t, "GET", p.URL+"/v1/orders/PB-1", nil, &o)
	if o.State != "UNPAID" || !o.PayBy.Equal(payBy) {
		t.Fatalf("after the refusals: %+v, pay_by was %v", o, payBy)
	}

	cb := fmt.Appendf(nil, `{"kind":"paid","txn_id":"T-PB-1","order_no":"PB-1","amount":1999,"currency":"CNY","merchant":"m","paid_at":%q}`,
		payBy.Add(500*time.Millisecond).Format(time.RFC3339Nano))
	req, _ := http.NewRequest("POST", p.URL+"/v1/payments/hmac/callback", bytes.NewReader(cb))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, (&payment.HMAC{Secrets: [][]byte{[]byte(deadlineSecret)}}).Sign(cb, time.Now()))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("callback = %d %s", resp.StatusCode, answer)
	}
	var pays struct {
		Payments []paymentView
	}
	call(t, "GET", p.URL+"/v1/orders/PB-1/payments", nil, &pays)
	call(t, "GET", p.URL+"/v1/orders/PB-1", nil, &o)
	if o.State == "PAID" || len(pays.Payments) != 1 || pays.Payments[0].Status == "applied" {
		t.Fatalf("a payment made after pay_by: order %s, payments %+v", o.State, pays.Payments)
	}
}
