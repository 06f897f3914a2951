package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// pendingApproval is the one pending approval request, failing the test
// unless there is exactly one.
func (e *env) pendingApproval() *lapse.Approval {
	e.t.Helper()
	as, err := e.access.Approvals(e.ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalPending})
	if err != nil || len(as) != 1 {
		e.t.Fatalf("pending approvals: %v, %v", as, err)
	}
	return as[0]
}

// auditRow is the newest audit row of action by actor, nil when there is
// none.
func (e *env) auditRow(action, actor string) *lapse.AuditEntry {
	e.t.Helper()
	rows, err := e.store.AuditList(e.ctx, &lapse.AuditListParams{Descending: true, Action: action, ActorName: actor, Limit: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(rows) == 0 {
		return nil
	}
	return rows[0]
}

// requestClose has b preview and confirm a close of nos with a fresh code
// of name, and returns where the console sent the browser.
func (b *browser) requestClose(name string, nos []string, reason string) string {
	b.e.t.Helper()
	_, page := b.previewClose(url.Values{"order_nos": {strings.Join(nos, "\n")}, "reason": {reason}})
	resp := b.post("/console/close", confirmed(b.e.t, page, url.Values{"reason": {reason}, "code": {b.e.code(name)}}))
	return redirectedTo(b.e.t, resp, "/console/")
}

// api posts body to the API's path with b's session and a second factor
// code, as a script in the operator's browser would, and returns the
// status.
func (b *browser) api(path, body, code string) int {
	b.e.t.Helper()
	req, err := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", b.e.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set(lapsehttp.SecondFactorHeader, code)
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestApprovalsPageShowsTheRequest: the approver sees what approving
// carries out, the request and its body (here a close's selector), as
// text, however it is spelt.
func TestApprovalsPageShowsTheRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.ApprovalCount = 2 }})
	e.operator("alice", access.RoleOperator)
	e.operator("bob", access.RoleOperator)
	e.closableOrders("U", "u-<i>bulk</i>", 3)
	alice, bob := e.login("alice"), e.login("bob")
	if status := alice.api("/v1/closes", `{"selector":{"user_id":"u-<i>bulk</i>"},"reason":"outage"}`, e.code("alice")); status != http.StatusAccepted {
		t.Fatalf("the close by selector = %d, want 202", status)
	}
	body := bob.load("/console/approvals", http.StatusOK)
	bodyHas(t, "the approver's inbox", body, "<th>Request</th>", "POST /v1/closes",
		`{&#34;selector&#34;:{&#34;user_id&#34;:&#34;u-&lt;i&gt;bulk&lt;/i&gt;&#34;},&#34;reason&#34;:&#34;outage&#34;}`)
	bodyLacks(t, "the approver's inbox", body, "<i>bulk")
	bob.usePrefs("zh", "UTC")
	bodyHas(t, "the approver's inbox in Chinese", bob.load("/console/approvals", http.StatusOK), "<th>申请内容</th>", "POST /v1/closes")
}

func TestApprovalsPageEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	alice := e.login("alice")
	body := alice.load("/console/approvals", http.StatusOK)
	bodyHas(t, "approvals page", body, "<h1>Approvals</h1>", "Waiting for a decision", "Recently decided", "Nothing here.")
	bodyLacks(t, "approvals page", body, "<table")
	alice.usePrefs("zh", "UTC")
	body = alice.load("/console/approvals", http.StatusOK)
	bodyHas(t, "approvals page in Chinese", body, "<h1>审批</h1>", "待审批", "最近已处理", "暂无内容。")
}

// TestCloseCountsAddUpInTheConsole: an operator's closes add up over 24
// hours, in the console as in the API: after closing two orders (the
// threshold) on her own word, alice's preview of one more says it will wait
// for a second operator, and so it does.
func TestCloseCountsAddUpInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.ApprovalCount = 2 }})
	e.operator("alice", access.RoleOperator)
	nos := e.closableOrders("D", "u-1", 3)
	alice := e.login("alice")
	for _, no := range nos[:2] {
		if to := alice.requestClose("alice", []string{no}, "duplicate"); !strings.HasPrefix(to, "/console/close/") {
			t.Fatalf("the close of %s went to %s, want its batch", no, to)
		}
	}
	_, body := alice.previewClose(url.Values{"order_nos": {nos[2]}, "reason": {"duplicate"}})
	bodyHas(t, "a preview past the day's threshold", body, "1 orders will be closed.", `id="close-needs-approval"`,
		"With your closes of the last 24 hours that is more than 2 orders")
	if to := alice.requestClose("alice", nos[2:], "duplicate"); to != "/console/approvals" {
		t.Fatalf("a close past the day's threshold went to %s", to)
	}
	if a := e.pendingApproval(); a.Count != 1 || a.MakerName != "alice" {
		t.Fatalf("approval: %+v", a)
	}
}

