package http_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/payment"
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

// chargeByMethod is a provider port that charges the group members whose
// method starts with "ok" and declines the others.
type chargeByMethod struct{ closedProvider }

func (chargeByMethod) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	if !strings.HasPrefix(r.Method, "ok") {
		return nil, lapse.ErrRefused
	}
	return &lapse.ProviderPayment{TxnID: "txn-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount, Currency: r.Currency}, nil
}

// cardsDown is a card service that never issues.
type cardsDown struct{}

func (cardsDown) Issue(context.Context, *lapse.CardIssueRequest) ([]*lapse.Card, error) {
	return nil, errors.New("card service down")
}

func (cardsDown) Revoke(context.Context, *lapse.CardRevokeRequest) ([]*lapse.Card, error) {
	return nil, nil
}

// retryEnv is a guarded env (access by cfg) whose orders come to wait for
// an operator's retry: its provider charges the members whose method
// starts with "ok" and declines the others, its card service is down, and
// settling and issuing give up after one retry, about a second later
// (work).
// fs are its flows, the built-in ones when none.
func retryEnv(t *testing.T, cfg access.Config, fs ...*lapse.Flow) *guardedEnv {
	t.Helper()
	return guard(newEnvWith(t, options{
		access: &cfg,
		flows:  fs,
		cfg:    lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}},
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"hmac": chargeByMethod{}}}
			c.GroupRetries = []time.Duration{time.Second}
			c.Cards = cardsDown{}
			c.IssueRetries = []time.Duration{time.Second}
		},
	}))
}

// work runs the deliveries due now, then those due two seconds later (a
// second, give or take the issue schedule's jitter): in a retryEnv, a
// settlement or an issue through its whole schedule.
func (g *guardedEnv) work() {
	g.t.Helper()
	d := engine.NewDeliverer(g.engine, engine.DelivererConfig{})
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		g.clock.Advance(wait)
		for n := 1; n > 0; {
			var err error
			if n, err = d.RunOnce(context.Background()); err != nil {
				g.t.Fatalf("Deliverer.RunOnce: %v", err)
			}
		}
	}
}

// state returns the state of order no, from the engine.
func (g *guardedEnv) state(no string) lapse.State {
	g.t.Helper()
	o, err := g.engine.Order(context.Background(), no)
	if err != nil {
		g.t.Fatalf("Order(%s): %v", no, err)
	}
	return o.State
}

// failedGroup makes the group buy no, where each member pays price CNY,
// with a member for each of methods, and closes it: in a retryEnv it
// fails, the members whose method starts with "ok" charged.
func (g *guardedEnv) failedGroup(no string, price int64, methods ...string) {
	g.t.Helper()
	g.call("POST", "/v1/groups", fmt.Sprintf(`{"group_id":%q,"organiser":"org","price":%d,"currency":"CNY","ttl":"1h"}`, no, price),
		bearer(g.admin)).want(g.t, http.StatusCreated)
	for i, m := range methods {
		g.call("POST", "/v1/groups/"+no+"/members", fmt.Sprintf(`{"user_id":"u%d","method":%q}`, i, m), bearer(g.admin)).
			want(g.t, http.StatusCreated)
	}
	by := engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}
	if _, err := g.engine.CloseOrder(context.Background(), no, "the test closes it", by); err != nil {
		g.t.Fatalf("CloseOrder(%s): %v", no, err)
	}
	g.work()
	if st := g.state(no); st != flows.GroupFailed {
		g.t.Fatalf("group %s is %s, want FAILED", no, st)
	}
}

// membershipInReview makes the membership order no for amount CNY and
// pays it: in a retryEnv its cards are never issued, and it waits in
// manual review.
func (g *guardedEnv) membershipInReview(no string, amount int64) {
	g.t.Helper()
	g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":%q,"flow":"membership","user_id":"u","amount":%d,"currency":"CNY"}`, no, amount),
		bearer(g.admin)).want(g.t, http.StatusCreated)
	g.call("POST", "/v1/orders/"+no+"/events", `{"event":"SUBMIT"}`, bearer(g.admin)).want(g.t, http.StatusOK)
	now := g.clock.Now()
	if r := g.callback(noticeBody(no, "txn-"+no, amount, now), now); r.status != http.StatusOK {
		g.t.Fatalf("pay %s: %d %s", no, r.status, r.body)
	}
	g.work()
	if st := g.state(no); st != flows.ManualReview {
		g.t.Fatalf("membership %s is %s, want MANUAL_REVIEW", no, st)
	}
}

