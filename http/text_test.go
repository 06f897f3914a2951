package http_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTextNoStoreKeeps: a NUL or invalid UTF-8 anywhere a caller writes
// text (a body's string, the path, the query) is a clear 400 that changes
// nothing, and a reason is one line of at most 500 bytes. On PostgreSQL
// each of these was a 500 (SQLSTATE 22021 or 22P05) and on SQLite the NUL
// was kept, a group member's user id among them; a 60 KB reason went into
// the transition log, and into every subscriber's order.deadline_changed.
func TestTextNoStoreKeeps(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	e.do("POST", "/v1/orders", createBody("TX-1", "")).want(t, http.StatusCreated)
	e.do("POST", "/v1/groups", `{"group_id":"G-T","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`).want(t, http.StatusCreated)
	long := strings.Repeat("r", 501)
	for _, c := range []struct {
		method, path, body, field string
	}{
		{"POST", "/v1/groups/G-T/members", `{"user_id":"u\u0000x","method":"tok"}`, "user_id"},
		{"POST", "/v1/groups/G-T/members", `{"user_id":"u-1","method":"t\u0000k"}`, "method"},
		{"POST", "/v1/groups/G-T/members", `{"user_id":"u\nx","method":"tok"}`, "user_id"},
		{"POST", "/v1/groups/G-T/members", `{"user_id":"u-1","method":"` + strings.Repeat("m", 257) + `"}`, "method"},
		{"POST", "/v1/orders/TX-1/events", `{"event":"CANCEL","reason":"a\u0000b"}`, "reason"},
		{"POST", "/v1/orders/TX-1/events", `{"event":"CANCEL","reason":"two\nlines"}`, "reason"},
		{"POST", "/v1/orders/TX-1/events", `{"event":"CANCEL","reason":"` + long + `"}`, "reason"},
		{"PATCH", "/v1/orders/TX-1/deadline", `{"extend_by":"1m","reason":"` + long + `"}`, "reason"},
		{"PATCH", "/v1/orders/TX-1/deadline", `{"extend_by":"1m","reason":"a\u0000"}`, "reason"},
		{"PATCH", "/v1/orders/TX-1/deadline", `{"extend_by":"1m","reason":"a\tb"}`, "reason"},
		{"POST", "/v1/orders/TX-1/refunds", `{"amount":1,"reason":"a\u0000b"}`, "reason"},
		{"POST", "/v1/orders", createBody("TX-2", `"x":"\u0000"`), "x"},
		{"POST", "/v1/orders", strings.Replace(createBody("TX-2", ""), `"channel":"app"`, `"channel":"a\u0000p"`, 1), "metadata.channel"},
	} {
		p := e.do(c.method, c.path, c.body).want(t, http.StatusBadRequest).problem(t)
		if p.Field != c.field {
			t.Errorf("%s %s %.80s: field %q, want %q (%s)", c.method, c.path, c.body, p.Field, c.field, p.Detail)
		}
	}
	for _, path := range []string{
		"/v1/orders/a%00b", "/v1/orders/%ff", "/v1/groups/a%00b", "/v1/stock/a%00b", "/v1/coupons/a%00b",
		"/v1/orders?user_id=a%00b", "/v1/orders?user_id=%ff", "/v1/audit?actor=a%00b", "/v1/orders?a%00=1",
	} {
		p := e.do("GET", path, "").want(t, http.StatusBadRequest).problem(t)
		if !strings.Contains(p.Detail, "without NUL") {
			t.Errorf("GET %s: %s", path, p.Detail)
		}
	}
	e.do("POST", "/v1/orders/a%00b/events", `{"event":"CANCEL"}`).want(t, http.StatusBadRequest)

	// A signed callback whose txn_id holds NUL: refused, the order unpaid.
	body := fmt.Sprintf(`{"kind":"paid","txn_id":"t\u0000x","order_no":"TX-1","amount":1999,"currency":"CNY","merchant":"m-1","paid_at":%q}`,
		start.Format(time.RFC3339Nano))
	e.callback(body, start).want(t, http.StatusBadRequest)

	// Nothing changed: the order is as created, the group has no member,
	// and the log holds the creation only.
	if o := e.do("GET", "/v1/orders/TX-1", "").want(t, http.StatusOK).order(t); o.State != "UNPAID" || o.Version != 1 {
		t.Errorf("TX-1 is %s at version %d after refused requests", o.State, o.Version)
	}
	if g := e.do("GET", "/v1/groups/G-T", "").want(t, http.StatusOK); !strings.Contains(string(g.body), `"members":[]`) {
		t.Errorf("G-T has a member after refused joins: %s", g.body)
	}
	if trs := e.transitionsOf(t, "TX-1"); len(trs) != 1 {
		t.Errorf("TX-1 has %d transition rows, want its creation only", len(trs))
	}
	e.do("GET", "/v1/orders/TX-2", "").want(t, http.StatusNotFound)

	// A reason that fits is kept as given.
	e.do("POST", "/v1/orders/TX-1/events", `{"event":"CANCEL","reason":"customer asked, ticket 42 — 退款"}`).want(t, http.StatusOK)
}
