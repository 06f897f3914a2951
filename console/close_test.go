package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
)

// closableOrders creates n unpaid checkout orders of user, numbered
// prefix-001 …, at the clock's time, and returns their numbers.
func (e *env) closableOrders(prefix, user string, n int) []string {
	e.t.Helper()
	var nos []string
	for i := range n {
		no := fmt.Sprintf("%s-%03d", prefix, i+1)
		_, created, err := e.engine.CreateOrder(e.ctx, &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: user,
			Amount: 1999, Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: 1}}}, engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"})
		if err != nil || !created {
			e.t.Fatalf("CreateOrder(%s) = created %v, %v", no, created, err)
		}
		nos = append(nos, no)
	}
	return nos
}

// waitBatch waits until batch id is done, which the API runs in the
// background, and returns it.
func (e *env) waitBatch(id int64) *lapse.CloseBatch {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := e.closer.Batch(e.ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if b.Status == lapse.CloseBatchDone {
			return b
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("batch %d still %s: %+v", id, b.Status, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// confirmSelection is the value of the confirm form's hidden selection field.
var confirmSelection = regexp.MustCompile(`name="selection" value="([^"]*)"`)

// previewClose posts the close form and returns the confirm form's selection
// (unescaped) and the page.
func (b *browser) previewClose(form url.Values) (string, string) {
	b.e.t.Helper()
	status, body := b.submit("/console/close/preview", form)
	if status != http.StatusOK {
		b.e.t.Fatalf("preview = %d:\n%s", status, body)
	}
	m := confirmSelection.FindStringSubmatch(body)
	if m == nil {
		return "", body
	}
	return html.UnescapeString(m[1]), body
}

// confirmHidden is a hidden field of the close confirm form.
var confirmHidden = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmed is the confirm form of the preview page, its hidden fields
// (the selection, the preview's time and count) with v.
func confirmed(t *testing.T, page string, v url.Values) url.Values {
	t.Helper()
	i := strings.Index(page, `id="close-confirm"`)
	if i < 0 {
		t.Fatalf("no confirm form in:\n%s", page)
	}
	form := page[i:]
	form = form[:strings.Index(form, "</form>")]
	out := url.Values{}
	for _, m := range confirmHidden.FindAllStringSubmatch(form, -1) {
		out.Set(m[1], html.UnescapeString(m[2]))
	}
	for k, vs := range v {
		out[k] = vs
	}
	return out
}

// batchID is the batch a close page's path names.
func batchID(t *testing.T, path string) int64 {
	t.Helper()
	var id int64
	if _, err := fmt.Sscanf(path, "/console/close/%d", &id); err != nil {
		t.Fatalf("%q names no batch: %v", path, err)
	}
	return id
}

func TestClosePageEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	e.operator("vic", access.RoleViewer)
	alice := e.login("alice")
	body := alice.load("/console/close", http.StatusOK)
	bodyHas(t, "close page", body, "Manual close", `action="/console/close/preview"`, `name="order_nos"`, `name="user_id"`,
		`type="datetime-local" name="from"`, `<option value="checkout"`, `name="reason"`, "Recent batches", "Nothing here.")
	alice.usePrefs("zh", "Asia/Shanghai")
	body = alice.load("/console/close", http.StatusOK)
	bodyHas(t, "close page in Chinese", body, "手动关单", "订单号", "你的时区：Asia/Shanghai", "最近的批次", "暂无内容。")

	vic := e.login("vic")
	body = vic.load("/console/close", http.StatusOK)
	bodyHas(t, "close page of a viewer", body, "Your role does not allow this.", "Recent batches")
	bodyLacks(t, "close page of a viewer", body, "<form method=\"post\" action=\"/console/close", `name="code"`)
}

func TestCloseDirectly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.ApprovalCount = 10 }})
	e.operator("alice", access.RoleOperator)
	nos := e.closableOrders("A", "u-1", 3)
	alice := e.login("alice")

	// By order numbers, one of them unknown: counted as skipped.
	sel, body := alice.previewClose(url.Values{"order_nos": {nos[0] + ", " + nos[1] + "\n" + nos[2] + "\nNOPE-1\n" + nos[0]}, "reason": {"supplier gone"}})
	bodyHas(t, "preview", body, "3 orders will be closed.", "1 matched but will not be closed", nos[0], nos[2], "19.99 CNY", "UNPAID", "u-1",
		`id="close-confirm"`, `value="supplier gone"`)
	bodyLacks(t, "preview under the threshold", body, "second operator")
	if sel == "" {
		t.Fatal("no selection in the confirm form")
	}

	// A wrong code: back to the form with the API's refusal.
	page := body
	status, body := alice.submit("/console/close", confirmed(t, page, url.Values{"reason": {"supplier gone"}, "code": {"000000"}}))
	if status != http.StatusForbidden {
		t.Fatalf("close with a wrong code = %d:\n%s", status, body)
	}
	bodyHas(t, "refused close", body, "Refused:", "the code is wrong", nos[0], `action="/console/close/preview"`)

	resp := alice.post("/console/close", confirmed(t, page, url.Values{"reason": {"supplier gone"}, "code": {e.code("alice")}}))
	to := redirectedTo(t, resp, "/console/close/")
	b := e.waitBatch(batchID(t, to))
	if b.Total != 3 || b.Closed != 3 || b.Skipped != 0 || b.Failed != 0 || b.CreatedBy != "operator:alice" || b.ApprovalID != 0 {
		t.Fatalf("batch: %+v", b)
	}
	body = alice.load(to, http.StatusOK)
	bodyHas(t, "batch page", body, fmt.Sprintf("Batch %d started.", b.ID), `<progress id="batch-progress" max="3" value="3">`,
		`id="batch-closed">3<`, `id="batch-skipped">0<`, `id="batch-failed">0<`, `id="batch-total">3<`, "done", "supplier gone", "operator:alice",
		fmt.Sprintf(`/console/audit?batch=%d`, b.ID))
	bodyLacks(t, "a done batch's page", body, `http-equiv="refresh"`)
	for _, no := range nos {
		if o, err := e.engine.Order(e.ctx, no); err != nil || o.State != "CLOSED" {
			t.Fatalf("order %s after the close: %+v, %v", no, o, err)
		}
	}
	alice.usePrefs("zh", "UTC")
	body = alice.load(to, http.StatusOK)
	bodyHas(t, "batch page in Chinese", body, fmt.Sprintf("批次 %d", b.ID), "已完成", "已关闭")
	body = alice.load("/console/close", http.StatusOK)
	bodyHas(t, "close page with a batch in Chinese", body, fmt.Sprintf(`<a href="/console/close/%d">%d</a>`, b.ID, b.ID), "supplier gone", "已完成")

	// Again: nothing left to close.
	status, body = alice.submit("/console/close", confirmed(t, page, url.Values{"reason": {"again"}, "code": {e.code("alice")}}))
	if status != http.StatusConflict {
		t.Fatalf("closing closed orders = %d:\n%s", status, body)
	}
	bodyHas(t, "nothing to close", body, "被拒绝：", "nothing to close", nos[1])
}