// TestRetryRoutesKeepToTheirOrders: each retry route retries its own kind
// of order only, under its own scope. A group buy's retry charges its
// members, which payments:write allows and operations:write does not, so
// the order route does not retry a group buy, nor the group route a
// membership. A refusal names the route to use, changes nothing, and is in
// the audit log about what was asked; a retry through the right route is
// in it about its order or group.
func TestRetryRoutesKeepToTheirOrders(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{})
	g.failedGroup("G-1", 990, "tok-a", "tok-b")
	g.membershipInReview("M-1", 19900)
	ops := bearer(g.key("ops", access.ScopeOperationsWrite))
	pay := bearer(g.key("pay", access.ScopePaymentsWrite))
	g.rows()

	p := g.call("POST", "/v1/orders/G-1/retry", `{"reason":"provider is back"}`, ops).refused(t, http.StatusBadRequest, lapse.EINVALID)
	if !strings.Contains(p.Detail, "POST /v1/groups/G-1/retry") {
		t.Errorf("refusal %q does not name the group's route", p.Detail)
	}
	if st := g.state("G-1"); st != flows.GroupFailed {
		t.Fatalf("the order route retried a group buy: it is %s", st)
	}
	p = g.call("POST", "/v1/groups/M-1/retry", "", pay).refused(t, http.StatusBadRequest, lapse.EINVALID)
	if !strings.Contains(p.Detail, "POST /v1/orders/M-1/retry") {
		t.Errorf("refusal %q does not name the order's route", p.Detail)
	}
	if st := g.state("M-1"); st != flows.ManualReview {
		t.Fatalf("the group route retried a membership: it is %s", st)
	}
	rows := g.wantRows("order.retry ops 400 invalid: order G-1 is a group buy", "group.retry pay 400 invalid: order M-1 is not a group buy")
	if len(rows) == 2 && (rows[0].Target != "order:G-1" || rows[1].Target != "group:M-1") {
		t.Errorf("refusals' targets %q, %q", rows[0].Target, rows[1].Target)
	}

	// Each key's own route.
	g.call("POST", "/v1/groups/G-1/retry", "", ops).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", "/v1/orders/M-1/retry", "", pay).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.wantRows("group.retry ops refused:", "order.retry pay refused:")
	g.call("POST", "/v1/groups/G-1/retry", `{"reason":"provider is back"}`, pay).want(t, http.StatusOK)
	g.call("POST", "/v1/orders/M-1/retry", `{"reason":"card service is back"}`, ops).want(t, http.StatusOK)
	if st := g.state("G-1"); st != flows.GroupClosed {
		t.Errorf("retried group is %s, want CLOSED", st)
	}
	if st := g.state("M-1"); st != flows.Compensating {
		t.Errorf("retried membership is %s, want COMPENSATING", st)
	}
	rows = g.wantRows("group.retry pay ok", "order.retry ops ok")
	if len(rows) == 2 && (rows[0].Target != "group:G-1" || rows[1].Target != "order:M-1") {
		t.Errorf("retries' targets %q, %q", rows[0].Target, rows[1].Target)
	}
}

// TestRetryIsNotAnEvent: a flow may leave its retry events unmarked
// internal; the events API (orders:write) still does not fire them, so it
// retries neither a group buy, which charges its members, nor a membership.
func TestRetryIsNotAnEvent(t *testing.T) {
	t.Parallel()
	gb, ms := flows.Groupbuy(), flows.Membership()
	for _, f := range []*lapse.Flow{gb, ms} {
		for i := range f.Events {
			if f.Events[i].Name == flows.Retry {
				f.Events[i].Internal = false
			}
		}
	}
	g := retryEnv(t, access.Config{}, flows.Checkout(), gb, ms)
	g.failedGroup("G-1", 990, "tok-a")
	g.membershipInReview("M-1", 19900)
	writer := bearer(g.key("writer", access.ScopeOrdersWrite))

	g.call("POST", "/v1/orders/G-1/events", `{"event":"RETRY"}`, writer).refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("POST", "/v1/orders/M-1/events", `{"event":"RETRY"}`, writer).refused(t, http.StatusBadRequest, lapse.EINVALID)
	if st := g.state("G-1"); st != flows.GroupFailed {
		t.Errorf("the events API retried a group buy: it is %s", st)
	}
	if st := g.state("M-1"); st != flows.ManualReview {
		t.Errorf("the events API retried a membership: it is %s", st)
	}
}