// TestFourEyesCloseInTheConsole: a close above the threshold waits for a
// second operator, who approves it in the inbox with their code; the maker
// and a viewer get no forms, and what they forge the API refuses and the
// audit log keeps.
func TestFourEyesCloseInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.ApprovalCount = 2 }})
	e.operator("alice", access.RoleOperator)
	e.operator("bob", access.RoleOperator)
	e.operator("vic", access.RoleViewer)
	nos := e.closableOrders("F", "u-1", 3)
	alice, bob, vic := e.login("alice"), e.login("bob"), e.login("vic")

	_, body := alice.previewClose(url.Values{"order_nos": {strings.Join(nos, ",")}, "reason": {"warehouse fire"}})
	bodyHas(t, "preview above the threshold", body, "3 orders will be closed.", `id="close-needs-approval"`, "that is more than 2 orders")
	if to := alice.requestClose("alice", nos, "warehouse fire"); to != "/console/approvals" {
		t.Fatalf("a close above the threshold went to %s", to)
	}
	a := e.pendingApproval()
	if a.Action != "close.batch" || a.Count != 3 || a.MakerName != "alice" {
		t.Fatalf("approval: %+v", a)
	}
	approve, reject := fmt.Sprintf(`action="/console/approvals/%d/approve"`, a.ID), fmt.Sprintf(`action="/console/approvals/%d/reject"`, a.ID)

	// The maker: the request, no forms.
	body = alice.load("/console/approvals", http.StatusOK)
	bodyHas(t, "the maker's inbox", body, fmt.Sprintf("(request %d)", a.ID), "Waiting for a second operator", "close.batch", "warehouse fire",
		"You made this request", "2026-11-30 08:0", "POST /v1/closes", fmt.Sprintf("&#34;order_nos&#34;:[&#34;%s&#34;,&#34;%s&#34;,&#34;%s&#34;]", nos[0], nos[1], nos[2]))
	bodyLacks(t, "the maker's inbox", body, approve, reject)
	// A viewer: no forms either.
	body = vic.load("/console/approvals", http.StatusOK)
	bodyHas(t, "a viewer's inbox", body, "close.batch", "Your role cannot decide requests.")
	bodyLacks(t, "a viewer's inbox", body, approve, reject, "You made this request")
	// The other operator, in Chinese and Shanghai time.
	bob.usePrefs("zh", "Asia/Shanghai")
	body = bob.load("/console/approvals", http.StatusOK)
	bodyHas(t, "an approver's inbox in Chinese", body, approve, reject, "批准", "驳回", "待审批", "alice", "2026-11-30 16:0", "CST")

	// What the maker and the viewer forge, the API refuses, and the log
	// keeps.
	redirectedTo(t, alice.post(fmt.Sprintf("/console/approvals/%d/approve", a.ID), url.Values{"code": {e.code("alice")}}), "/console/approvals")
	bodyHas(t, "the maker's forged approval", alice.load("/console/approvals", http.StatusOK), "Refused:", "cannot approve it")
	if row := e.auditRow("approval.approve", "alice"); row == nil || !strings.HasPrefix(row.Result, "refused:") || row.ApprovalID != a.ID {
		t.Fatalf("the maker's approval in the log: %+v", row)
	}
	redirectedTo(t, vic.post(fmt.Sprintf("/console/approvals/%d/approve", a.ID), url.Values{"code": {e.code("vic")}}), "/console/approvals")
	bodyHas(t, "a viewer's forged approval", vic.load("/console/approvals", http.StatusOK), "Refused:", "which vic does not have")
	if row := e.auditRow("approval.approve", "vic"); row == nil || !strings.HasPrefix(row.Result, "refused:") {
		t.Fatalf("a viewer's approval in the log: %+v", row)
	}
	_, page := alice.previewClose(url.Values{"order_nos": {nos[0]}, "reason": {"r"}})
	status, body := vic.submit("/console/close", confirmed(t, page, url.Values{"reason": {"forged"}, "code": {e.code("vic")}}))
	if status != http.StatusForbidden {
		t.Fatalf("a viewer's forged close = %d:\n%s", status, body)
	}
	bodyHas(t, "a viewer's forged close", body, "Refused:", "operations:write")
	bodyLacks(t, "a viewer's forged close", body, `action="/console/close/preview"`, `id="close-confirm"`)
	if row := e.auditRow("close.batch", "vic"); row == nil || !strings.HasPrefix(row.Result, "refused:") {
		t.Fatalf("a viewer's close in the log: %+v", row)
	}
	body = vic.load("/console/audit?actor=vic", http.StatusOK)
	bodyHas(t, "the viewer's refusals on the audit page", body, "approval.approve", "close.batch", "refused:")
	if a := e.pendingApproval(); a.Status != lapse.ApprovalPending {
		t.Fatalf("after the forgeries: %+v", a)
	}

	// A wrong code is refused; the right one carries the close out.
	redirectedTo(t, bob.post(fmt.Sprintf("/console/approvals/%d/approve", a.ID), url.Values{"code": {"000000"}}), "/console/approvals")
	bodyHas(t, "a wrong code", bob.load("/console/approvals", http.StatusOK), "被拒绝：", approve)
	redirectedTo(t, bob.post(fmt.Sprintf("/console/approvals/%d/approve", a.ID), url.Values{"code": {e.code("bob")}}), "/console/approvals")
	bs, err := e.closer.Batches(e.ctx, nil)
	if err != nil || len(bs) != 1 || bs[0].ApprovalID != a.ID {
		t.Fatalf("batches: %v, %v", bs, err)
	}
	b := e.waitBatch(bs[0].ID)
	if b.Total != 3 || b.Closed != 3 || b.Skipped != 0 || b.Failed != 0 || b.CreatedBy != "operator:alice" {
		t.Fatalf("batch: %+v", b)
	}
	body = bob.load("/console/approvals", http.StatusOK)
	bodyHas(t, "the inbox after approval", body, fmt.Sprintf("申请 %d 已批准并执行。", a.ID), "已执行", "bob",
		fmt.Sprintf(`<a href="/console/close/%d">批次 %d</a>`, b.ID, b.ID))
	bodyLacks(t, "the inbox after approval", body, approve)
	body = alice.load(fmt.Sprintf("/console/close/%d", b.ID), http.StatusOK)
	bodyHas(t, "the approved batch's page", body, `id="batch-status">done<`, `id="batch-closed">3<`, `id="batch-total">3<`,
		`id="batch-skipped">0<`, `id="batch-failed">0<`, `max="3" value="3"`, "operator:alice", "warehouse fire", fmt.Sprintf("#%d", a.ID))
	body = alice.load(fmt.Sprintf("/console/audit?batch=%d&verify=1", b.ID), http.StatusOK)
	bodyHas(t, "the batch's audit rows", body, "order.close", "order:"+nos[0], "bob", "The chain is intact")
}

func TestRejectInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.ApprovalCount = 1 }})
	e.operator("alice", access.RoleOperator)
	e.operator("carol", access.RoleAdmin)
	nos := e.closableOrders("J", "u-1", 2)
	alice, carol := e.login("alice"), e.login("carol")
	alice.requestClose("alice", nos, "too early")
	a := e.pendingApproval()

	redirectedTo(t, carol.post(fmt.Sprintf("/console/approvals/%d/reject", a.ID), url.Values{"reason": {"ask the shop first"}}), "/console/approvals")
	body := carol.load("/console/approvals", http.StatusOK)
	bodyHas(t, "the inbox after a rejection", body, fmt.Sprintf("Request %d rejected.", a.ID), "rejected", "ask the shop first", "carol")
	bodyLacks(t, "the inbox after a rejection", body, fmt.Sprintf(`action="/console/approvals/%d/approve"`, a.ID))
	if got, err := e.access.Approval(e.ctx, a.ID); err != nil || got.Status != lapse.ApprovalRejected {
		t.Fatalf("rejected: %+v, %v", got, err)
	}
	if bs, _ := e.closer.Batches(e.ctx, nil); len(bs) != 0 {
		t.Fatalf("a rejected close ran: %v", bs)
	}
	// Deciding it again: the API's conflict, shown.
	redirectedTo(t, carol.post(fmt.Sprintf("/console/approvals/%d/approve", a.ID), url.Values{"code": {e.code("carol")}}), "/console/approvals")
	bodyHas(t, "approving a rejected request", carol.load("/console/approvals", http.StatusOK), "Refused:", "not pending")
	redirectedTo(t, carol.post("/console/approvals/x/approve", url.Values{"code": {"123456"}}), "/console/approvals")
	bodyHas(t, "approving no request", carol.load("/console/approvals", http.StatusOK), "No such request.")
}
