package http_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestListFilters: every list route refuses a filter that can match
// nothing or that it does not take, naming it, rather than answering an
// empty page: a state no flow has, a flow Lapse does not run, a state the
// flow given does not have, a misspelt or repeated parameter.
func TestListFilters(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	admin := bearer(g.admin)
	for _, c := range []struct{ query, field, says string }{
		{"/v1/orders?state=BOGUS", "state", "no flow has a state \"BOGUS\""},
		{"/v1/orders?flow=nosuchflow", "flow", "checkout"},
		{"/v1/orders?flow=checkout&state=OPEN", "state", "flow checkout has no state \"OPEN\""},
		{"/v1/orders?State=UNPAID", "State", "is not a parameter"},
		{"/v1/orders?state=UNPAID&state=PAID", "state", "more than once"},
		{"/v1/approvals?status=maybe", "status", "pending"},
		{"/v1/approvals?state=pending", "state", "is not a parameter"},
		{"/v1/approvals?limit=0", "limit", "from 1 to 500"},
		{"/v1/approvals?cursor=AQ", "cursor", "next_cursor"},
		{"/v1/closes?status=maybe", "status", "running"},
		{"/v1/closes?state=done", "state", "is not a parameter"},
		{"/v1/audit?order=sideways", "order", "asc"},
		{"/v1/audit?actr=alice", "actr", "is not a parameter"},
		{"/v1/audit?actor=alice&actor=bob", "actor", "more than once"},
		{"/v1/reviews?open=maybe", "open", "true or false"},
		{"/v1/reviews?open=true&open=false", "open", "more than once"},
		{"/v1/reviews?status=open", "status", "is not a parameter"},
		{"/v1/orders?state=", "state", "empty"},
		{"/v1/orders?flow=checkout&user_id", "user_id", "empty"},
		{"/v1/orders?cursor=&limit=5", "cursor", "empty"},
		{"/v1/approvals?status=", "status", "empty"},
		{"/v1/closes?status=", "status", "empty"},
		{"/v1/audit?actor=", "actor", "empty"},
		{"/v1/held-payments?status=", "status", "empty"},
	} {
		p := g.call("GET", c.query, "", admin).refused(t, http.StatusBadRequest, lapse.EINVALID)
		if p.Field != c.field || !strings.Contains(p.Detail, c.says) {
			t.Errorf("GET %s: field %q, %q; want the field %s, saying %q", c.query, p.Field, p.Detail, c.field, c.says)
		}
	}
	for _, q := range []string{"/v1/orders?state=OPEN", "/v1/orders?flow=groupbuy&state=OPEN", "/v1/orders?state=UNPAID&flow=checkout",
		"/v1/approvals?status=pending", "/v1/closes?status=done", "/v1/audit?order=asc&actor=alice", "/v1/reviews?open=true"} {
		g.call("GET", q, "", admin).want(t, http.StatusOK)
	}
}

// TestListEmptyFilterRefused: a filter given empty is refused, not read as
// left out: a caller listing one user's orders with user_id=$USER, its
// variable unset, was answered every user's orders.
func TestListEmptyFilterRefused(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	admin := bearer(g.admin)
	for _, no := range []string{"A-1", "B-1"} {
		body := `{"order_no":"` + no + `","flow":"checkout","user_id":"u-` + no + `","amount":100,"currency":"CNY"}`
		g.call("POST", "/v1/orders", body, admin).want(t, http.StatusCreated)
	}
	var page struct{ Orders []lapse.Order }
	g.call("GET", "/v1/orders?user_id=u-A-1", "", admin).want(t, http.StatusOK).decode(t, &page)
	if len(page.Orders) != 1 {
		t.Fatalf("the orders of u-A-1: %+v", page.Orders)
	}
	for _, q := range []string{"/v1/orders?user_id=", "/v1/orders?user_id", "/v1/orders?state=UNPAID&user_id="} {
		if p := g.call("GET", q, "", admin).refused(t, http.StatusBadRequest, lapse.EINVALID); p.Field != "user_id" {
			t.Errorf("GET %s: field %q (%s); want user_id", q, p.Field, p.Detail)
		}
	}
}

// TestQueryOnlyWhereTaken: a route that takes no query parameters refuses
// one, naming it, as a list route refuses one it does not take: GET
// …/payments?status=applied answered every payment, and a caller counting
// what it thought were the applied ones counted them all.
func TestQueryOnlyWhereTaken(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	admin := bearer(g.admin)
	g.call("PUT", "/v1/stock/tea", `{"on_hand":5}`, admin).want(t, http.StatusOK)
	g.call("POST", "/v1/orders", `{"order_no":"A-1","flow":"checkout","user_id":"u1","amount":100,"currency":"CNY"}`, admin).want(t, http.StatusCreated)
	for _, c := range []struct{ query, field string }{
		{"/v1/orders/A-1/payments?status=applied", "status"},
		{"/v1/orders/A-1/events?type=order.closed", "type"},
		{"/v1/orders/A-1/deliveries?status=dead&limit=5", "limit"},
		{"/v1/orders/A-1?fields=state", "fields"},
		{"/v1/stock/tea?x", "x"},
	} {
		p := g.call("GET", c.query, "", admin).refused(t, http.StatusBadRequest, lapse.EINVALID)
		if p.Field != c.field || !strings.Contains(p.Detail, "takes none") {
			t.Errorf("GET %s: field %q, %q; want the field %s, saying the route takes none", c.query, p.Field, p.Detail, c.field)
		}
	}
	for _, q := range []string{"/v1/orders/A-1/payments", "/v1/orders/A-1/events", "/v1/orders/A-1?", "/v1/stock/tea", "/healthz?probe=1"} {
		g.call("GET", q, "", admin).want(t, http.StatusOK)
	}
}
