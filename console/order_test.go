package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

var (
	flashRE  = regexp.MustCompile(`<p class="flash flash-(\w+)" role="status">([^<]*)</p>`)
	refKeyRE = regexp.MustCompile(`name="idempotency_key" value="([^"]+)"`)
	// actionForm is any form of the order page that acts on the order.
	actionForm = regexp.MustCompile(`<form method="post" action="/console/orders/`)
)

// act submits an action form of order no's page and returns the flash of
// the page it redirects back to: its kind and text.
func (b *browser) act(no, action string, form url.Values) (kind, text string) {
	b.e.t.Helper()
	resp := b.post("/console/orders/"+no+"/"+action, form)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/orders/"+no {
		b.e.t.Fatalf("%s %s = %d to %q", action, no, resp.StatusCode, resp.Header.Get("Location"))
	}
	body := b.page("/console/orders/"+no, http.StatusOK)
	m := flashRE.FindStringSubmatch(body)
	if m == nil {
		b.e.t.Fatalf("%s %s left no flash:\n%s", action, no, body)
	}
	return m[1], html.UnescapeString(m[2])
}

func TestOrderPageMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", "operator")
	b := e.login("alice")
	if body := b.page("/console/orders/NOPE-1", http.StatusNotFound); !strings.Contains(body, `No order &#34;NOPE-1&#34;.`) {
		t.Errorf("unknown order:\n%s", body)
	}
	b.zh()
	if body := b.page("/console/orders/NOPE-1", http.StatusNotFound); !strings.Contains(body, "不存在") {
		t.Errorf("unknown order in Chinese:\n%s", body)
	}
}

// TestOrderPageNew: a fresh order has one transition and, unpaid, can be
// closed; nothing else makes sense for it.
func TestOrderPageNew(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.create("C-9", "checkout", 1999, `{"channel": "app"}`)
	d.operator("alice", "operator")
	b := d.login("alice")
	body := b.page("/console/orders/C-9", http.StatusOK)
	for _, want := range []string{"Order C-9", "UNPAID", "19.99 CNY", "u-C-9", "sku-1 × 1", "&#34;channel&#34;: &#34;app&#34;",
		"2026-11-30 08:15:00 UTC", "→ UNPAID", `id="close-form"`} {
		if !strings.Contains(body, want) {
			t.Errorf("a new order's page lacks %q:\n%s", want, body)
		}
	}
	for _, not := range []string{`id="retry-form"`, `id="refund-form"`, `id="revive-form`, `id="resolve-form`} {
		if strings.Contains(body, not) {
			t.Errorf("a new order's page offers %s", not)
		}
	}
	b.zh()
	body = b.page("/console/orders/C-9", http.StatusOK)
	for _, want := range []string{"订单 C-9", "时间线", "状态流转", "2026-11-30 16:00:00 CST", "关单"} {
		if !strings.Contains(body, want) {
			t.Errorf("a new order's page in Chinese lacks %q:\n%s", want, body)
		}
	}
}