// TestFourEyesGroupRetry: the stake of a group buy's retry is what it can
// charge, the price of each member not charged yet, not the group's
// order's amount, which is one member's price. Above the threshold an
// operator's retry waits for a second operator, and changes nothing until
// then. A membership's retry is at its amount, as before, and a retry
// through the wrong route is refused at once, never held for approval.
func TestFourEyesGroupRetry(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{ApprovalAmount: 50000})
	g.failedGroup("G-3", 40000, "tok-a", "tok-b", "tok-c") // 3 × 40000 to charge
	g.failedGroup("G-2", 40000, "ok-a", "tok-b", "tok-c")  // 2 × 40000
	g.failedGroup("G-1", 40000, "ok-a", "ok-b", "tok-c")   // 1 × 40000
	g.membershipInReview("M-1", 60000)
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	alice := session(g.login("alice"))

	var held []*approvalView
	for _, c := range []struct {
		group string
		stake int64
	}{{"G-3", 120000}, {"G-2", 80000}} {
		a := g.call("POST", "/v1/groups/"+c.group+"/retry", `{"reason":"provider is back"}`, alice,
			header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
		if a.Action != "group.retry" || a.Target != "group:"+c.group || a.Amount != c.stake || a.Currency != "CNY" {
			t.Errorf("approval request of %s's retry: %+v, want %d CNY at stake", c.group, a, c.stake)
		}
		if st := g.state(c.group); st != flows.GroupFailed {
			t.Fatalf("a retry of %s waiting for approval moved it to %s", c.group, st)
		}
		held = append(held, a)
	}
	g.call("POST", "/v1/groups/G-1/retry", "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusOK)
	if st := g.state("G-1"); st != flows.GroupClosed {
		t.Errorf("a retry below the threshold left G-1 %s", st)
	}

	g.call("POST", "/v1/groups/M-1/retry", "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	a := g.call("POST", "/v1/orders/M-1/retry", "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.Action != "order.retry" || a.Target != "order:M-1" || a.Amount != 60000 {
		t.Errorf("approval request of M-1's retry: %+v", a)
	}
	if st := g.state("M-1"); st != flows.ManualReview {
		t.Fatalf("a retry of M-1 waiting for approval moved it to %s", st)
	}

	bob := session(g.login("bob"))
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", held[0].ID), fmt.Sprintf(`{"code":%q}`, g.code("bob")), bob).want(t, http.StatusOK)
	if st := g.state("G-3"); st != flows.GroupClosed {
		t.Errorf("an approved retry left G-3 %s", st)
	}
}

// TestGroupCancelIsAMassAction: ending a group buy while it is open (a
// CANCEL) cancels every member's purchase, so it is taken only through the
// group's own route and guarded as a manual close is: the operations:write
// scope, an operator's second factor, and four eyes when its members, with
// the orders the operator put at stake on their own word in the last 24
// hours, pass ApprovalCount. The events of the group's order refuse it, and
// every refusal is in the audit log.
func TestGroupCancelIsAMassAction(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{ApprovalCount: 2})
	for id, members := range map[string][]string{"G-3": {"u1", "u2", "u3"}, "G-1": {"u1"}, "G-2": {"u1", "u2"}, "G-K": {"u1", "u2", "u3"}} {
		g.call("POST", "/v1/groups", `{"group_id":"`+id+`","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`, bearer(g.admin)).
			want(t, http.StatusCreated)
		for _, u := range members {
			g.call("POST", "/v1/groups/"+id+"/members", `{"user_id":"`+u+`","method":"ok-`+u+`"}`, bearer(g.admin)).want(t, http.StatusCreated)
		}
	}
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	writer := bearer(g.key("writer", access.ScopeOrdersWrite))
	ops := bearer(g.key("ops", access.ScopeOperationsWrite))
	cancel := `{"event":"CANCEL","reason":"supplier gone"}`
	g.rows()

	// Not as an order's event, whoever asks.
	for _, c := range []cred{writer, bearer(g.admin)} {
		p := g.call("POST", "/v1/orders/G-3/events", cancel, c).refused(t, http.StatusBadRequest, lapse.EINVALID)
		if p.Field != "event" || !strings.Contains(p.Detail, "/v1/groups/{group_id}/events") {
			t.Errorf("CANCEL of an open group as an order's event: %+v", p)
		}
	}
	// Not with orders:write; not without a second factor.
	g.call("POST", "/v1/groups/G-3/events", cancel, writer).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", "/v1/groups/G-3/events", cancel, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", "/v1/orders/G-3/events", cancel, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.wantRows("order.fire writer 400 invalid: event: CANCEL ends the open group buy G-3", "order.fire admin 400 invalid: ",
		"group.fire writer refused: POST /v1/groups/{group_id}/events needs the scope operations:write",
		"group.fire alice refused: this action needs a fresh second factor", "second_factor alice ok", "order.fire alice 400 invalid: ")
	if st := g.state("G-3"); st != flows.GroupOpen {
		t.Fatalf("refused cancels left G-3 %s", st)
	}

	// Three members are more than two: held for a second operator.
	a := g.call("POST", "/v1/groups/G-3/events", cancel, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Action != "group.fire" || a.Target != "group:G-3" || a.Count != 3 {
		t.Fatalf("alice's cancel of G-3: %+v, want it waiting for approval at the stake of its 3 members", a)
	}
	if st := g.state("G-3"); st != flows.GroupOpen {
		t.Fatalf("a cancel waiting for approval left G-3 %s", st)
	}
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	if st := g.state("G-3"); st != flows.GroupCancelled {
		t.Fatalf("an approved cancel left G-3 %s", st)
	}
	// One member is within it, and counts toward alice's day: two more
	// are not.
	var view struct{ State string }
	g.call("POST", "/v1/groups/G-1/events", cancel, alice).want(t, http.StatusOK).decode(t, &view)
	if view.State != "CANCELLED" {
		t.Errorf("alice's cancel of G-1 answered %+v", view)
	}
	a = g.call("POST", "/v1/groups/G-2/events", cancel, alice).want(t, http.StatusAccepted).approval(t)
	if a.Count != 2 {
		t.Errorf("alice's cancel of G-2: %+v, want it held at 2 members (3 in her day)", a)
	}
	// A key with the scope acts at once.
	g.call("POST", "/v1/groups/G-K/events", cancel, ops).want(t, http.StatusOK)
	rows := g.wantRows("second_factor alice ok", "approval.request alice ok", "second_factor bob ok", "approval.approve bob ok",
		"group.fire alice ok", "group.fire alice ok", "approval.request alice ok", "group.fire ops ok")
	for _, e := range rows {
		if e.Action == "group.fire" && (e.Target == "" || !strings.HasPrefix(e.Target, "group:G-")) {
			t.Errorf("a cancel's row %+v", e)
		}
	}
	if st := g.state("G-2"); st != flows.GroupOpen {
		t.Errorf("a cancel waiting for approval left G-2 %s", st)
	}
}

// TestGroupChargeCallback: the provider's callback about a group member's
// charge, which names the member's charge key as its order, is
// acknowledged, not refused as about an unknown order (the provider would
// send it until it gave up): the charge recorded, again, changes nothing,
// and one that contradicts it is acknowledged once it is in review on the
// group.
func TestGroupChargeCallback(t *testing.T) {
	t.Parallel()
	var sb *payment.Sandbox
	callbacks := map[string]lapse.PaymentCallback{} // the sandbox's, once the engine's clock is known
	e := newEnvWith(t, options{
		cfg: lapsehttp.Config{Callbacks: callbacks},
		engine: func(c *engine.Config) {
			sb = payment.NewSandbox(payment.SandboxConfig{Secret: []byte("sandbox-secret"), Clock: c.Clock})
			callbacks["sandbox"] = sb.Verifier()
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}}
		},
	})
	e.do("POST", "/v1/groups", `{"group_id":"G-CB","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`).want(t, http.StatusCreated)
	e.do("POST", "/v1/groups/G-CB/members", `{"user_id":"alice","method":"tok-a"}`).want(t, http.StatusCreated)
	by := engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}
	if _, err := e.engine.CloseOrder(context.Background(), "G-CB", "the test closes it", by); err != nil {
		t.Fatal(err)
	}
	d := engine.NewDeliverer(e.engine, engine.DelivererConfig{})
	for n := 1; n > 0; {
		var err error
		if n, err = d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var g struct {
		State   string
		Members []lapse.GroupMember
	}
	e.do("GET", "/v1/groups/G-CB", "").want(t, http.StatusOK).decode(t, &g)
	if g.State != "SETTLED" || len(g.Members) != 1 || g.Members[0].TxnID == "" {
		t.Fatalf("group G-CB: %+v", g)
	}
	m := g.Members[0]
	post := func(body []byte) *response {
		t.Helper()
		req, _ := http.NewRequest("POST", e.url+"/v1/payments/sandbox/callback", bytes.NewReader(body))
		req.Header.Set(payment.SignatureHeader, sb.Verifier().Sign(body, e.clock.Now()))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResponse(t, res)
	}
	body, _ := sb.Callback(m.TxnID)
	if !strings.Contains(string(body), `"order_no":"`+m.Key+`"`) {
		t.Fatalf("the charge's callback names %s", body)
	}
	reviews := func() []lapse.Review {
		t.Helper()
		var rs struct{ Reviews []lapse.Review }
		e.do("GET", "/v1/reviews?open=true", "").want(t, http.StatusOK).decode(t, &rs)
		return rs.Reviews
	}
	for range 2 {
		if r := post(body); r.status != http.StatusOK || string(r.body) != `{"status":"ok"}`+"\n" {
			t.Fatalf("the charge's callback: %d %s", r.status, r.body)
		}
	}
	if rs := reviews(); len(rs) != 0 {
		t.Fatalf("the charge's own callback was put in review: %+v", rs)
	}
	other := bytes.Replace(body, []byte(`"amount":990`), []byte(`"amount":1990`), 1)
	if r := post(other); r.status != http.StatusOK {
		t.Errorf("a callback contradicting the charge: %d %s", r.status, r.body)
	}
	if rs := reviews(); len(rs) != 1 || rs[0].OrderNo != "G-CB" || !strings.Contains(rs[0].Reason, "19.90 CNY") {
		t.Errorf("reviews after a contradicting callback: %+v", rs)
	}
	e.do("GET", "/v1/groups/G-CB", "").want(t, http.StatusOK).decode(t, &g)
	if g.Members[0].Status != lapse.ChargeCharged || g.Members[0].TxnID != m.TxnID || g.Members[0].Attempts != 1 {
		t.Errorf("alice after the callbacks: %+v", g.Members[0])
	}
}

