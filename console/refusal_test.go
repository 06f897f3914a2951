package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// crossSite posts form to path from another site, with b's session cookie,
// as a forged form would be sent.
func (b *browser) crossSite(path string, form url.Values) int {
	b.e.t.Helper()
	req, err := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// auditCount is the number of rows of the audit log.
func (e *env) auditCount() int {
	e.t.Helper()
	rows, err := e.store.AuditList(e.ctx, &lapse.AuditListParams{Limit: 10000})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(rows)
}

// wantRefusal checks the newest row of action by actor: about target,
// refused with a result that starts with result, now, from the test's
// client, with form fields (never the code) as its parameters.
func (e *env) wantRefusal(what, action, actor, target, result string) *lapse.AuditEntry {
	e.t.Helper()
	row := e.auditRow(action, actor)
	switch {
	case row == nil:
		e.t.Errorf("%s: no audit row %s by %s", what, action, actor)
		return nil
	case row.Target != target || !strings.HasPrefix(row.Result, result) || row.ActorKind != "operator" ||
		!row.At.Equal(lapse.Truncate(e.clock.Now())) || row.ClientAddr == "" || row.SecondFactor != "":
		e.t.Errorf("%s: the row of %s by %s is %+v, want target %q, result %q…", what, action, actor, row, target, result)
	case strings.Contains(string(row.Params), "code"):
		e.t.Errorf("%s: the row keeps the code: %s", what, row.Params)
	}
	return row
}

// TestRefusalsAudited: every write the console refuses itself, before the
// API sees it, is in the audit log as the API's refusals are (S9): who
// (the operator of the session, in force or ended), what (the action the
// form asked for, as the API names it, and its target), when, and the
// result. A post that names no operator is refused and leaves no row, as
// the API's requests without a credential do.
func TestRefusalsAudited(t *testing.T) {
	t.Parallel()
	d := newDesk(t, deskConfig{})
	d.membershipInReview("M-1")
	d.operator("alice", "operator")
	b := d.login("alice")
	login := d.auditRow("login", "alice")
	if login == nil || !strings.HasPrefix(login.Target, "operator:") {
		t.Fatalf("alice's login row: %+v", login)
	}
	const crossOrigin = "refused: cross-origin request refused"

	// Forged forms from another site, with alice's session.
	for _, c := range []struct {
		path           string
		form           url.Values
		action, target string
	}{
		{"/console/orders/M-1/refund", url.Values{"amount": {"10"}, "reason": {"forged"}, "idempotency_key": {"k-1"}, "code": {"123456"}}, "refund.create", "order:M-1"},
		{"/console/orders/M-1/retry", url.Values{"reason": {"forged"}}, "order.retry", "order:M-1"},
		{"/console/orders/M-1/revive", url.Values{"delivery_id": {"1"}}, "delivery.retry", "delivery:1"},
		{"/console/orders/M-1/resolve", url.Values{"review_id": {"1"}, "note": {"forged"}}, "review.resolve", "review:1"},
		{"/console/orders/M-1/close", url.Values{"reason": {"forged"}}, "close.batch", "close"},
		{"/console/close", url.Values{"selection": {`{"order_nos":["M-1"]}`}, "reason": {"forged"}}, "close.batch", "close"},
		{"/console/approvals/7/approve", url.Values{"code": {"123456"}}, "approval.approve", "approval:7"},
		{"/console/approvals/7/reject", url.Values{"reason": {"forged"}}, "approval.reject", "approval:7"},
		{"/console/logout", nil, "logout", login.Target},
	} {
		if status := b.crossSite(c.path, c.form); status != http.StatusForbidden {
			t.Errorf("cross-site %s = %d, want 403", c.path, status)
		}
		d.wantRefusal("cross-site "+c.path, c.action, "alice", c.target, crossOrigin)
	}
	if row := d.auditRow("refund.create", "alice"); row != nil {
		var params map[string]string
		if err := json.Unmarshal(row.Params, &params); err != nil || params["amount"] != "10" || params["reason"] != "forged" {
			t.Errorf("the forged refund's parameters: %s (%v)", row.Params, err)
		}
	}
	if refunds, _ := d.engine.OrderRefunds(d.ctx, "M-1"); len(refunds) != 0 {
		t.Fatalf("a forged refund was made: %+v", refunds)
	}

	// Forms the console cannot send on: refused by the console, audited
	// as the API audits the bodies it refuses.
	if kind, _ := b.act("M-1", "refund", url.Values{"amount": {"ten"}, "reason": {"x"}, "idempotency_key": {"k-2"}}); kind != "error" {
		t.Errorf("a refund of ten: %s", kind)
	}
	d.wantRefusal("a refund of ten", "refund.create", "alice", "order:M-1", "refused: ")
	if kind, _ := b.act("M-1", "revive", url.Values{"delivery_id": {"999"}}); kind != "error" {
		t.Errorf("a revival of another order's delivery: %s", kind)
	}
	d.wantRefusal("another order's delivery", "delivery.retry", "alice", "delivery:999", "refused: There is no delivery 999 of this order")

	// No second factor: the API refuses and audits it.
	if kind, text := b.act("M-1", "retry", url.Values{"reason": {"none given"}}); kind != "error" || !strings.Contains(text, "second factor") {
		t.Errorf("a retry without a code: %s %q", kind, text)
	}
	d.wantRefusal("a retry without a code", "order.retry", "alice", "order:M-1", "refused: ")

	// No session at all: refused, and no one to write a row for.
	rows := d.auditCount()
	if resp := d.browser().post("/console/orders/M-1/refund", url.Values{"amount": {"10"}, "idempotency_key": {"k-3"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a refund without a session = %d", resp.StatusCode)
	}
	if n := d.auditCount(); n != rows {
		t.Errorf("a post without a session wrote %d audit rows", n-rows)
	}

	// alice's session ends; her next post is refused, in her name.
	d.clock.Advance(13 * time.Hour)
	if resp := b.post("/console/orders/M-1/refund", url.Values{"amount": {"10"}, "idempotency_key": {"k-4"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a refund with an ended session = %d", resp.StatusCode)
	}
	d.wantRefusal("an ended session", "refund.create", "alice", "order:M-1", "refused: the session is not valid or has ended")
	if status := b.crossSite("/console/orders/M-1/refund", url.Values{"amount": {"10"}}); status != http.StatusForbidden {
		t.Errorf("cross-site with an ended session = %d", status)
	}
	d.wantRefusal("cross-site with an ended session", "refund.create", "alice", "order:M-1", crossOrigin)

	// A session logged out: its cookie, sent again, is refused in alice's
	// name too.
	b = d.login("alice")
	u, _ := url.Parse(d.srv.URL)
	cookies := b.c.Jar.Cookies(u)
	if resp := b.post("/console/logout", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout = %d", resp.StatusCode)
	}
	if row := d.auditRow("logout", "alice"); row == nil || row.Result != "ok" || row.ClientAddr != "127.0.0.1" {
		t.Errorf("the row of the logout: %+v, want ok from 127.0.0.1", row)
	}
	replay := d.browser()
	replay.c.Jar.SetCookies(u, cookies)
	if resp := replay.post("/console/orders/M-1/refund", url.Values{"amount": {"10"}, "idempotency_key": {"k-5"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a refund with a session logged out = %d", resp.StatusCode)
	}
	row := d.wantRefusal("a session logged out", "refund.create", "alice", "order:M-1", "refused: the session is not valid or has ended")
	if row != nil && !strings.Contains(string(row.Params), "k-5") {
		t.Errorf("the row of the refund after logout is not the refund's: %+v", row)
	}
}
