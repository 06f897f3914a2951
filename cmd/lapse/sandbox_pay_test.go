package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestSandboxPayRefusesBadBodies: POST /sandbox/pay, which makes a real
// (sandbox) payment, reads its body as strictly as the API does and answers
// problems; nothing it refuses pays the order.
func TestSandboxPayRefusesBadBodies(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--sandbox", "--sandbox-secret", "pay-secret")
	body := map[string]any{"order_no": "SP-1", "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY", "ttl": "15m"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
		t.Fatalf("create = %d", code)
	}
	good := `{"order_no":"SP-1","amount":2500,"currency":"CNY"}`
	for _, c := range []struct {
		name, ct, body string
		status         int
		field          string
	}{
		{"trailing garbage", "application/json", good + "x", 400, ""},
		{"a second object", "application/json", good + `{"order_no":"SP-1","amount":1,"currency":"CNY"}`, 400, ""},
		{"duplicate key", "application/json", `{"order_no":"SP-1","amount":1,"amount":2500,"currency":"CNY"}`, 400, "amount"},
		{"key in another case", "application/json", `{"order_no":"SP-1","amount":1,"Amount":2500,"currency":"CNY"}`, 400, "Amount"},
		{"unknown key", "application/json", `{"order_no":"SP-1","amount":2500,"currency":"CNY","tip":1}`, 400, "tip"},
		{"invalid UTF-8", "application/json", "{\"order_no\":\"SP-1\xff\",\"amount\":2500,\"currency\":\"CNY\"}", 400, "order_no"},
		{"missing amount", "application/json", `{"order_no":"SP-1","currency":"CNY"}`, 400, "amount"},
		{"a code that is no currency", "application/json", `{"order_no":"SP-1","amount":2500,"currency":"ZZZ"}`, 400, "currency"},
		{"ISO 4217's no currency", "application/json", `{"order_no":"SP-1","amount":2500,"currency":"XXX"}`, 400, "currency"},
		{"missing currency", "application/json", `{"order_no":"SP-1","amount":2500}`, 400, "currency"},
		{"no Content-Type", "", good, 415, "Content-Type"},
		{"form", "application/x-www-form-urlencoded", good, 415, "Content-Type"},
	} {
		req, _ := http.NewRequest("POST", p.URL+"/sandbox/pay", strings.NewReader(c.body))
		if c.ct != "" {
			req.Header.Set("Content-Type", c.ct)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var prob struct{ Code, Field string }
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(raw, &prob) != nil || prob.Field != c.field || prob.Code != "invalid" {
			t.Errorf("%s: %d %s %s, want %d problem+json about %q", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), raw, c.status, c.field)
		}
	}
	var out struct {
		Payments []paymentView
	}
	call(t, "GET", p.URL+"/v1/orders/SP-1/payments", nil, &out)
	var o order
	call(t, "GET", p.URL+"/v1/orders/SP-1", nil, &o)
	if len(out.Payments) != 0 || o.State != "UNPAID" {
		t.Fatalf("refused bodies paid: %s with %+v", o.State, out.Payments)
	}
	if code := call(t, "POST", p.URL+"/sandbox/pay", json.RawMessage(good), nil); code != 200 {
		t.Fatalf("a good body = %d", code)
	}
	call(t, "GET", p.URL+"/v1/orders/SP-1", nil, &o)
	if o.State != "PAID" {
		t.Fatalf("after paying: %s", o.State)
	}
}
