package http_test

import (
	"context"
	"encoding/json"
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

// unpaid creates the checkout orders nos of user with the admin key.
func (g *guardedEnv) unpaid(user string, nos ...string) {
	g.t.Helper()
	for _, no := range nos {
		g.call("POST", "/v1/orders", fmt.Sprintf(`{"order_no":%q,"flow":"checkout","user_id":%q,"amount":100,"currency":"CNY","ttl":"2h"}`, no, user),
			bearer(g.admin)).want(g.t, http.StatusCreated)
	}
}

// states returns the state of each order of nos, from the engine.
func (g *guardedEnv) states(nos ...string) []lapse.State {
	g.t.Helper()
	out := make([]lapse.State, len(nos))
	for i, no := range nos {
		o, err := g.engine.Order(context.Background(), no)
		if err != nil {
			g.t.Fatalf("Order(%s): %v", no, err)
		}
		out[i] = o.State
	}
	return out
}

// batches returns the close batches, newest first.
func (g *guardedEnv) batches(as cred) []batchView {
	g.t.Helper()
	var list struct{ Batches []batchView }
	g.call("GET", "/v1/closes", "", as).want(g.t, http.StatusOK).decode(g.t, &list)
	return list.Batches
}

// refundingProvider refunds whatever it is asked to, at once.
type refundingProvider struct{ closedProvider }

func (refundingProvider) Refund(_ context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	return &lapse.ProviderRefund{RefundID: "re-" + r.IdempotencyKey, TxnID: r.TxnID, Amount: r.Amount, Status: lapse.RefundSucceeded}, nil
}

// deliver runs the deliveries due, as the server's deliverer does.
func (g *guardedEnv) deliver() {
	g.t.Helper()
	if _, err := engine.NewDeliverer(g.engine, engine.DelivererConfig{}).RunOnce(context.Background()); err != nil {
		g.t.Fatalf("deliver: %v", err)
	}
}

// TestAccessApprovedCloseClosesNoMore: a close by selector is approved for
// the orders it matched when it was requested. When the selector matches
// more by the time a second operator approves it, carrying it out is
// refused: nothing is closed, the request ends failed saying why, and the
// refusal is in the audit log, with the approver; the maker asks again, and
// a second operator approves what it is now.
func TestAccessApprovedCloseClosesNoMore(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 2})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.unpaid("u-bulk", "B-1", "B-2", "B-3")
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	reader := bearer(g.key("reader", access.ScopeOrdersRead))
	g.rows()

	body := `{"selector":{"user_id":"u-bulk"},"reason":"outage"}`
	a := g.call("POST", "/v1/closes", body, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	if a.Status != lapse.ApprovalPending || a.Count != 3 {
		t.Fatalf("the close waits as %+v, want pending for 3 orders", a)
	}
	g.wantRows("second_factor alice ok", "approval.request alice ok")

	// Meanwhile the user makes more orders: the selector matches 5.
	g.clock.Advance(time.Minute)
	g.unpaid("u-bulk", "B-4", "B-5")
	g.rows()
	approve := fmt.Sprintf("/v1/approvals/%d/approve", a.ID)
	p := g.call("POST", approve, `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if !strings.Contains(p.Detail, "5 orders") || !strings.Contains(p.Detail, "was for 3 orders") {
		t.Errorf("the refusal %q does not say what grew", p.Detail)
	}
	if got := g.call("GET", fmt.Sprintf("/v1/approvals/%d", a.ID), "", reader).want(t, http.StatusOK).approval(t); got.Status != lapse.ApprovalFailed ||
		got.Approver != "bob" || !strings.Contains(got.Result, "5 orders") {
		t.Errorf("after the refusal the request is %+v, want failed, saying why", got)
	}
	if bs := g.batches(reader); len(bs) != 0 {
		t.Errorf("a refused approval started %+v", bs)
	}
	for i, st := range g.states("B-1", "B-2", "B-3", "B-4", "B-5") {
		if st != "UNPAID" {
			t.Errorf("B-%d is %s after a refused approval", i+1, st)
		}
	}
	rows := g.wantRows("second_factor bob ok", "approval.approve bob ok", "close.batch alice 409 conflict: ")
	if len(rows) == 3 {
		if e := rows[2]; e.Approver != "bob" || e.ApprovalID != a.ID || e.SecondFactor != "totp" || !strings.Contains(e.Result, "5 orders") {
			t.Errorf("the refused close's row %+v", e)
		}
	}

	// Asked again, it is approved for what it is now.
	a = g.call("POST", "/v1/closes", body, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	if a.Count != 5 {
		t.Fatalf("asked again: %+v, want 5 orders", a)
	}
	done := g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK).approval(t)
	if done.Status != lapse.ApprovalExecuted {
		t.Fatalf("approved again: %+v", done)
	}
	bs := g.batches(reader)
	if len(bs) != 1 || bs[0].ApprovalID != a.ID {
		t.Fatalf("batches: %+v", bs)
	}
	if b := g.waitBatch(bs[0].ID, reader); b.Total != 5 || b.Closed != 5 {
		t.Errorf("the close approved again ended %+v", b)
	}
}

// TestAccessApprovedCloseLeavesNewerOrders: an order made after a close was
// requested is not closed on its approval, even when another order left the
// selection meanwhile, so that the count is what was approved.
func TestAccessApprovedCloseLeavesNewerOrders(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 2})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.unpaid("u-bulk", "N-1", "N-2", "N-3")
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	reader := bearer(g.key("reader", access.ScopeOrdersRead))

	a := g.call("POST", "/v1/closes", `{"selector":{"user_id":"u-bulk"},"reason":"outage"}`, alice,
		header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	g.clock.Advance(time.Minute)
	g.call("POST", "/v1/orders/N-1/events", `{"event":"CANCEL"}`, bearer(g.admin)).want(t, http.StatusOK)
	g.unpaid("u-bulk", "N-4")
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	bs := g.batches(reader)
	if len(bs) != 1 {
		t.Fatalf("batches: %+v", bs)
	}
	if b := g.waitBatch(bs[0].ID, reader); b.Total != 2 || b.Closed != 2 {
		t.Errorf("the approved close ended %+v, want the 2 orders left of the 3 approved", b)
	}
	if got := g.states("N-2", "N-3", "N-4"); got[0] != "CLOSED" || got[1] != "CLOSED" || got[2] != "UNPAID" {
		t.Errorf("N-2, N-3, N-4: %v, want CLOSED, CLOSED, UNPAID", got)
	}
}

// TestAccessApprovedRefundIsNotMoreAtRisk: a refund is judged with the
// order's other refunds; when more was refunded between its request and
// its approval, carrying it out is refused, and asked again it shows the
// approver the total.
func TestAccessApprovedRefundIsNotMoreAtRisk(t *testing.T) {
	t.Parallel()
	g := newGuardedEnvPaying(t, access.Config{ApprovalAmount: 500}, refundingProvider{})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.paidOrder("RR-1", 1000)
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	code := header(lapsehttp.SecondFactorHeader, g.code("alice"))
	a := g.call("POST", "/v1/orders/RR-1/refunds", `{"amount":600,"reason":"lid"}`, alice, code).want(t, http.StatusAccepted).approval(t)
	if a.Amount != 600 || a.AtRisk != 0 {
		t.Errorf("the first request %+v, want 600 and nothing more at risk", a)
	}
	// 300 alone is below the threshold, and no refund was made yet.
	g.call("POST", "/v1/orders/RR-1/refunds", `{"amount":300}`, alice).want(t, http.StatusCreated)
	g.deliver()
	if rs := g.refunds("RR-1"); len(rs) != 1 || rs[0].Status != lapse.OrderRefundSucceeded {
		t.Fatalf("the refund below the threshold: %+v", rs)
	}
	g.rows()
	p := g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if !strings.Contains(p.Detail, "9.00 CNY") {
		t.Errorf("the refusal %q does not say what is at risk now", p.Detail)
	}
	if rs := g.refunds("RR-1"); len(rs) != 1 || rs[0].Amount != 300 {
		t.Fatalf("refunds after a refused approval: %+v", rs)
	}
	g.wantRows("second_factor bob ok", "approval.approve bob ok", "refund.create alice 409 conflict: ")

	a = g.call("POST", "/v1/orders/RR-1/refunds", `{"amount":600,"reason":"lid"}`, alice).want(t, http.StatusAccepted).approval(t)
	if a.Amount != 600 || a.AtRisk != 900 {
		t.Errorf("asked again: %+v, want 600 with 900 at risk", a)
	}
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	if rs := g.refunds("RR-1"); len(rs) != 2 {
		t.Fatalf("refunds after the approval: %+v", rs)
	}
}

// TestAccessQueuedRefundsDoNotAddUpPastApproval: refund requests waiting
// for approval are not refunds yet, so each is judged alone when it is
// made; but each is judged again when it is carried out, with the refunds
// made since, so that requests queued together never refund more than an
// approver approved: of two of 600 on one order, both approved, the second
// is refused.
func TestAccessQueuedRefundsDoNotAddUpPastApproval(t *testing.T) {
	t.Parallel()
	g := newGuardedEnvPaying(t, access.Config{ApprovalAmount: 500}, refundingProvider{})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.paidOrder("RQ-1", 2000)
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	code := header(lapsehttp.SecondFactorHeader, g.code("alice"))
	first := g.call("POST", "/v1/orders/RQ-1/refunds", `{"amount":600}`, alice, code).want(t, http.StatusAccepted).approval(t)
	second := g.call("POST", "/v1/orders/RQ-1/refunds", `{"amount":600}`, alice).want(t, http.StatusAccepted).approval(t)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", first.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", second.ID), `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	if rs := g.refunds("RQ-1"); len(rs) != 1 || rs[0].Amount != 600 {
		t.Fatalf("refunds after two queued approvals: %+v, want the first alone", rs)
	}
}

// TestAccessGroupRetryStakeIsItsCharges: retrying a failed group charges
// every member not charged yet, so that is its stake, not one member's
// price.
func TestAccessGroupRetryStakeIsItsCharges(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.call("POST", "/v1/groups", `{"group_id":"GR-1","organiser":"org","price":300,"currency":"CNY","ttl":"1h"}`, bearer(g.admin)).want(t, http.StatusCreated)
	for _, m := range []string{"m1", "m2", "m3"} {
		g.call("POST", "/v1/groups/GR-1/members", `{"user_id":"`+m+`","method":"tok-`+m+`"}`, bearer(g.admin)).want(t, http.StatusCreated)
	}
	ctx := context.Background()
	for _, ev := range []lapse.Event{"CLOSE", "FAIL"} {
		if _, err := g.engine.Fire(ctx, "GR-1", engine.Fire{Event: ev, Reason: "test"}); err != nil {
			t.Fatalf("fire %s: %v", ev, err)
		}
	}
	alice := session(g.login("alice"))
	a := g.call("POST", "/v1/groups/GR-1/retry", `{"reason":"gateway is back"}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted).approval(t)
	if a.Action != "group.retry" || a.Amount != 900 || a.Currency != "CNY" || a.Target != "group:GR-1" {
		t.Errorf("the group's retry waits as %+v, want 900 CNY at stake", a)
	}
	if st := g.states("GR-1"); st[0] != "FAILED" {
		t.Errorf("a retry waiting for approval moved the group to %s", st[0])
	}
	bob := session(g.login("bob"))
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).want(t, http.StatusOK)
	if st := g.states("GR-1"); st[0] != "CLOSED" {
		t.Errorf("the approved retry left the group %s, want CLOSED (charging again)", st[0])
	}
}

// TestAccessApprovalShowsItsRequest: the approver sees what they approve:
// the request carried out when it is approved, with its body.
func TestAccessApprovalShowsItsRequest(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 1, ApprovalAmount: 500})
	g.operator("alice", access.RoleOperator)
	g.operator("vic", access.RoleViewer)
	g.unpaid("u-bulk", "Q-1", "Q-2")
	g.paidOrder("Q-3", 1000)
	alice, vic := session(g.login("alice")), session(g.login("vic"))
	code := header(lapsehttp.SecondFactorHeader, g.code("alice"))
	c := g.call("POST", "/v1/closes", `{"selector":{"user_id":"u-bulk"},"reason":"outage"}`, alice, code).want(t, http.StatusAccepted).approval(t)
	r := g.call("POST", "/v1/orders/Q-3/refunds", `{"amount":600}`, alice).want(t, http.StatusAccepted).approval(t)

	type selection struct {
		Selector struct {
			UserID string `json:"user_id"`
		}
		Amount int64
	}
	for _, w := range []struct {
		id         int64
		path, user string
		amount     int64
	}{{c.ID, "/v1/closes", "u-bulk", 0}, {r.ID, "/v1/orders/Q-3/refunds", "", 600}} {
		got := g.call("GET", fmt.Sprintf("/v1/approvals/%d", w.id), "", vic).want(t, http.StatusOK).approval(t)
		var body selection
		if err := json.Unmarshal(got.Request.Body, &body); err != nil || got.Request.Method != "POST" || got.Request.Path != w.path ||
			body.Selector.UserID != w.user || body.Amount != w.amount {
			t.Errorf("approval %d shows the request %s %s %s (%v)", w.id, got.Request.Method, got.Request.Path, got.Request.Body, err)
		}
	}
	var list struct{ Approvals []approvalView }
	g.call("GET", "/v1/approvals?status=pending", "", vic).want(t, http.StatusOK).decode(t, &list)
	if len(list.Approvals) != 2 || !strings.Contains(string(list.Approvals[1].Request.Body), `"user_id":"u-bulk"`) {
		t.Errorf("the list shows %+v", list.Approvals)
	}
}

// unaskedRefund has the provider report, by a signed callback, refund
// refundID of amount of order no's payment, which Lapse never asked for,
// and returns the open review that holds it.
func (g *guardedEnv) unaskedRefund(no, refundID string, amount int64) lapse.Review {
	g.t.Helper()
	now := g.clock.Now()
	body := fmt.Sprintf(`{"kind":"refunded","txn_id":%q,"refund_id":%q,"order_no":%q,"amount":%d,"currency":"CNY","merchant":"m-1","paid_at":%q}`,
		"txn-"+no, refundID, no, amount, now.Format(time.RFC3339Nano))
	if r := g.callback(body, now); r.status != http.StatusOK {
		g.t.Fatalf("refund callback of %s: %d %s; want it acknowledged", no, r.status, r.body)
	}
	var list struct{ Reviews []lapse.Review }
	g.call("GET", "/v1/reviews?open=true", "", bearer(g.admin)).want(g.t, http.StatusOK).decode(g.t, &list)
	for _, rv := range list.Reviews {
		if rv.OrderNo == no && rv.OrderRefundID != 0 {
			return rv
		}
	}
	g.t.Fatalf("no open review of %s holds a refund: %+v", no, list.Reviews)
	return lapse.Review{}
}

// TestAccessSettleReview: settling a refund in review is a risky refund
// action: the scope refunds:write (operations:write, which resolves
// reviews, is not enough), an operator's second factor, four eyes above the
// approval amount for the refund's amount, and its audit row. Resolving
// the review alone is refused.
func TestAccessSettleReview(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalAmount: 500, ApprovalTTL: 10 * time.Minute})
	g.operator("alice", access.RoleOperator)
	g.paidOrder("S-1", 1000)
	g.paidOrder("S-2", 1000)
	rv := g.unaskedRefund("S-1", "re-dash-1", 300)
	big := g.unaskedRefund("S-2", "re-dash-2", 700)
	settle := fmt.Sprintf("/v1/reviews/%d/settle", rv.ID)
	ops := g.key("ops", access.ScopeOperationsWrite)
	alice := session(g.login("alice"))
	g.rows()

	g.call("POST", fmt.Sprintf("/v1/reviews/%d/resolve", rv.ID), `{"note":"done"}`, bearer(ops)).refused(t, http.StatusConflict, lapse.ECONFLICT)
	g.call("POST", settle, `{"status":"succeeded","note":"seen in the dashboard"}`, bearer(ops)).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", settle, `{"status":"succeeded","note":"seen in the dashboard"}`, alice).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", settle, `{"status":"maybe","note":"?"}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	if rs := g.refunds("S-1"); len(rs) != 1 || rs[0].Status != lapse.OrderRefundReview {
		t.Fatalf("refusals settled the refund: %+v", rs)
	}
	g.wantRows("review.resolve ops 409 conflict", "review.settle ops refused: ", "review.settle alice refused: this action needs a fresh second factor",
		"second_factor alice ok", "review.settle alice 400 invalid")

	var got lapse.Review
	g.call("POST", settle, `{"status":"succeeded","note":"seen in the dashboard\r\nticket 7"}`, alice).want(t, http.StatusOK).decode(t, &got)
	if got.ID != rv.ID || got.ResolvedAt == nil || got.ResolvedBy != "operator:alice" || got.Note != "seen in the dashboard\nticket 7" {
		t.Errorf("settled review %+v", got)
	}
	if rs := g.refunds("S-1"); len(rs) != 1 || rs[0].Status != lapse.OrderRefundSucceeded {
		t.Errorf("refunds of S-1 after the settlement: %+v", rs)
	}
	rows := g.wantRows("review.settle alice ok")
	if len(rows) == 1 && (rows[0].SecondFactor != "totp" || rows[0].Target != fmt.Sprintf("review:%d", rv.ID)) {
		t.Errorf("the settlement's row %+v", rows[0])
	}
	g.call("POST", settle, `{"status":"failed","note":"no"}`, alice).refused(t, http.StatusConflict, lapse.ECONFLICT)
	g.wantRows("review.settle alice 409 conflict")

	// 7.00 CNY is above the approval amount: a second operator approves it.
	a := g.call("POST", fmt.Sprintf("/v1/reviews/%d/settle", big.ID), `{"status":"failed","note":"reversed"}`, alice,
		header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	if a.Action != "review.settle" || a.Amount != 700 || a.Currency != "CNY" {
		t.Errorf("approval request %+v", a)
	}
	if rs := g.refunds("S-2"); len(rs) != 1 || rs[0].Status != lapse.OrderRefundReview {
		t.Errorf("a settlement waiting for approval settled: %+v", rs)
	}
}

// TestAccessResetCancelsRequests: a close waiting for approval whose maker
// is reset is cancelled, shown so (and listed by ?status=cancelled), and
// approving it closes nothing; the maker's session is over.
func TestAccessResetCancelsRequests(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{ApprovalCount: 2})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	g.unpaid("u-bulk", "B-1", "B-2", "B-3")
	alice, bob := session(g.login("alice")), session(g.login("bob"))
	reader := bearer(g.key("reader", access.ScopeOrdersRead))
	a := g.call("POST", "/v1/closes", `{"selector":{"user_id":"u-bulk"},"reason":"outage"}`, alice,
		header(lapsehttp.SecondFactorHeader, g.code("alice"))).want(t, http.StatusAccepted).approval(t)
	g.rows()

	if _, _, err := g.access.ResetOperator(context.Background(), g.root, "alice", ""); err != nil {
		t.Fatal(err)
	}
	g.wantRows("approval.cancel root ok", "operator.reset root ok")
	got := g.call("GET", fmt.Sprintf("/v1/approvals/%d", a.ID), "", reader).want(t, http.StatusOK).approval(t)
	if got.Status != lapse.ApprovalCancelled || !strings.Contains(got.Result, "alice was reset by cli:root") {
		t.Fatalf("after the reset the request is %+v, want cancelled", got)
	}
	var list struct{ Approvals []approvalView }
	g.call("GET", "/v1/approvals?status=cancelled", "", reader).want(t, http.StatusOK).decode(t, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != a.ID {
		t.Errorf("?status=cancelled = %+v", list.Approvals)
	}
	g.call("POST", fmt.Sprintf("/v1/approvals/%d/approve", a.ID), `{"code":"`+g.code("bob")+`"}`, bob).refused(t, http.StatusConflict, lapse.ECONFLICT)
	for i, st := range g.states("B-1", "B-2", "B-3") {
		if st != "UNPAID" {
			t.Errorf("B-%d is %s after approving a cancelled request", i+1, st)
		}
	}
	g.call("GET", "/v1/sessions/current", "", alice).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
}
