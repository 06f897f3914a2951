package main_test

import (
	"strings"
	"testing"
	"time"
)

// TestServePrunesTheOutbox runs lapse serve with a retention of a second
// and checks through the API that a closed order's events and deliveries go
// once its stock is given back, while the order and its transitions stay.
func TestServePrunesTheOutbox(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--outbox-retention", "1s", "--outbox-prune-interval", "1s")
	if code := call(t, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 5}, nil); code != 200 {
		t.Fatalf("PUT /v1/stock/tea = %d", code)
	}
	body := map[string]any{"order_no": "prune-1", "flow": "checkout", "user_id": "u1", "amount": 100, "currency": "CNY",
		"items": []map[string]any{{"sku": "tea", "qty": 2}}, "ttl": "1s"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
		t.Fatalf("POST /v1/orders = %d", code)
	}
	var evs struct{ Events []struct{ Type string } }
	var ds struct{ Deliveries []struct{ Status string } }
	sawDeliveries := false
	waitFor(t, 30*time.Second, func() bool {
		call(t, "GET", p.URL+"/v1/orders/prune-1/events", nil, &evs)
		call(t, "GET", p.URL+"/v1/orders/prune-1/deliveries", nil, &ds)
		sawDeliveries = sawDeliveries || len(ds.Deliveries) > 0
		return len(evs.Events) == 0 && len(ds.Deliveries) == 0
	})
	if !sawDeliveries {
		t.Error("prune-1 never had a delivery: the test proves nothing")
	}
	var o order
	if code := call(t, "GET", p.URL+"/v1/orders/prune-1", nil, &o); code != 200 || o.State != "CLOSED" {
		t.Errorf("prune-1 after its events went: %d %+v, want it CLOSED", code, o)
	}
	var st struct {
		OnHand   int64 `json:"on_hand"`
		Reserved int64 `json:"reserved"`
	}
	if call(t, "GET", p.URL+"/v1/stock/tea", nil, &st); st.OnHand != 5 || st.Reserved != 0 {
		t.Errorf("stock after the close: %+v, want all 5 given back", st)
	}
	var trs struct{ Transitions []struct{ To string } }
	if call(t, "GET", p.URL+"/v1/orders/prune-1/transitions", nil, &trs); len(trs.Transitions) != 2 {
		t.Errorf("prune-1's log after its events went: %+v, want its create and its close", trs.Transitions)
	}
	// The pass logs once it has read the whole outbox, which may be after
	// the step that deleted prune-1's events.
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(p.Logs(), "pruned events past their retention") })
}
