package http_test

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
)

// arrayProperties returns the names of the properties that the OpenAPI
// document types as arrays, in any schema.
func arrayProperties(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch n := v.(type) {
		case map[string]any:
			if props, ok := n["properties"].(map[string]any); ok {
				for name, p := range props {
					if s, ok := p.(map[string]any); ok && s["type"] == "array" {
						out[name] = true
					}
				}
			}
			for _, c := range n {
				walk(c)
			}
		case []any:
			for _, c := range n {
				walk(c)
			}
		}
	}
	walk(doc)
	return out
}

// nullLists returns the paths in answer body of the properties that are
// arrays in the document but null in the answer.
func nullLists(t *testing.T, arrays map[string]bool, body []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch n := v.(type) {
		case map[string]any:
			for k, c := range n {
				if c == nil && arrays[k] {
					out = append(out, path+"."+k)
				}
				walk(path+"."+k, c)
			}
		case []any:
			for _, c := range n {
				walk(path+"[]", c)
			}
		}
	}
	walk("", v)
	return out
}

// TestAnswersShowEmptyListsAsArrays: an answer shows a list that is empty
// as [], never null, whichever route answers: an order without items, as
// the payment intent answered it, among them.
func TestAnswersShowEmptyListsAsArrays(t *testing.T) {
	t.Parallel()
	arrays := arrayProperties(t)
	for _, name := range []string{"items", "members", "orders", "payments"} {
		if !arrays[name] {
			t.Fatalf("the document has no array property %s", name)
		}
	}
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"NL-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"1m"}`).want(t, http.StatusCreated)
	e.do("POST", "/v1/groups", `{"group_id":"NL-G","organiser":"u","price":100,"currency":"CNY","ttl":"1h"}`).want(t, http.StatusCreated)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/orders/NL-1/payment-intents", `{"provider":"hmac"}`},
		{"GET", "/v1/orders/NL-1", ""},
		{"GET", "/v1/orders?user_id=u", ""},
		{"GET", "/v1/orders?user_id=nobody", ""},
		{"GET", "/v1/orders/NL-1/transitions", ""},
		{"GET", "/v1/orders/NL-1/events", ""},
		{"GET", "/v1/orders/NL-1/deliveries", ""},
		{"GET", "/v1/orders/NL-1/payments", ""},
		{"GET", "/v1/orders/NL-1/refunds", ""},
		{"GET", "/v1/orders/NL-1/cards", ""},
		{"PATCH", "/v1/orders/NL-1/deadline", `{"extend_by":"1m"}`},
		{"GET", "/v1/groups/NL-G", ""},
		{"GET", "/v1/reviews", ""},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.status >= 300 {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
			continue
		}
		if nulls := nullLists(t, arrays, r.body); len(nulls) > 0 {
			t.Errorf("%s %s shows null for the lists %q: %s", c.method, c.path, nulls, r.body)
		}
	}
}