func TestClosePreviewSelections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	e.closableOrders("U", "u-7", 2)
	e.clock.Advance(2 * time.Hour)
	e.closableOrders("L", "u-8", 1)
	alice := e.login("alice")
	alice.usePrefs("en", "Asia/Shanghai")

	_, body := alice.previewClose(url.Values{"user_id": {"u-7"}, "flow": {"checkout"}, "reason": {"r"}})
	bodyHas(t, "preview by user", body, "2 orders will be closed.", "U-001", "U-002")
	bodyLacks(t, "preview by user", body, "L-001")

	// t0 is 16:00 in Shanghai; the later order 18:00 and a bit.
	sel, body := alice.previewClose(url.Values{"from": {"2026-11-30T15:30"}, "to": {"2026-11-30T16:30"}, "reason": {"r"}})
	bodyHas(t, "preview by time", body, "2 orders will be closed.", "U-001", "2026-11-30 16:00:00 CST")
	bodyLacks(t, "preview by time", body, "L-001")
	if !strings.Contains(sel, `"from":"2026-11-30T07:30:00Z"`) && !strings.Contains(sel, `"from":"2026-11-30T15:30:00+08:00"`) {
		t.Fatalf("selection %s is not read in the operator's zone", sel)
	}
	sel, body = alice.previewClose(url.Values{"from": {"2026-11-30T08:00"}, "to": {"2026-11-30T09:00"}, "reason": {"r"}})
	bodyHas(t, "preview of an empty range", body, "0 orders will be closed.")
	bodyLacks(t, "preview of an empty range", body, `id="close-confirm"`)
	if sel != "" {
		t.Fatal("a confirm form for nothing")
	}

	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"from": {"yesterday"}, "to": {"2026-11-30T09:00"}}, "From (inclusive) is not a date and time."},
		{url.Values{"from": {"2026-11-30T08:00"}}, "is required with from"},
		{url.Values{"user_id": {"u-7"}, "order_nos": {"U-001"}}, "one way only"},
		{url.Values{}, "choose orders by"},
		{url.Values{"user_id": {"u-7"}, "flow": {"nope"}}, "no flow is called"},
	} {
		status, body := alice.submit("/console/close/preview", c.form)
		if status != http.StatusBadRequest {
			t.Fatalf("preview of %v = %d:\n%s", c.form, status, body)
		}
		bodyHas(t, "refused preview", body, c.want, `action="/console/close/preview"`)
	}
}

func TestCloseBatchRunningPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("vic", access.RoleViewer)
	nos := e.closableOrders("R", "u-1", 2)
	// Started, not run: as a batch is while it runs.
	b, err := e.closer.Start(e.ctx, &closes.Selector{OrderNos: nos}, "stuck", &lapse.AuditEntry{ActorKind: "cli", ActorName: "root"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	vic := e.login("vic")
	resp, err := vic.c.Get(e.srv.URL + fmt.Sprintf("/console/close/%d", b.ID))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(raw)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Refresh") != "2" {
		t.Fatalf("running batch page = %d, Refresh %q", resp.StatusCode, resp.Header.Get("Refresh"))
	}
	bodyHas(t, "running batch page", body, `<meta http-equiv="refresh" content="2">`, `<progress id="batch-progress" max="2" value="0">`,
		"running", "refreshes every 2 seconds", "cli:root")
	vic.load("/console/close/999", http.StatusNotFound)
	vic.load("/console/close/x", http.StatusNotFound)
}

// TestCloseConfirmsThePreview: a close confirmed from a preview closes what
// the preview showed, not the orders the selection gained since.
func TestCloseConfirmsThePreview(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	shown := e.closableOrders("A", "u-1", 3)
	alice := e.login("alice")
	_, body := alice.previewClose(url.Values{"user_id": {"u-1"}, "reason": {"supplier gone"}})
	bodyHas(t, "preview", body, "3 orders will be closed.")
	confirm := confirmed(t, body, url.Values{"reason": {"supplier gone"}})

	// The customer orders twice more while alice reads the preview.
	e.clock.Advance(time.Minute)
	later := e.closableOrders("B", "u-1", 2)

	confirm.Set("code", e.code("alice"))
	resp := alice.post("/console/close", confirm)
	b := e.waitBatch(batchID(t, redirectedTo(t, resp, "/console/close/")))
	if b.Total != 3 || b.Closed != 3 {
		t.Errorf("batch confirmed from a preview of 3: %+v", b)
	}
	for _, no := range shown {
		if o, err := e.engine.Order(e.ctx, no); err != nil || o.State != "CLOSED" {
			t.Errorf("previewed order %s after the close: %+v, %v", no, o, err)
		}
	}
	for _, no := range later {
		if o, err := e.engine.Order(e.ctx, no); err != nil || o.State != "UNPAID" {
			t.Errorf("order %s made after the preview: %+v, %v; want it left UNPAID", no, o, err)
		}
	}
}

// TestCloseRefusesAnotherSelection: a confirm form whose selection was
// changed after the preview (another user's orders, as many as were
// counted) is refused, and closes nothing.
func TestCloseRefusesAnotherSelection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	e.closableOrders("A", "u-1", 2)
	other := e.closableOrders("B", "u-2", 2)
	alice := e.login("alice")
	_, body := alice.previewClose(url.Values{"user_id": {"u-1"}, "reason": {"supplier gone"}})
	bodyHas(t, "preview", body, "2 orders will be closed.")
	confirm := confirmed(t, body, url.Values{"reason": {"supplier gone"}})
	if len(confirm.Get("selection_id")) != 64 {
		t.Fatalf("confirm form %v carries no selection id", confirm)
	}
	confirm.Set("selection", `{"user_id":"u-2"}`)
	confirm.Set("code", e.code("alice"))
	if resp := alice.post("/console/close", confirm); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("confirm of another selection = %d, want 400", resp.StatusCode)
	}
	for _, no := range other {
		if o, err := e.engine.Order(e.ctx, no); err != nil || o.State != "UNPAID" {
			t.Errorf("order %s of the other selection: %+v, %v; want it left UNPAID", no, o, err)
		}
	}
}

// TestCloseManyNumbersInTheConsole: the close form takes more order
// numbers than the API's default body limit holds (a selector takes
// closes.MaxOrderNos), through the preview and the confirm: the preview
// was refused as too large.
func TestCloseManyNumbersInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	nos := e.closableOrders("M", "u-m", 2)
	const more = 1100 // of 64 characters: past 64 KiB
	for i := range more {
		nos = append(nos, fmt.Sprintf("%s%0*d", "M-", lapse.MaxOrderNoLen-2, i))
	}
	alice := e.login("alice")
	_, page := alice.previewClose(url.Values{"order_nos": {strings.Join(nos, "\n")}, "reason": {"r"}})
	bodyHas(t, "preview", page, "2 orders will be closed.", fmt.Sprintf("%d matched but will not be closed", more))
	resp := alice.post("/console/close", confirmed(t, page, url.Values{"reason": {"r"}, "code": {e.code("alice")}}))
	if b := e.waitBatch(batchID(t, redirectedTo(t, resp, "/console/close/"))); b.Total != 2 || b.Closed != 2 {
		t.Fatalf("batch: %+v", b)
	}
}
