package http_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// heldList returns the held payments the API lists for query.
func (g *guardedEnv) heldList(query string, as cred) []lapse.HeldPayment {
	g.t.Helper()
	var list struct {
		HeldPayments []lapse.HeldPayment `json:"held_payments"`
	}
	g.call("GET", "/v1/held-payments"+query, "", as).want(g.t, http.StatusOK).decode(g.t, &list)
	return list.HeldPayments
}

// matchHeld runs a pass of the held payments' matcher, as the server's does.
func (g *guardedEnv) matchHeld(window time.Duration) engine.HeldMatched {
	g.t.Helper()
	m, err := engine.NewHeldMatcher(g.engine, engine.HeldMatcherConfig{Window: window})
	if err != nil {
		g.t.Fatal(err)
	}
	got, err := m.RunOnce(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	return got
}

// TestPaymentCallbackHeld: a signed callback for an order Lapse does not
// have is acknowledged, saying that the payment is held because no such
// order exists, and held once however often it comes; the order created
// after it is paid by it; one whose order never comes is in review, and an
// operator refunds or dismisses it, with a second factor, four eyes above
// the approval amount, and an audit row.
func TestPaymentCallbackHeld(t *testing.T) {
	t.Parallel()
	g := newGuardedEnvPaying(t, access.Config{ApprovalAmount: 5000, ApprovalTTL: 10 * time.Minute}, refundingProvider{})
	g.operator("alice", access.RoleOperator)
	reader := g.key("reader", access.ScopeOrdersRead)
	start := g.clock.Now()

	// Held, and the same callback again: acknowledged each time, held once.
	for range 3 {
		r := g.callback(noticeBody("HELD-1", "txn-held-1", 1999, start), g.clock.Now())
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"ok"`) ||
			!strings.Contains(string(r.body), "held: no order HELD-1 exists") {
			t.Fatalf("callback for an unknown order: %d %s", r.status, r.body)
		}
	}
	hs := g.heldList("", bearer(reader))
	if len(hs) != 1 || hs[0].TxnID != "txn-held-1" || hs[0].Status != lapse.HeldWaiting || hs[0].Amount != 1999 || hs[0].OrderNo != "HELD-1" {
		t.Fatalf("held payments = %+v", hs)
	}
	g.call("GET", "/v1/held-payments?status=maybe", "", bearer(reader)).refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("GET", "/v1/held-payments", "", bearer(g.key("nobody", access.ScopeMetricsRead))).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)

	// Its order, created after it: paid by it.
	g.clock.Advance(5 * time.Second)
	g.call("POST", "/v1/orders", `{"order_no":"HELD-1","flow":"checkout","user_id":"u","amount":1999,"currency":"CNY","ttl":"15m"}`,
		bearer(g.admin)).want(t, http.StatusCreated)
	if got := g.matchHeld(0); got.Applied != 1 {
		t.Fatalf("matcher pass = %+v", got)
	}
	var o lapse.Order
	g.call("GET", "/v1/orders/HELD-1", "", bearer(reader)).want(t, http.StatusOK).decode(t, &o)
	var pays struct{ Payments []lapse.Payment }
	g.call("GET", "/v1/orders/HELD-1/payments", "", bearer(reader)).want(t, http.StatusOK).decode(t, &pays)
	if o.State != "PAID" || len(pays.Payments) != 1 || pays.Payments[0].Status != lapse.PaymentApplied || pays.Payments[0].TxnID != "txn-held-1" {
		t.Errorf("HELD-1 after the matcher: %s, payments %+v", o.State, pays.Payments)
	}
	if r := g.callback(noticeBody("HELD-1", "txn-held-1", 1999, start), g.clock.Now()); r.status != http.StatusOK ||
		strings.Contains(string(r.body), "held") {
		t.Errorf("the callback again, once its order is paid: %d %s", r.status, r.body)
	}

	// Two whose orders never come: in review after the window.
	for i, amount := range []int64{1000, 6000} {
		no, txn := fmt.Sprintf("HELD-%d", i+2), fmt.Sprintf("txn-held-%d", i+2)
		if r := g.callback(noticeBody(no, txn, amount, g.clock.Now()), g.clock.Now()); r.status != http.StatusOK {
			t.Fatalf("callback %s: %d %s", no, r.status, r.body)
		}
	}
	g.clock.Advance(time.Hour)
	if got := g.matchHeld(time.Hour); got.Reviewed != 2 {
		t.Fatalf("matcher pass after the window = %+v", got)
	}
	desk := g.heldList("?status=review", bearer(reader))
	if len(desk) != 2 || desk[0].OrderNo != "HELD-2" || desk[1].OrderNo != "HELD-3" || !strings.Contains(desk[0].Reason, "no order HELD-2 appeared") {
		t.Fatalf("the desk = %+v", desk)
	}
	var one lapse.HeldPayment
	g.call("GET", fmt.Sprintf("/v1/held-payments/%d", desk[0].ID), "", bearer(reader)).want(t, http.StatusOK).decode(t, &one)
	if one.ID != desk[0].ID || one.Status != lapse.HeldReview {
		t.Errorf("GET the held payment = %+v", one)
	}
	g.call("GET", "/v1/held-payments/9999", "", bearer(reader)).refused(t, http.StatusNotFound, lapse.ENOTFOUND)

	// Refund: refunds:write, and an operator's second factor.
	refund := fmt.Sprintf("/v1/held-payments/%d/refund", desk[0].ID)
	alice := session(g.login("alice"))
	ops := g.key("ops", access.ScopeOperationsWrite)
	g.rows()
	g.call("POST", refund, "", bearer(ops)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", refund, "", alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	var h lapse.HeldPayment
	g.call("POST", refund, "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusOK).decode(t, &h)
	if h.Status != lapse.HeldRefunded || h.By != "operator:alice" || h.RefundID == "" {
		t.Errorf("refunded held payment = %+v", h)
	}
	rows := g.wantRows("held_payment.refund ops refused: ", "held_payment.refund alice refused: this action needs a fresh second factor",
		"second_factor alice ok", "held_payment.refund alice ok")
	if len(rows) == 4 && (rows[3].SecondFactor != "totp" || rows[3].Target != fmt.Sprintf("held_payment:%d", desk[0].ID)) {
		t.Errorf("the refund's row %+v", rows[3])
	}
	g.call("POST", refund, "", alice).refused(t, http.StatusConflict, lapse.ECONFLICT)
	g.wantRows("held_payment.refund alice 409 conflict")

	// Dismiss: above the approval amount, a second operator approves it.
	dismiss := fmt.Sprintf("/v1/held-payments/%d/dismiss", desk[1].ID)
	g.call("POST", dismiss, `{"note":""}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).refused(t, http.StatusBadRequest, lapse.EINVALID)
	a := g.call("POST", dismiss, `{"note":"the provider reversed it"}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.Action != "held_payment.dismiss" || a.Amount != 6000 || a.Currency != "CNY" {
		t.Errorf("approval request %+v", a)
	}
	if hs := g.heldList("?status=review", bearer(reader)); len(hs) != 1 || hs[0].ID != desk[1].ID {
		t.Errorf("a dismissal waiting for approval dismissed: %+v", hs)
	}

	// Reconcile: the held payments are on the books.
	rec, err := g.engine.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tot := rec.Totals["CNY"]; rec.Held != 2 || tot == nil || *tot != (engine.MoneyTotals{Captured: 1999 + 1000 + 6000, Applied: 1999, Refunded: 1000, Review: 6000}) {
		t.Errorf("reconciliation = %+v, totals %+v", rec, tot)
	}
}

// TestHeldPaymentApply: POST /v1/held-payments/{id}/apply applies a held
// payment in review to its order, which exists, created no later than its
// provider time (so that it can be neither refunded nor dismissed): with
// refunds:write, an operator's second factor, four eyes above the approval
// amount, and an audit row; 409 when the order cannot take it.
func TestHeldPaymentApply(t *testing.T) {
	t.Parallel()
	g := newGuardedEnvPaying(t, access.Config{ApprovalAmount: 5000, ApprovalTTL: 10 * time.Minute}, refundingProvider{})
	g.operator("alice", access.RoleOperator)
	reader := g.key("reader", access.ScopeOrdersRead)
	paidAt := g.clock.Now().Add(4 * time.Minute) // the provider's clock is ahead
	for _, c := range []struct {
		no     string
		amount int64
	}{{"APPLY-1", 1999}, {"APPLY-2", 1999}, {"APPLY-3", 6000}} {
		if r := g.callback(noticeBody(c.no, "txn-"+c.no, c.amount, paidAt), g.clock.Now()); r.status != http.StatusOK {
			t.Fatalf("callback %s: %d %s", c.no, r.status, r.body)
		}
	}
	g.clock.Advance(time.Minute)
	if got := g.matchHeld(time.Minute); got.Reviewed != 3 {
		t.Fatalf("matcher pass after the window = %+v", got)
	}
	for _, c := range []struct {
		no     string
		amount int64
	}{{"APPLY-1", 1999}, {"APPLY-2", 1999}, {"APPLY-3", 6000}} {
		g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":%q,"flow":"checkout","user_id":"u","amount":%d,"currency":"CNY","ttl":"15m"}`, c.no, c.amount),
			bearer(g.admin)).want(t, http.StatusCreated)
	}
	g.call("POST", "/v1/orders/APPLY-2/events", `{"event":"CANCEL"}`, bearer(g.admin)).want(t, http.StatusOK)
	g.clock.Advance(4 * time.Minute)
	desk := g.heldList("?status=review", bearer(reader))
	if len(desk) != 3 {
		t.Fatalf("the desk = %+v", desk)
	}
	alice := session(g.login("alice"))
	ops := g.key("ops", access.ScopeOperationsWrite)
	apply := func(i int) string { return fmt.Sprintf("/v1/held-payments/%d/apply", desk[i].ID) }
	g.operator("bob", access.RoleOperator)
	g.call("POST", fmt.Sprintf("/v1/held-payments/%d/dismiss", desk[0].ID), `{"note":"kept"}`, session(g.login("bob")),
		header(lapsehttp.SecondFactorHeader, g.code("bob"))).refused(t, http.StatusConflict, lapse.ECONFLICT)
	g.rows()

	g.call("POST", apply(0), "", bearer(ops)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", apply(0), "", alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	var h lapse.HeldPayment
	g.call("POST", apply(0), "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusOK).decode(t, &h)
	if h.Status != lapse.HeldApplied || h.By != "operator:alice" {
		t.Errorf("applied held payment = %+v", h)
	}
	rows := g.wantRows("held_payment.apply ops refused: ", "held_payment.apply alice refused: this action needs a fresh second factor",
		"second_factor alice ok", "held_payment.apply alice ok")
	if len(rows) == 4 && (rows[3].SecondFactor != "totp" || rows[3].Target != fmt.Sprintf("held_payment:%d", desk[0].ID)) {
		t.Errorf("the apply's row %+v", rows[3])
	}
	var o lapse.Order
	g.call("GET", "/v1/orders/APPLY-1", "", bearer(reader)).want(t, http.StatusOK).decode(t, &o)
	if o.State != "PAID" {
		t.Errorf("APPLY-1 after the apply: %s; want PAID", o.State)
	}
	g.call("POST", apply(0), "", alice).refused(t, http.StatusConflict, lapse.ECONFLICT)
	g.wantRows("held_payment.apply alice 409 conflict")

	// Its order closed: 409, nothing changed.
	g.call("POST", apply(1), "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if hs := g.heldList("?status=review", bearer(reader)); len(hs) != 2 || hs[0].ID != desk[1].ID {
		t.Errorf("the desk after a refused apply = %+v", hs)
	}

	// Above the approval amount, a second operator approves it.
	a := g.call("POST", apply(2), "", alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	if a.Action != "held_payment.apply" || a.Amount != 6000 || a.Currency != "CNY" {
		t.Errorf("approval request %+v", a)
	}
	g.call("GET", "/v1/orders/APPLY-3", "", bearer(reader)).want(t, http.StatusOK).decode(t, &o)
	if o.State != "UNPAID" {
		t.Errorf("APPLY-3 with its apply waiting for approval: %s; want UNPAID", o.State)
	}
}