// TestOrderRetry: the membership in manual review shows every attempt of
// its dead delivery; its compensation is retried only with a second
// factor, and then issues its cards.
func TestOrderRetry(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.membershipInReview("M-1")
	d.operator("alice", "operator")
	b := d.login("alice")

	body := b.page("/console/orders/M-1", http.StatusOK)
	for _, want := range []string{"Attempt 1 to issue (delivery #1)", "Attempt 2 to issue (delivery #1)", "Attempt 3 to issue (delivery #1)",
		"COMPENSATING → MANUAL_REVIEW", "Payment applied", "Review #1 opened", "Card issue failed", "card service under maintenance",
		`id="retry-form"`, `id="refund-form"`, `id="resolve-form-1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("M-1's page lacks %q:\n%s", want, body)
		}
	}
	// Its dead issue delivery is not offered to revive: the engine refuses
	// (the order's retry issues it).
	if strings.Contains(body, "Attempt 4") || strings.Contains(body, `id="close-form"`) || strings.Contains(body, `id="revive-form-1"`) {
		t.Errorf("M-1's page shows more than it has:\n%s", body)
	}

	kind, text := b.act("M-1", "retry", url.Values{"reason": {"card service back"}})
	if kind != "error" || !strings.Contains(text, "needs a fresh second factor") {
		t.Errorf("retry without a code: %s %q", kind, text)
	}
	if st := d.state("M-1"); st != flows.ManualReview {
		t.Fatalf("retried without a code: %s", st)
	}
	kind, text = b.act("M-1", "retry", url.Values{"reason": {"card service back"}, "code": {"000000"}})
	if kind != "error" || !strings.Contains(text, "the code is wrong") {
		t.Errorf("retry with a wrong code: %s %q", kind, text)
	}
	kind, text = b.act("M-1", "retry", url.Values{"reason": {"card service back"}, "code": {d.code("alice")}})
	if kind != "ok" || text != "Done." {
		t.Fatalf("retry with a code: %s %q", kind, text)
	}
	if st := d.state("M-1"); st != flows.Compensating {
		t.Fatalf("retried: %s", st)
	}
	d.cards.fixed.Store(true)
	d.drain()
	if st := d.state("M-1"); st != flows.Issued {
		t.Fatalf("after the retry: %s", st)
	}
	body = b.page("/console/orders/M-1", http.StatusOK)
	for _, want := range []string{"MANUAL_REVIEW → COMPENSATING", "COMPENSATING → ISSUED", "Card #1 issued: swim-10",
		"order.retry · ok", "order.retry · refused: ", "operator:alice", "totp", "card service back"} {
		if !strings.Contains(body, want) {
			t.Errorf("M-1's page after the retry lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `id="retry-form"`) {
		t.Errorf("an issued order offers a retry")
	}
}

// TestOrderRefund: a partial refund needs the second factor; a double
// submit of its form refunds once; above ApprovalAmount it waits for a
// second operator.
func TestOrderRefund(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{approvalAmount: 10000}) // 100.00 CNY
	d.membershipInReview("M-1")
	d.operator("alice", "operator")
	b := d.login("alice")

	body := b.page("/console/orders/M-1", http.StatusOK)
	m := refKeyRE.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `name="amount" value="199.00"`) {
		t.Fatalf("no refund form:\n%s", body)
	}
	form := url.Values{"amount": {"50.5"}, "reason": {"half a season"}, "idempotency_key": {m[1]}}
	kind, text := b.act("M-1", "refund", form)
	if kind != "error" || !strings.Contains(text, "needs a fresh second factor") {
		t.Errorf("refund without a code: %s %q", kind, text)
	}
	for _, bad := range []string{"50.555", "-5", "5e1", "0"} {
		f := url.Values{"amount": {bad}, "reason": {"x"}, "idempotency_key": {m[1]}, "code": {"123456"}}
		if kind, text := b.act("M-1", "refund", f); kind != "error" || !strings.HasPrefix(text, "Refused: ") {
			t.Errorf("refund of %q: %s %q", bad, kind, text)
		}
	}
	form.Set("code", d.code("alice"))
	if kind, text := b.act("M-1", "refund", form); kind != "ok" || text != "Done." {
		t.Fatalf("refund with a code: %s %q", kind, text)
	}
	form.Del("code") // the code given a moment ago is fresh still
	if kind, text := b.act("M-1", "refund", form); kind != "ok" {
		t.Fatalf("the same refund again: %s %q", kind, text)
	}
	refunds, err := d.engine.OrderRefunds(d.ctx, "M-1")
	if err != nil || len(refunds) != 1 || refunds[0].Amount != 5050 || refunds[0].Key != m[1] {
		t.Fatalf("refunds after a double submit: %+v, %v", refunds, err)
	}
	d.drain() // the provider refunds; a partial refund sends a membership back to manual review
	if st := d.state("M-1"); st != flows.ManualReview {
		t.Fatalf("after the partial refund: %s", st)
	}

	body = b.page("/console/orders/M-1", http.StatusOK)
	for _, want := range []string{"Refund of 50.50 CNY: succeeded", "refund.create · ok", "Up to 148.50 CNY is left to refund", `value="148.50"`} {
		if !strings.Contains(body, want) {
			t.Errorf("M-1's page after the refund lacks %q:\n%s", want, body)
		}
	}
	m2 := refKeyRE.FindStringSubmatch(body)
	if m2 == nil || m2[1] == m[1] {
		t.Fatalf("the refund form's key is not new: %v", m2)
	}
	kind, text = b.act("M-1", "refund", url.Values{"amount": {"120"}, "reason": {"the rest, nearly"}, "idempotency_key": {m2[1]},
		"code": {d.code("alice")}})
	if kind != "pending" || !regexp.MustCompile(`^Waiting for a second operator's approval \(request \d+\)\.$`).MatchString(text) {
		t.Errorf("a refund above the approval amount: %s %q", kind, text)
	}
	if refunds, _ := d.engine.OrderRefunds(d.ctx, "M-1"); len(refunds) != 1 {
		t.Errorf("a refund waiting for approval was made: %+v", refunds)
	}
	// The approver sees it with the order's earlier refund.
	bodyHas(t, "the approvals page", b.page("/console/approvals", http.StatusOK), "POST /v1/orders/M-1/refunds", "120.00 CNY",
		"170.50 CNY with the order&#39;s earlier refunds")
	// The pending queue row reads in Chinese too.
	b.zh()
	if kind, text := b.act("M-1", "refund", url.Values{"amount": {"1.234"}, "reason": {"x"}, "idempotency_key": {m2[1]}}); kind != "error" ||
		!strings.Contains(text, "CNY 金额至多 2 位小数") {
		t.Errorf("a bad amount in Chinese: %s %q", kind, text)
	}
}

