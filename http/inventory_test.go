package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

func ledgerEnv(t *testing.T, subs ...engine.Subscription) *env {
	return newEnvWith(t, options{engine: func(c *engine.Config) {
		c.StockLedger, c.CouponLedger, c.Subscriptions = true, true, subs
	}})
}

func decodeInto(t *testing.T, r *response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

type stockJSON struct {
	SKU       string `json:"sku"`
	OnHand    int64  `json:"on_hand"`
	Reserved  int64  `json:"reserved"`
	Available int64  `json:"available"`
}

func TestStockAPI(t *testing.T) {
	t.Parallel()
	e := ledgerEnv(t)
	r := e.do("PUT", "/v1/stock/tea", `{"on_hand": 10}`)
	var st stockJSON
	decodeInto(t, r, &st)
	if r.status != 200 || st.SKU != "tea" || st.OnHand != 10 || st.Available != 10 {
		t.Fatalf("PUT stock = %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"PUT", "/v1/stock/tea", `{"on_hand": -1}`, 400, "on_hand"},
		{"PUT", "/v1/stock/tea", `{}`, 400, "on_hand"},
		{"PUT", "/v1/stock/tea", `{"on_hand": 1.5}`, 400, "on_hand"},
		{"PUT", "/v1/stock/tea", `{"on_hand": 1, "extra": 2}`, 400, "extra"},
		{"PUT", "/v1/stock/tea", `{"on_hand": 1, "ON_HAND": 100}`, 400, "ON_HAND"},
		{"PUT", "/v1/stock/tea", `{"On_Hand": 100}`, 400, "On_Hand"},
		{"GET", "/v1/stock/nope", ``, 404, ""},
	} {
		r := e.do(c.method, c.path, c.body)
		if p := r.problem(t); r.status != c.status || p.Field != c.field {
			t.Errorf("%s %s %s = %d %s", c.method, c.path, c.body, r.status, r.body)
		}
	}

	order := func(no string, qty int) *response {
		return e.do("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","items":[{"sku":"tea","qty":`+itoa(qty)+`}]}`)
	}
	if r := order("S-1", 3); r.status != 201 {
		t.Fatalf("order = %d %s", r.status, r.body)
	}
	decodeInto(t, e.do("GET", "/v1/stock/tea", ""), &st)
	if st.Reserved != 3 || st.Available != 7 {
		t.Errorf("after an order of 3: %+v", st)
	}
	r = order("S-2", 8)
	if r.status != 409 || !strings.Contains(string(r.body), "tea") {
		t.Errorf("an order beyond the stock = %d %s, want 409 naming tea", r.status, r.body)
	}
	if r := e.do("GET", "/v1/orders/S-2", ""); r.status != 404 {
		t.Errorf("the refused order exists: %d", r.status)
	}
	if r := e.do("PUT", "/v1/stock/tea", `{"on_hand": 2}`); r.status != 409 {
		t.Errorf("on_hand below reserved = %d %s", r.status, r.body)
	}
}

func TestCouponAPI(t *testing.T) {
	t.Parallel()
	e := ledgerEnv(t)
	d := engine.NewDeliverer(e.engine, engine.DelivererConfig{})
	if r := e.do("POST", "/v1/coupons", `{"code":"SAVE10"}`); r.status != 201 || r.header.Get("Location") != "/v1/coupons/SAVE10" {
		t.Fatalf("POST coupon = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/coupons", `{"code":"SAVE10"}`); r.status != 409 {
		t.Errorf("duplicate coupon = %d", r.status)
	}
	for _, body := range []string{`{}`, `{"code":""}`, `{"code":"has space"}`} {
		if r := e.do("POST", "/v1/coupons", body); r.status != 400 {
			t.Errorf("POST coupon %s = %d", body, r.status)
		}
	}
	if r := e.do("GET", "/v1/coupons/NOPE", ""); r.status != 404 {
		t.Errorf("GET missing coupon = %d", r.status)
	}
	if r := e.do("POST", "/v1/orders", `{"order_no":"C-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","coupon":"SAVE10"}`); r.status != 201 {
		t.Fatalf("order = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/orders", `{"order_no":"C-2","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","coupon":"SAVE10"}`); r.status != 409 {
		t.Errorf("second order on a locked coupon = %d %s", r.status, r.body)
	}
	var c struct {
		Status  string `json:"status"`
		OrderNo string `json:"order_no"`
		Moves   []struct {
			Kind    string `json:"kind"`
			OrderNo string `json:"order_no"`
		} `json:"moves"`
	}
	decodeInto(t, e.do("GET", "/v1/coupons/SAVE10", ""), &c)
	if c.Status != "locked" || c.OrderNo != "C-1" || len(c.Moves) != 1 {
		t.Errorf("locked coupon: %+v", c)
	}
	e.do("POST", "/v1/orders/C-1/events", `{"event":"CANCEL"}`)
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	decodeInto(t, e.do("GET", "/v1/coupons/SAVE10", ""), &c)
	if c.Status != "available" || len(c.Moves) != 2 || c.Moves[1].Kind != "unlock" {
		t.Errorf("after closing: %+v", c)
	}
}

// flaky fails every delivery.
type flaky struct{}

func (flaky) Deliver(ctx context.Context, d *lapse.Delivery) error {
	return errors.New("HTTP 502 from the sink")
}

func TestDeliveriesAPI(t *testing.T) {
	t.Parallel()
	e := ledgerEnv(t, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: flaky{},
		Schedule: lapse.Schedule{Steps: []time.Duration{time.Second}}})
	d := engine.NewDeliverer(e.engine, engine.DelivererConfig{})
	if r := e.do("POST", "/v1/orders", `{"order_no":"D-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`); r.status != 201 {
		t.Fatalf("order = %d %s", r.status, r.body)
	}
	d.RunOnce(context.Background())
	e.clock.Advance(time.Second)
	d.RunOnce(context.Background()) // the second failure kills it

	var list struct {
		Deliveries []struct {
			ID            int64   `json:"id"`
			Subscriber    string  `json:"subscriber"`
			Status        string  `json:"status"`
			Attempts      int     `json:"attempts"`
			NextAttemptAt *string `json:"next_attempt_at"`
			LastError     string  `json:"last_error"`
			History       []struct {
				Attempt    int     `json:"attempt"`
				Outcome    string  `json:"outcome"`
				Error      string  `json:"error"`
				DurationMS float64 `json:"duration_ms"`
			} `json:"history"`
		} `json:"deliveries"`
	}
	r := e.do("GET", "/v1/orders/D-1/deliveries", "")
	decodeInto(t, r, &list)
	if r.status != 200 || len(list.Deliveries) != 1 {
		t.Fatalf("GET deliveries = %d %s", r.status, r.body)
	}
	dl := list.Deliveries[0]
	if dl.Status != "dead" || dl.Attempts != 2 || dl.NextAttemptAt != nil || len(dl.History) != 2 ||
		dl.History[1].Error != "HTTP 502 from the sink" || dl.History[1].Outcome != "error" || dl.History[1].DurationMS < 0 {
		t.Errorf("dead delivery: %s", r.body)
	}
	var reviews struct {
		Reviews []struct {
			ID      int64  `json:"id"`
			OrderNo string `json:"order_no"`
			Reason  string `json:"reason"`
		} `json:"reviews"`
	}
	decodeInto(t, e.do("GET", "/v1/reviews?open=true", ""), &reviews)
	if len(reviews.Reviews) != 1 || reviews.Reviews[0].OrderNo != "D-1" {
		t.Errorf("reviews: %+v", reviews)
	}
	if r := e.do("GET", "/v1/reviews?open=maybe", ""); r.status != 400 {
		t.Errorf("open=maybe = %d", r.status)
	}

	id := itoa(int(dl.ID))
	if r := e.do("POST", "/v1/deliveries/"+id+"/retry", ""); r.status != 200 || !strings.Contains(string(r.body), `"pending"`) {
		t.Errorf("retry = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/deliveries/"+id+"/retry", ""); r.status != 409 {
		t.Errorf("retry of a pending delivery = %d", r.status)
	}
	if r := e.do("POST", "/v1/deliveries/999999/retry", ""); r.status != 404 {
		t.Errorf("retry of a missing delivery = %d", r.status)
	}
	if r := e.do("POST", "/v1/deliveries/x/retry", ""); r.status != 400 {
		t.Errorf("retry of a bad id = %d", r.status)
	}
	// The retry handed the review back to automation.
	reviews.Reviews = nil
	decodeInto(t, e.do("GET", "/v1/reviews?open=true", ""), &reviews)
	if len(reviews.Reviews) != 0 {
		t.Errorf("open reviews after the retry: %+v", reviews)
	}
	// It dies again: a new review, which an operator marks resolved.
	d.RunOnce(context.Background())
	e.clock.Advance(time.Second)
	d.RunOnce(context.Background())
	decodeInto(t, e.do("GET", "/v1/reviews?open=true", ""), &reviews)
	if len(reviews.Reviews) != 1 {
		t.Fatalf("open reviews after the second death: %+v", reviews)
	}
	rid := itoa(int(reviews.Reviews[0].ID))
	if r := e.do("POST", "/v1/reviews/"+rid+"/resolve", `{"note":"  "}`); r.status != 400 {
		t.Errorf("resolve without a note = %d", r.status)
	}
	r = e.do("POST", "/v1/reviews/"+rid+"/resolve", `{"note":"sink fixed by hand\r\nreplayed from its logs"}`)
	var rv lapse.Review
	decodeInto(t, r, &rv)
	if r.status != 200 || rv.ResolvedAt == nil || rv.Note != "sink fixed by hand\nreplayed from its logs" || rv.ResolvedBy != "api" {
		t.Errorf("resolve = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/reviews/"+rid+"/resolve", `{"note":"again"}`); r.status != 409 {
		t.Errorf("resolving twice = %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/reviews/0/resolve", `{"note":"x"}`); r.status != 400 {
		t.Errorf("resolve of a bad id = %d", r.status)
	}
	if r := e.do("GET", "/v1/orders/NOPE/deliveries", ""); r.status != 404 {
		t.Errorf("deliveries of a missing order = %d", r.status)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
