package http_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/flows"
)

// issuedCard makes the membership order no with one count card of visits
// visits, pays it and issues the card, whose id it returns.
func (g *guardedEnv) issuedCard(no string, visits int) int64 {
	g.t.Helper()
	g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":%q,"flow":"membership","user_id":"u","amount":1000,"currency":"CNY",
		"metadata":{"cards":[{"product":"swim","visits":%d}]}}`, no, visits), bearer(g.admin)).want(g.t, http.StatusCreated)
	g.call("POST", "/v1/orders/"+no+"/events", `{"event":"SUBMIT"}`, bearer(g.admin)).want(g.t, http.StatusOK)
	now := g.clock.Now()
	g.callback(noticeBody(no, "txn-"+no, 1000, now), now).want(g.t, http.StatusOK)
	g.deliver()
	cs, err := g.engine.Cards(context.Background(), no)
	if err != nil || len(cs) != 1 || g.state(no) != flows.Issued {
		g.t.Fatalf("membership %s is %s with cards %+v, %v; want ISSUED with one", no, g.state(no), cs, err)
	}
	return cs[0].ID
}

// used returns how many visits card id of order no has counted.
func (g *guardedEnv) used(no string, id int64) int {
	g.t.Helper()
	cs, err := g.engine.Cards(context.Background(), no)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, c := range cs {
		if c.ID == id {
			return c.Used
		}
	}
	g.t.Fatalf("order %s has no card %d", no, id)
	return 0
}

// TestCardVisitAudited: a visit is in the audit log as card.use, by the
// key that counted it, about the card by its id. A card's id written
// otherwise than its one decimal form (+7, 07) is refused and counts
// nothing: it counted the visit, and the audit row named a card:+7 that no
// search for card:7 finds.
func TestCardVisitAudited(t *testing.T) {
	t.Parallel()
	g := newGuardedEnvPaying(t, access.Config{}, refundingProvider{})
	id := g.issuedCard("M-1", 10)
	clerk := bearer(g.key("clerk", access.ScopeOrdersWrite))
	g.rows()

	var c lapse.Card
	g.call("POST", fmt.Sprintf("/v1/cards/%d/visits", id), "", clerk).want(t, http.StatusCreated).decode(t, &c)
	if c.ID != id || c.Used != 1 {
		t.Errorf("visit = %+v; want card %d used 1", c, id)
	}
	if rows := g.wantRows("card.use clerk ok"); len(rows) == 1 && (rows[0].Target != fmt.Sprintf("card:%d", id) || rows[0].ActorKind != access.KindKey) {
		t.Errorf("audit row of the visit: target %q, actor %s:%s", rows[0].Target, rows[0].ActorKind, rows[0].ActorName)
	}
	for _, path := range []string{fmt.Sprintf("+%d", id), fmt.Sprintf("0%d", id)} {
		if p := g.call("POST", "/v1/cards/"+path+"/visits", "", clerk).want(t, http.StatusBadRequest).problem(t); p.Field != "id" {
			t.Errorf("card %s: field %q (%s)", path, p.Field, p.Detail)
		}
		g.wantRows("card.use clerk 400 invalid: id:")
	}
	if n := g.used("M-1", id); n != 1 {
		t.Errorf("card used %d after the refused visits; want 1", n)
	}
}

// TestCardVisitIdempotencyKey: a client that retries a visit after a lost
// answer, under the same Idempotency-Key, gets the same answer, 200 where
// the first was 201, and the member loses no visit: the retry counted a
// second one, and its audit row says that it changed nothing. The key names
// one visit: the same key for another card is refused, as is a key of
// another shape, and neither counts anything.
func TestCardVisitIdempotencyKey(t *testing.T) {
	t.Parallel()
	g := newGuardedEnvPaying(t, access.Config{}, refundingProvider{})
	id := g.issuedCard("M-1", 10)
	other := g.issuedCard("M-2", 10)
	clerk := bearer(g.key("clerk", access.ScopeOrdersWrite))
	visit := func(card int64, key string) *response {
		return g.call("POST", fmt.Sprintf("/v1/cards/%d/visits", card), "", clerk, header("Idempotency-Key", key))
	}
	g.rows()
	first, again := visit(id, "visit-1"), visit(id, "visit-1")
	if n := g.used("M-1", id); n != 1 {
		t.Fatalf("a visit and its retry under one key counted %d visits; want 1", n)
	}
	// The retry's row says it counted nothing: a bare "ok" reads as a
	// second visit.
	if rows := g.wantRows("card.use clerk ok", "card.use clerk ok: "); len(rows) == 2 &&
		(rows[0].Result != "ok" || !strings.Contains(rows[1].Result, "nothing changed")) {
		t.Errorf("the rows of a visit and its retry: %q and %q", rows[0].Result, rows[1].Result)
	}
	first.want(t, http.StatusCreated)
	again.want(t, http.StatusOK)
	if string(again.body) != string(first.body) {
		t.Errorf("retry answered %s\nwant the first answer %s", again.body, first.body)
	}
	// Another visit, then the retry of the first: still the card as the
	// first visit left it.
	visit(id, "visit-2").want(t, http.StatusCreated)
	if r := visit(id, "visit-1").want(t, http.StatusOK); string(r.body) != string(first.body) {
		t.Errorf("late retry answered %s\nwant %s", r.body, first.body)
	}
	if p := visit(other, "visit-1").want(t, http.StatusConflict).problem(t); p.Code != "conflict" || !strings.Contains(p.Detail, "visit-1") {
		t.Errorf("the key of a visit of another card: %+v", p)
	}
	for _, key := range []string{"no spaces", strings.Repeat("k", 101), "ключ"} {
		if p := visit(id, key).want(t, http.StatusBadRequest).problem(t); p.Field != "Idempotency-Key" {
			t.Errorf("key %q: field %q (%s)", key, p.Field, p.Detail)
		}
	}
	if a, b := g.used("M-1", id), g.used("M-2", other); a != 2 || b != 0 {
		t.Errorf("cards used %d and %d; want 2 and 0", a, b)
	}
	// The header sent empty is refused, not read as no key: the client
	// meant its retries to count once, and they would each count.
	for range 2 {
		if p := visit(id, "").want(t, http.StatusBadRequest).problem(t); p.Field != "Idempotency-Key" {
			t.Errorf("an empty key: field %q (%s)", p.Field, p.Detail)
		}
	}
	if n := g.used("M-1", id); n != 2 {
		t.Errorf("card used %d after visits with an empty key; want 2", n)
	}
	// Without the header every call is a visit of its own.
	g.call("POST", fmt.Sprintf("/v1/cards/%d/visits", id), "", clerk).want(t, http.StatusCreated)
	g.call("POST", fmt.Sprintf("/v1/cards/%d/visits", id), "", clerk).want(t, http.StatusCreated)
	if n := g.used("M-1", id); n != 4 {
		t.Errorf("card used %d; want 4", n)
	}
}

// TestCardProductIsText: a card's product, which the console shows an
// operator and the card service receives, is text as a SKU or a user id is:
// one with a control character, a line separator or a bidirectional
// control is refused with 400 naming it, and nothing is created.
func TestCardProductIsText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, product := range []string{`swim\n10 visits free`, `gym\u2028`, `gym\u202e01-mig`, `gym\u0085`, `\u0007bell`} {
		no := fmt.Sprintf("M-%d", i)
		p := e.do("POST", "/v1/orders", fmt.Sprintf(`{"order_no":%q,"flow":"membership","user_id":"u","amount":100,"currency":"CNY",
			"metadata":{"cards":[{"product":"swim"},{"product":"%s"}]}}`, no, product)).want(t, http.StatusBadRequest).problem(t)
		if p.Field != "metadata.cards[1].product" {
			t.Errorf("product %s: field %q (%s), want metadata.cards[1].product", product, p.Field, p.Detail)
		}
		e.do("GET", "/v1/orders/"+no, "").want(t, http.StatusNotFound)
	}
	e.do("POST", "/v1/orders", `{"order_no":"M-ok","flow":"membership","user_id":"u","amount":100,"currency":"CNY",
		"metadata":{"cards":[{"product":"游泳 10 次","visits":10}]}}`).want(t, http.StatusCreated)
}