// TestOrderViewer: a viewer sees the order and no action; a form posted
// all the same is refused by the API, which audits the refusal.
func TestOrderViewer(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.membershipInReview("M-1")
	d.operator("vera", "viewer")
	b := d.login("vera")
	body := b.page("/console/orders/M-1", http.StatusOK)
	if actionForm.MatchString(body) || !strings.Contains(body, "Your role may look, not act") ||
		!strings.Contains(body, "Attempt 3 to issue") {
		t.Errorf("a viewer's page of M-1:\n%s", body)
	}
	m := regexp.MustCompile(`name="idempotency_key"`).FindString(body)
	if m != "" {
		t.Errorf("a viewer's page carries a refund key")
	}
	kind, text := b.act("M-1", "refund", url.Values{"amount": {"10"}, "reason": {"forged"}, "idempotency_key": {"console-forged"},
		"code": {d.code("vera")}})
	if kind != "error" || !strings.Contains(text, "refunds:write") {
		t.Errorf("a viewer's forged refund: %s %q", kind, text)
	}
	kind, text = b.act("M-1", "retry", url.Values{"code": {d.code("vera")}})
	if kind != "error" || !strings.Contains(text, "operations:write") {
		t.Errorf("a viewer's forged retry: %s %q", kind, text)
	}
	if refunds, _ := d.engine.OrderRefunds(d.ctx, "M-1"); len(refunds) != 0 || d.state("M-1") != flows.ManualReview {
		t.Fatalf("a viewer's forged actions did something: %+v, %s", refunds, d.state("M-1"))
	}
	rows, err := d.store.AuditList(d.ctx, &lapse.AuditListParams{Target: "order:M-1"})
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]bool{}
	for _, r := range rows {
		if r.ActorName == "vera" && strings.HasPrefix(r.Result, "refused: ") {
			refused[r.Action] = true
		}
	}
	if !refused["refund.create"] || !refused["order.retry"] {
		t.Errorf("the audit log lacks the refusals: %+v", rows)
	}
	if body := b.page("/console/orders/M-1", http.StatusOK); !strings.Contains(body, "refund.create · refused: ") {
		t.Errorf("the timeline lacks the refused refund:\n%s", body)
	}
}