// TestGroupMemberMethodIsMasked: a member's payment method (a card token, a
// wallet id) is a credential of their money. The API never shows it back
// whole, to a key that reads groups, to the key that joined, or in the
// audit log (a refused join's row too); the engine still charges with it.
func TestGroupMemberMethodIsMasked(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{})
	reader, auditor := g.key("reader", access.ScopeOrdersRead), g.key("auditor", access.ScopeAuditRead)
	secrets := []string{"ok_card_tok_4242", "ok-1", "ok_wrong_case_9999"}
	noSecret := func(what string, r *response) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(string(r.body), s) {
				t.Errorf("%s shows the method %q: %s", what, s, r.body)
			}
		}
	}
	g.call("POST", "/v1/groups", `{"group_id":"G-M","organiser":"org","price":100,"currency":"CNY","ttl":"1h"}`, bearer(g.admin)).
		want(t, http.StatusCreated)
	var m lapse.GroupMember
	r := g.call("POST", "/v1/groups/G-M/members", `{"user_id":"u0","method":"ok_card_tok_4242"}`, bearer(g.admin)).want(t, http.StatusCreated)
	if r.decode(t, &m); m.Method != "****4242" {
		t.Errorf("join answered method %q, want ****4242", m.Method)
	}
	noSecret("the join", r)
	noSecret("the join again", g.call("POST", "/v1/groups/G-M/members", `{"user_id":"u0","method":"ok_card_tok_4242"}`, bearer(g.admin)).
		want(t, http.StatusOK))
	noSecret("a short method's join", g.call("POST", "/v1/groups/G-M/members", `{"user_id":"u1","method":"ok-1"}`, bearer(g.admin)).
		want(t, http.StatusCreated))
	g.call("POST", "/v1/groups/G-M/members", `{"user_id":"u2","METHOD":"ok_wrong_case_9999"}`, bearer(g.admin)).want(t, http.StatusBadRequest)

	var grp struct{ Members []lapse.GroupMember }
	r = g.call("GET", "/v1/groups/G-M", "", bearer(reader)).want(t, http.StatusOK)
	noSecret("GET /v1/groups", r)
	if r.decode(t, &grp); len(grp.Members) != 2 || grp.Members[0].Method != "****4242" || grp.Members[1].Method != "****" {
		t.Errorf("members %+v, want methods ****4242 and ****", grp.Members)
	}
	// A row written before joins were masked keeps its method (its hash
	// covers it as written), and is shown masked.
	secrets = append(secrets, "ok_written_before_1111")
	if err := g.db.AuditInsert(context.Background(), &lapse.AuditEntry{At: g.clock.Now(), ActorKind: "key", ActorName: "old",
		Action: "group.join", Target: "group:G-M", Params: []byte(`{"user_id":"u9","method":"ok_written_before_1111"}`), Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	r = g.call("GET", "/v1/audit?target=group:G-M", "", bearer(auditor)).want(t, http.StatusOK)
	noSecret("the audit log", r)
	if !strings.Contains(string(r.body), `"method":"****1111"`) {
		t.Errorf("the old row's method is not shown masked: %s", r.body)
	}

	if _, err := g.engine.CloseOrder(context.Background(), "G-M", "the test closes it", engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}); err != nil {
		t.Fatal(err)
	}
	g.work()
	if st := g.state("G-M"); st != flows.GroupSettled {
		t.Errorf("group is %s, want SETTLED: its members are charged with their whole methods", st)
	}
}

