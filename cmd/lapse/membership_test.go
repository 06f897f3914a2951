package main_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestMembershipThroughAPI: a membership order paid through the sandbox
// issues its cards through a merchant card service that is down: six
// attempts on the --issue-retries schedule, then manual review with every
// attempt on record; once the service is back, an operator's retry issues
// the cards; a refund then revokes them.
func TestMembershipThroughAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var down atomic.Bool
	down.Store(true)
	var issued, revoked atomic.Int32
	cards := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/cards/issue":
			issued.Add(1)
		case "/cards/revoke":
			revoked.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(cards.Close)
	p := startServe(t, dir, "--sandbox", "--sandbox-secret", "e2e-secret", "--card-port", cards.URL+"/cards",
		"--issue-retries", "200ms,200ms,200ms,200ms,200ms", "--delivery-poll", "50ms")
	body := map[string]any{"order_no": "M-1", "flow": "membership", "user_id": "u1", "amount": 9900, "currency": "CNY",
		"metadata": map[string]any{"cards": []map[string]any{{"product": "swim-10", "visits": 10}, {"product": "gym"}}}}
	if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
		t.Fatalf("POST /v1/orders = %d", code)
	}
	if code := call(t, "POST", p.URL+"/v1/orders/M-1/events", map[string]any{"event": "SUBMIT"}, nil); code != 200 {
		t.Fatalf("SUBMIT = %d", code)
	}
	if code := call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": "M-1", "amount": 9900, "currency": "CNY"}, nil); code != 200 {
		t.Fatalf("pay = %d", code)
	}
	state := func() string {
		var o order
		call(t, "GET", p.URL+"/v1/orders/M-1", nil, &o)
		return o.State
	}
	waitOrder(t, p.URL, "M-1", 20*time.Second, func() bool { return state() == "MANUAL_REVIEW" })
	var ds struct{ Deliveries []deliveryJSON }
	call(t, "GET", p.URL+"/v1/orders/M-1/deliveries", nil, &ds)
	found := false
	for _, d := range ds.Deliveries {
		if d.Subscriber == "issue" {
			found = true
			if d.Status != "dead" || len(d.History) != 6 {
				t.Errorf("issue delivery: %s with %d attempts, want dead after 6", d.Status, len(d.History))
			}
		}
	}
	if !found {
		t.Errorf("no issue delivery: %+v", ds)
	}
	var reviews struct {
		Reviews []struct {
			OrderNo string `json:"order_no"`
		}
	}
	call(t, "GET", p.URL+"/v1/reviews", nil, &reviews)
	if len(reviews.Reviews) != 1 || reviews.Reviews[0].OrderNo != "M-1" {
		t.Errorf("reviews: %+v", reviews)
	}

	down.Store(false)
	if code := call(t, "POST", p.URL+"/v1/orders/M-1/retry", map[string]any{"reason": "card service is back"}, nil); code != 200 {
		t.Fatalf("retry = %d", code)
	}
	waitOrder(t, p.URL, "M-1", 20*time.Second, func() bool { return state() == "ISSUED" })
	if code := call(t, "POST", p.URL+"/v1/orders/M-1/refunds", map[string]any{"amount": 9900, "reason": "moved away"}, nil); code != 201 {
		t.Fatalf("refund = %d", code)
	}
	waitOrder(t, p.URL, "M-1", 20*time.Second, func() bool { return state() == "REFUNDED" && revoked.Load() > 0 })
	if issued.Load() != 1 {
		t.Errorf("the card service issued %d times, want 1", issued.Load())
	}
}