// TestOrderRevive: an operator revives a dead delivery, which hands its
// review back to automation. The dead issue delivery of a membership in
// manual review is not revived: the order's retry issues it, and the
// revive, which would issue nothing, is refused and changes nothing.
func TestOrderRevive(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.membershipInReview("M-1")
	d.deadWebhook("C-2")
	d.operator("alice", "operator")
	b := d.login("alice")
	hs, _ := d.engine.Deliveries(d.ctx, "C-2")
	var dead int64
	for _, h := range hs {
		if h.Status == lapse.DeliveryDead {
			dead = h.ID
		}
	}
	if dead == 0 {
		t.Fatalf("C-2 has no dead delivery: %+v", hs)
	}
	id := itoa(dead)
	if kind, text := b.act("C-2", "revive", url.Values{"delivery_id": {id}}); kind != "error" || !strings.Contains(text, "second factor") {
		t.Errorf("revive without a code: %s %q", kind, text)
	}
	// A delivery of another order is not this page's to revive.
	if kind, text := b.act("M-1", "revive", url.Values{"delivery_id": {id}, "code": {d.code("alice")}}); kind != "error" ||
		!strings.Contains(text, "There is no delivery") {
		t.Errorf("revive of another order's delivery: %s %q", kind, text)
	}
	// M-1's issue delivery waits for the order's retry.
	if kind, text := b.act("M-1", "revive", url.Values{"delivery_id": {"1"}, "code": {d.code("alice")}}); kind != "error" ||
		!strings.Contains(text, "/v1/orders/{order_no}/retry") {
		t.Errorf("revive of M-1's issue delivery: %s %q", kind, text)
	}
	if hs, _ := d.engine.Deliveries(d.ctx, "M-1"); hs[0].Status != lapse.DeliveryDead {
		t.Errorf("M-1's issue delivery after a refused revive: %s", hs[0].Status)
	}
	if kind, text := b.act("C-2", "revive", url.Values{"delivery_id": {id}, "code": {d.code("alice")}}); kind != "ok" {
		t.Fatalf("revive: %s %q", kind, text)
	}
	hs, _ = d.engine.Deliveries(d.ctx, "C-2")
	for _, h := range hs {
		if h.ID == dead && h.Status != lapse.DeliveryPending {
			t.Fatalf("revived delivery: %s", h.Status)
		}
	}
	// The revival hands the review back to automation: it is resolved, and
	// leaves the queue; M-1's stays.
	open, err := d.engine.Reviews(d.ctx, &lapse.ReviewListParams{Open: true})
	if err != nil {
		t.Fatal(err)
	}
	m1 := false
	for _, rv := range open {
		if rv.OrderNo == "C-2" && rv.DeliveryID == dead {
			t.Errorf("the revived delivery's review is still open: %+v", rv)
		}
		m1 = m1 || rv.OrderNo == "M-1" && rv.DeliveryID == 1
	}
	if !m1 {
		t.Errorf("M-1's review was resolved by a refused revive: open %+v", open)
	}
	body := b.page("/console/", http.StatusOK)
	if strings.Contains(body, "delivery revived") {
		t.Errorf("the queue still lists the revived delivery:\n%s", body)
	}
	body = b.page("/console/orders/C-2", http.StatusOK)
	if strings.Contains(body, `id="revive-form-`+id+`"`) || !strings.Contains(body, "delivery.retry · ok") {
		t.Errorf("C-2's page after the revival:\n%s", body)
	}
}

// TestOrderClose: an unpaid order is closed through a manual close batch
// of one.
func TestOrderClose(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.create("C-5", "checkout", 700, "")
	d.operator("alice", "operator")
	b := d.login("alice")
	kind, text := b.act("C-5", "close", url.Values{"reason": {"customer asked by phone"}, "code": {d.code("alice")}})
	m := regexp.MustCompile(`^Manual close batch #(\d+) started\.$`).FindStringSubmatch(text)
	if kind != "ok" || m == nil {
		t.Fatalf("close: %s %q", kind, text)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	// The API runs the batch on a goroutine of its own and says when it is
	// done only in the batch's status.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		bt, err := d.closer.Batch(d.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if bt.Status == lapse.CloseBatchDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %d is %s", id, bt.Status)
		}
	}
	if st := d.state("C-5"); st != flows.Closed {
		t.Fatalf("C-5 is %s after its close", st)
	}
	body := b.page("/console/orders/C-5", http.StatusOK)
	if !strings.Contains(body, "UNPAID → CLOSED") || !strings.Contains(body, "order.close · ok") || strings.Contains(body, `id="close-form"`) {
		t.Errorf("C-5's page after the close:\n%s", body)
	}
}