// TestAbandonGroupRoute: abandoning a failed group buy takes the scope
// refunds:write and an operator's second factor, and its four-eyes stake
// is the money it refunds: the price of every member charged. A group that
// has not failed is 409, and nothing moves.
func TestAbandonGroupRoute(t *testing.T) {
	t.Parallel()
	g := retryEnv(t, access.Config{ApprovalAmount: 50000})
	g.failedGroup("G-2", 40000, "ok-a", "ok-b", "tok-c") // 2 × 40000 charged
	g.failedGroup("G-1", 40000, "ok-a", "tok-b")         // 1 × 40000
	g.call("POST", "/v1/groups", `{"group_id":"G-OPEN","organiser":"org","price":990,"currency":"CNY","ttl":"1h"}`, bearer(g.admin)).
		want(t, http.StatusCreated)
	g.operator("alice", access.RoleOperator)
	alice := session(g.login("alice"))
	pay := bearer(g.key("pay", access.ScopePaymentsWrite))
	body := `{"reason":"u2's card is declined for good"}`

	g.call("POST", "/v1/groups/G-1/abandon", body, pay).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", "/v1/groups/G-1/abandon", body, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", "/v1/groups/G-OPEN/abandon", body, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		refused(t, http.StatusConflict, lapse.ECONFLICT)
	if st := g.state("G-OPEN"); st != flows.GroupOpen {
		t.Errorf("a refused abandon moved G-OPEN to %s", st)
	}
	a := g.call("POST", "/v1/groups/G-2/abandon", body, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.Action != "group.abandon" || a.Target != "group:G-2" || a.Amount != 80000 || a.Currency != "CNY" {
		t.Errorf("approval request of G-2's abandon: %+v, want 800.00 CNY at stake", a)
	}
	if st := g.state("G-2"); st != flows.GroupFailed {
		t.Errorf("an abandon waiting for approval moved G-2 to %s", st)
	}
	g.call("POST", "/v1/groups/G-1/abandon", body, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusOK)
	if st := g.state("G-1"); st != flows.GroupAbandoned {
		t.Errorf("G-1 is %s after its abandon, want ABANDONED", st)
	}
}
