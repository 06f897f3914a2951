package http_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/flows"
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

// TestFeatureEventsAreNotAPIEvents: a flow written in Go may leave the
// events of Lapse's features unmarked Internal; the events API still never
// fires them. PAY through it marked a checkout order paid with no payment
// (S3), and a group's JOIN or SETTLE moved the group with no member or
// charge.
func TestFeatureEventsAreNotAPIEvents(t *testing.T) {
	t.Parallel()
	co, gb := flows.Checkout(), flows.Groupbuy()
	for _, f := range []*lapse.Flow{co, gb} {
		for i := range f.Events {
			f.Events[i].Internal = false
		}
	}
	g := retryEnv(t, access.Config{}, co, gb, flows.Membership())
	writer := bearer(g.key("writer", access.ScopeOrdersWrite))
	g.call("POST", "/v1/orders", `{"order_no":"P-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`, writer).want(t, http.StatusCreated)
	g.call("POST", "/v1/groups", `{"group_id":"G-1","organiser":"o","price":990,"currency":"CNY","ttl":"1h"}`, writer).want(t, http.StatusCreated)
	for _, c := range []struct{ no, event string }{{"P-1", "PAY"}, {"G-1", "JOIN"}, {"G-1", "SETTLE"}} {
		if p := g.call("POST", "/v1/orders/"+c.no+"/events", `{"event":"`+c.event+`"}`, writer).refused(t, http.StatusBadRequest, lapse.EINVALID); !strings.Contains(p.Detail, "fired by Lapse itself") {
			t.Errorf("%s %s: %s", c.no, c.event, p.Detail)
		}
	}
	if st := g.state("P-1"); st != flows.Unpaid {
		t.Errorf("the events API moved P-1 to %s", st)
	}
	if st := g.state("G-1"); st != flows.GroupOpen {
		t.Errorf("the events API moved G-1 to %s", st)
	}
	// An event of the flow's own, not a feature's, still goes through.
	g.call("POST", "/v1/orders/P-1/events", `{"event":"CANCEL"}`, writer).want(t, http.StatusOK)
}