// TestOrderResolve: an operator marks the review resolved with a note; it
// leaves the queue.
func TestOrderResolve(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.mismatch("C-1")
	d.operator("alice", "operator")
	b := d.login("alice")
	kind, text := b.act("C-1", "resolve", url.Values{"review_id": {"1"}, "note": {"customer paid the rest by bank transfer"},
		"code": {d.code("alice")}})
	if kind != "ok" {
		t.Fatalf("resolve: %s %q", kind, text)
	}
	if got := rows(b.page("/console/", http.StatusOK)); len(got) != 0 {
		t.Errorf("the queue after the resolve: %v", got)
	}
	if body := b.page("/console/orders/C-1", http.StatusOK); !strings.Contains(body, "Review #1 resolved") || strings.Contains(body, `id="resolve-form-1"`) {
		t.Errorf("C-1's page after the resolve:\n%s", body)
	}
}

// TestOrderSettle: a review that holds a refund in review offers to settle
// the refund, not to mark the review resolved; settling it takes a second
// factor, and then resolves the review.
func TestOrderSettle(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.create("C-2", "checkout", 5000, "")
	if p := d.pay("C-2", 5000); p.Status != lapse.PaymentApplied {
		t.Fatalf("payment of C-2: %s", p.Status)
	}
	if _, err := d.engine.ApplyPayment(d.ctx, &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticeRefunded, TxnID: "txn-C-2",
		RefundID: "re-dash-1", OrderNo: "C-2", Amount: 1200, Currency: "CNY", Merchant: "m-1", PaidAt: d.clock.Now(), Raw: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	d.operator("alice", "operator")
	b := d.login("alice")
	body := b.page("/console/orders/C-2", http.StatusOK)
	if !strings.Contains(body, `id="settle-form-1"`) || strings.Contains(body, `id="resolve-form-1"`) || !strings.Contains(body, "re-dash-1") {
		t.Fatalf("C-2's page does not offer to settle its refund:\n%s", body)
	}
	kind, text := b.act("C-2", "resolve", url.Values{"review_id": {"1"}, "note": {"looked"}})
	if kind != "error" || !strings.Contains(text, "settle the refund") {
		t.Errorf("resolving a refund's review: %s %q", kind, text)
	}
	kind, text = b.act("C-2", "settle", url.Values{"review_id": {"1"}, "status": {"succeeded"}, "note": {"made in the dashboard"}})
	if kind != "error" || !strings.Contains(text, "needs a fresh second factor") {
		t.Errorf("settle without a code: %s %q", kind, text)
	}
	kind, text = b.act("C-2", "settle", url.Values{"review_id": {"1"}, "status": {"succeeded"}, "note": {"made in the dashboard"},
		"code": {d.code("alice")}})
	if kind != "ok" {
		t.Fatalf("settle: %s %q", kind, text)
	}
	rs, err := d.engine.OrderRefunds(d.ctx, "C-2")
	if err != nil || len(rs) != 1 || rs[0].Status != lapse.OrderRefundSucceeded {
		t.Errorf("C-2's refunds after the settlement: %+v, %v", rs, err)
	}
	if body := b.page("/console/orders/C-2", http.StatusOK); !strings.Contains(body, "Review #1 resolved") || strings.Contains(body, `id="settle-form-1"`) {
		t.Errorf("C-2's page after the settlement:\n%s", body)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// codeInput is a form's field for a TOTP code.
var codeInput = regexp.MustCompile(`<input name="code"[^>]*>`)

// TestCodeFieldsOptional: no action form requires its code field, which
// would keep a browser from sending the form without one. A code is good
// once and the API takes a second factor given in the last minutes, so an
// operator who acts twice within a code's 30 seconds has no code to give
// the second time, and the same code again is a failure that counts toward
// the lockout. The login's code is required.
func TestCodeFieldsOptional(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{approvalCount: 1})
	d.membershipInReview("M-1")
	nos := d.closableOrders("F", "u-1", 2)
	d.operator("alice", "operator")
	d.operator("bob", "operator")
	alice, bob := d.login("alice"), d.login("bob")
	alice.requestClose("alice", nos, "shop gone")
	_, preview := alice.previewClose(url.Values{"order_nos": {nos[0]}, "reason": {"r"}})
	pages := map[string]string{
		"the order page":    alice.page("/console/orders/M-1", http.StatusOK),
		"the close preview": preview,
		"the approvals":     bob.page("/console/approvals", http.StatusOK),
	}
	for what, body := range pages {
		fields := codeInput.FindAllString(body, -1)
		if len(fields) == 0 {
			t.Errorf("%s has no code field:\n%s", what, body)
		}
		for _, f := range fields {
			if strings.Contains(f, "required") {
				t.Errorf("%s requires a code: %s", what, f)
			}
		}
	}
	if f := codeInput.FindString(d.browser().page("/console/login", http.StatusOK)); !strings.Contains(f, "required") {
		t.Errorf("the login's code field is not required: %s", f)
	}
	// Two actions within one code's time step: the second without a code.
	// (M-1's issue delivery waits for the order's retry: the revive is
	// refused, after the code was taken.)
	if kind, text := alice.act("M-1", "revive", url.Values{"delivery_id": {"1"}, "code": {d.code("alice")}}); kind != "error" ||
		!strings.Contains(text, "/v1/orders/{order_no}/retry") {
		t.Fatalf("revive with a code: %s %q", kind, text)
	}
	if kind, text := alice.act("M-1", "refund", url.Values{"amount": {"10"}, "reason": {"goodwill"}, "idempotency_key": {"console-test-1"}}); kind != "ok" {
		t.Errorf("refund without a code a moment later: %s %q", kind, text)
	}
}

// shippingFlow is checkout with a merchant's shipping after the payment: a
// SHIPPED order is confirmed received 7 days on (a deadline that ends it).
func shippingFlow() *lapse.Flow {
	f := flows.Checkout()
	f.Name = "shipping"
	f.States = append(f.States,
		lapse.StateSpec{Name: "SHIPPED", Deadline: &lapse.Deadline{After: 7 * 24 * time.Hour, Event: "CONFIRM"}, Doc: "shipped; confirmed received at its deadline"},
		lapse.StateSpec{Name: "RECEIVED", Terminal: true, Doc: "received"})
	f.Events = append(f.Events,
		lapse.EventSpec{Name: "SHIP", Doc: "the merchant shipped it"},
		lapse.EventSpec{Name: "CONFIRM", Doc: "received, or 7 days passed"})
	f.Transitions = append(f.Transitions,
		lapse.Transition{From: flows.Paid, Event: "SHIP", To: "SHIPPED"},
		lapse.Transition{From: "SHIPPED", Event: "CONFIRM", To: "RECEIVED"})
	return f
}

// TestOrderCloseOfferedOnlyWhereAManualCloseCloses: the order page offers
// to close an order only in a state a manual close ends (a wait for
// payment), not a paid order whose state has a deadline of its own that
// ends it (a shipped order confirmed received after 7 days): the API
// refuses that close, so the form could only ever answer "refused".
func TestOrderCloseOfferedOnlyWhereAManualCloseCloses(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{flows: append(flows.Builtin(), shippingFlow())})
	d.create("SH-1", "shipping", 5000, "")
	d.create("SH-2", "shipping", 5000, "")
	if p := d.pay("SH-1", 5000); p.Status != lapse.PaymentApplied {
		t.Fatalf("payment of SH-1: %s", p.Status)
	}
	if _, err := d.engine.Fire(d.ctx, "SH-1", engine.Fire{Event: "SHIP", By: app}); err != nil {
		t.Fatal(err)
	}
	d.operator("alice", "operator")
	b := d.login("alice")
	if body := b.page("/console/orders/SH-1", http.StatusOK); strings.Contains(body, `id="close-form"`) {
		t.Errorf("the page of a shipped (paid) order offers to close it")
	}
	if body := b.page("/console/orders/SH-2", http.StatusOK); !strings.Contains(body, `id="close-form"`) {
		t.Errorf("the page of an unpaid order does not offer to close it")
	}
}
