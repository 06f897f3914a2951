package http_test

import (
	"net/http"
	"testing"
)

// TestHoldingsNeedAFlowThatHolds: an order of a flow that holds nothing
// (groupbuy, membership) is refused items or a coupon, which nothing would
// reserve or lock: the same coupon was taken on any number of such orders
// (S4), and lines of unknown SKUs in any quantity. A checkout order, whose
// flow holds, takes both.
func TestHoldingsNeedAFlowThatHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ body, field string }{
		{`{"order_no":"GO-1","flow":"groupbuy","user_id":"o","amount":100,"currency":"CNY","coupon":"C3","ttl":"1h"}`, "coupon"},
		{`{"order_no":"GO-1","flow":"groupbuy","user_id":"o","amount":100,"currency":"CNY","items":[{"sku":"tea","qty":2}],"ttl":"1h"}`, "items"},
		{`{"order_no":"MO-1","flow":"membership","user_id":"o","amount":100,"currency":"CNY","coupon":"C3"}`, "coupon"},
		{`{"order_no":"MO-1","flow":"membership","user_id":"o","amount":100,"currency":"CNY","items":[{"sku":"nosuchsku","qty":999999}]}`, "items"},
	} {
		if p := e.do("POST", "/v1/orders", c.body).want(t, http.StatusBadRequest).problem(t); p.Field != c.field {
			t.Errorf("POST /v1/orders %s: field %q, want %q (%s)", c.body, p.Field, c.field, p.Detail)
		}
	}
	e.do("GET", "/v1/orders/GO-1", "").want(t, http.StatusNotFound)
	e.do("GET", "/v1/orders/MO-1", "").want(t, http.StatusNotFound)
	e.do("POST", "/v1/orders", `{"order_no":"MO-1","flow":"membership","user_id":"o","amount":100,"currency":"CNY"}`).want(t, http.StatusCreated)
	e.do("POST", "/v1/orders", createBody("CO-1", "")).want(t, http.StatusCreated)
}

// TestAmountBound: an amount or a group's price beyond lapse.MaxAmount is
// refused. Up to 2^63−1 was taken, and one such order paid made lapse
// reconcile refuse the whole currency (its totals no longer fit).
func TestAmountBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ path, body, field string }{
		{"/v1/orders", `{"order_no":"AM-1","flow":"checkout","user_id":"u","amount":9223372036854775807,"currency":"CNY"}`, "amount"},
		{"/v1/orders", `{"order_no":"AM-1","flow":"checkout","user_id":"u","amount":100000000000001,"currency":"CNY"}`, "amount"},
		{"/v1/groups", `{"group_id":"AM-2","organiser":"o","price":100000000000001,"currency":"CNY"}`, "price"},
	} {
		if p := e.do("POST", c.path, c.body).want(t, http.StatusBadRequest).problem(t); p.Field != c.field {
			t.Errorf("POST %s %s: field %q, want %q (%s)", c.path, c.body, p.Field, c.field, p.Detail)
		}
	}
	e.do("POST", "/v1/orders", `{"order_no":"AM-1","flow":"checkout","user_id":"u","amount":100000000000000,"currency":"CNY"}`).want(t, http.StatusCreated)
}
