package http_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestGroupAPI: creating, joining and reading a group buy, with every
// refusal answered clearly and changing nothing.
func TestGroupAPI(t *testing.T) {
	t.Parallel()
	e := paymentEnv(t)
	body := `{"group_id":"G-1","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`
	e.do("POST", "/v1/groups", body).want(t, http.StatusCreated)
	e.do("POST", "/v1/groups", body).want(t, http.StatusOK)
	e.do("POST", "/v1/groups", `{"group_id":"G-1","organiser":"org","price":991,"currency":"CNY","ttl":"1h"}`).want(t, http.StatusConflict)
	for _, c := range []struct{ body, field string }{
		{`{"organiser":"org","price":990,"currency":"CNY"}`, "group_id"},
		{`{"group_id":"G-2","organiser":"org","currency":"CNY"}`, "price"},
		{`{"group_id":"G-2","organiser":"org","price":0,"currency":"CNY"}`, "price"},
		{`{"group_id":"G-2","organiser":"org","price":1.5,"currency":"CNY"}`, "price"},
		{`{"group_id":"G-2","organiser":"org","price":990,"currency":"CNY","ttl":"-1h"}`, "ttl"},
		{`{"group_id":"G-2","organiser":"org","price":990,"currency":"CNY","flow":"checkout"}`, "flow"},
	} {
		if p := e.do("POST", "/v1/groups", c.body).want(t, http.StatusBadRequest).problem(t); p.Field != c.field {
			t.Errorf("POST /v1/groups %s: field %q, want %q (%s)", c.body, p.Field, c.field, p.Detail)
		}
	}
	e.do("GET", "/v1/groups/G-2", "").want(t, http.StatusNotFound)

	e.do("POST", "/v1/groups/G-1/members", `{"user_id":"alice","method":"tok-a"}`).want(t, http.StatusCreated)
	e.do("POST", "/v1/groups/G-1/members", `{"user_id":"alice","method":"tok-a"}`).want(t, http.StatusOK)
	e.do("POST", "/v1/groups/G-1/members", `{"user_id":"alice","method":"tok-b"}`).want(t, http.StatusConflict)
	e.do("POST", "/v1/groups/G-1/members", `{"user_id":"bob"}`).want(t, http.StatusBadRequest)
	e.do("POST", "/v1/groups/G-1/members", `{"user_id":"bob","method":"t","provider":"nope"}`).want(t, http.StatusBadRequest)
	e.do("POST", "/v1/groups/G-9/members", `{"user_id":"bob","method":"t"}`).want(t, http.StatusNotFound)
	e.do("POST", "/v1/groups/G-1/retry", "").want(t, http.StatusConflict)

	var g struct {
		GroupID   string `json:"group_id"`
		State     string
		Organiser string
		Price     int64
		Members   []lapse.GroupMember
	}
	e.do("GET", "/v1/groups/G-1", "").want(t, http.StatusOK).decode(t, &g)
	if g.GroupID != "G-1" || g.State != "OPEN" || g.Organiser != "org" || g.Price != 990 || len(g.Members) != 1 ||
		g.Members[0].UserID != "alice" || g.Members[0].Status != lapse.ChargePending || g.Members[0].Amount != 990 {
		t.Errorf("GET group = %+v", g)
	}
	// A checkout order is not a group.
	e.do("POST", "/v1/orders", `{"order_no":"C-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY"}`).want(t, http.StatusCreated)
	e.do("GET", "/v1/groups/C-1", "").want(t, http.StatusBadRequest)
	e.do("POST", "/v1/groups/C-1/members", `{"user_id":"bob","method":"t"}`).want(t, http.StatusBadRequest)
	e.do("POST", "/v1/orders/C-1/retry", `{"reason":"x"}`).want(t, http.StatusBadRequest)

	// Past the deadline the group takes no one.
	e.clock.Advance(time.Hour)
	e.do("POST", "/v1/groups/G-1/members", `{"user_id":"carol","method":"tok-c"}`).want(t, http.StatusConflict)
}

// TestCardAPI: cards of a membership order, and visits of an unknown card.
func TestCardAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/orders", `{"order_no":"M-1","flow":"membership","user_id":"u","amount":100,"currency":"CNY",
		"metadata":{"cards":[{"product":"swim","visits":10}]}}`).want(t, http.StatusCreated)
	if p := e.do("POST", "/v1/orders", `{"order_no":"M-2","flow":"membership","user_id":"u","amount":100,"currency":"CNY",
		"metadata":{"cards":[{"product":"","visits":10}]}}`).want(t, http.StatusBadRequest).problem(t); p.Field != "metadata.cards[0].product" {
		t.Errorf("bad card: field %q", p.Field)
	}
	var cs struct{ Cards []lapse.Card }
	e.do("GET", "/v1/orders/M-1/cards", "").want(t, http.StatusOK).decode(t, &cs)
	if cs.Cards == nil || len(cs.Cards) != 0 {
		t.Errorf("cards of an unpaid membership: %+v", cs)
	}
	e.do("POST", "/v1/cards/42/visits", "").want(t, http.StatusNotFound)
	e.do("POST", "/v1/cards/x/visits", "").want(t, http.StatusBadRequest)
	e.do("POST", "/v1/orders/M-1/retry", "").want(t, http.StatusConflict)
}
