package console_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
)

// The browser tests drive the console in headless Chromium (the binary
// LAPSE_TEST_CHROMIUM names) over the harness's TLS server, with real
// clicks and typing, as an operator would: what they find is what a browser
// does with the console's forms, cookies, CSP and CSS, which the tests with
// an HTTP client cannot see. Each step saves a full-page screenshot in the
// test's artifact directory (go test -artifacts keeps it) and, when
// LAPSE_SCREENSHOTS names a directory (relative to the module's root), there
// too: docs/console holds them.

const (
	browserTimeout = 5 * time.Minute  // a whole test's browser
	stepTimeout    = 60 * time.Second // one step: a page load, a wait; generous for a slow machine
)

// Sizes the tests look at the console in.
const (
	laptopWidth, laptopHeight = 1280, 900
	phoneWidth, phoneHeight   = 390, 844 // an iPhone 12 to 15
)

// chromium starts a headless Chromium for t, gone when t ends, and returns
// a context of it for newTab.
func chromium(t *testing.T) context.Context {
	t.Helper()
	path := testenv.Require(t, testenv.EnvChromium, "headless Chromium")
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.IgnoreCertErrors,
		chromedp.UserDataDir(profile), chromedp.WindowSize(laptopWidth, laptopHeight))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium does not start its sandbox as root
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		// chromedp.Cancel would wait for a browser that never started.
		bcancel()
		acancel()
		cancel()
		t.Fatalf("start %s: %v", path, err)
	}
	// Before the profile's removal, which t registered first: the browser
	// is gone when its directory goes.
	t.Cleanup(func() {
		_ = chromedp.Cancel(bctx)
		bcancel()
		acancel()
		cancel()
	})
	return bctx
}

// tab is one operator's tab: a browser context of its own, so its own
// cookies, as a second operator at another machine has.
type tab struct {
	t     *testing.T
	ctx   context.Context
	base  string   // the server's URL
	shots []string // where screenshots go
	width int      // of the screen the tab emulates, in CSS pixels

	mu       sync.Mutex
	problems []string // what the page's console said that a working page does not
}

func newTab(t *testing.T, browser context.Context, e *env) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, base: e.srv.URL, shots: []string{t.ArtifactDir()}}
	if dir := os.Getenv("LAPSE_SCREENSHOTS"); dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", dir) // from the module's root, as docs/console/README.md says
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tb.shots = append(tb.shots, dir)
	}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tb.screen(laptopWidth, laptopHeight, false)
	// A style or script the CSP refuses, or a script that throws, is a
	// page that does not work as it was written.
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				tb.mu.Lock()
				tb.problems = append(tb.problems, m.String())
				tb.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, p := range tb.problems {
			t.Errorf("the browser's console: %s", p)
		}
	})
	return tb
}

// screen makes the tab a screen of width × height CSS pixels: a laptop's,
// or when mobile a phone's, twice as dense, whose browser honours the
// page's viewport and zooms out of a page wider than the screen.
func (tb *tab) screen(width, height int, mobile bool) {
	tb.t.Helper()
	opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if mobile {
		opts = []chromedp.EmulateViewportOption{chromedp.EmulateScale(2), chromedp.EmulateMobile}
	}
	tb.do(fmt.Sprintf("emulate a %d×%d screen", width, height), chromedp.EmulateViewport(int64(width), int64(height), opts...))
	tb.width = width
}

// do runs steps as the step what; a failure ends the test with where the
// tab was and what it showed.
func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.fail(what, err)
	}
}

func (tb *tab) fail(what string, err error) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		_ = os.WriteFile(filepath.Join(tb.t.ArtifactDir(), "failed.png"), png, 0o644)
	}
	tb.t.Fatalf("%s: %v\nthe tab is at %s and shows:\n%s", what, err, loc, text)
}

// open loads path, as typing it in the address bar does.
func (tb *tab) open(path string) {
	tb.t.Helper()
	tb.do("open "+path, chromedp.Navigate(tb.base+path))
}

// click clicks the element sel, a button or link that loads a page, and
// waits until that page has loaded.
func (tb *tab) click(what, sel string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))); err != nil {
		tb.fail(what, err)
	}
}

// fill types text into the field sel, empty first.
func (tb *tab) fill(sel, text string) {
	tb.t.Helper()
	// Empty, as select-all and delete would: Clear sets the value
	// attribute, which a field typed into or restored on a reload no longer
	// follows, and fails on an empty textarea.
	tb.do("empty "+sel, chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ""`, sel)))
	tb.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text))
	if got := eval[string](tb, fmt.Sprintf(`document.querySelector(%q).value`, sel)); got != text {
		tb.t.Fatalf("typed %q into %s, which holds %q", text, sel, got)
	}
}

// choose picks the option value of the select sel.
func (tb *tab) choose(sel, value string) {
	tb.t.Helper()
	tb.do("choose "+value+" in "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.SetValue(chromedp.CSS(sel), value))
}

// sees waits until the page shows every one of wants (in the text of the
// element sel, "body" for the page), across the loads of a page that
// refreshes itself.
func (tb *tab) sees(sel string, wants ...string) {
	tb.t.Helper()
	const pred = `(sel, ...wants) => { const el = document.querySelector(sel); return !!el && wants.every(w => el.innerText.includes(w)); }`
	args := append([]any{sel}, anys(wants)...)
	deadline := time.Now().Add(stepTimeout)
	for {
		ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
		_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](pred, chromedp.WithPollingArgs(args...),
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second)))
		cancel()
		if err == nil {
			return
		}
		// A poll ends with the page it ran in; a refreshing page starts
		// another.
		if time.Now().After(deadline) || tb.ctx.Err() != nil {
			tb.fail(fmt.Sprintf("%s to show %q", sel, wants), err)
		}
	}
}

// lacks fails unless the page, loaded, shows none of unwanted.
func (tb *tab) lacks(unwanted ...string) {
	tb.t.Helper()
	text := tb.text("body")
	for _, u := range unwanted {
		if strings.Contains(text, u) {
			tb.t.Errorf("%s shows %q:\n%s", tb.location(), u, text)
		}
	}
}

// text is the text the element sel shows.
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf(`document.querySelector(%q).innerText`, sel))
}

func (tb *tab) location() string {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		tb.fail("read the location", err)
	}
	return strings.TrimPrefix(loc, tb.base)
}

// eval is the value of the JavaScript expression js in tb's page.
func eval[T any](tb *tab, js string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		tb.fail("evaluate "+js, err)
	}
	return v
}

// flash is the flash message of the page: its kind and text.
func (tb *tab) flash() (kind, text string) {
	tb.t.Helper()
	f := eval[[]string](tb, `(() => { const f = document.querySelector("main > p.flash"); return f ? [f.className, f.innerText] : ["", ""]; })()`)
	return strings.TrimPrefix(strings.TrimPrefix(f[0], "flash "), "flash-"), f[1]
}

// shot saves a full-page screenshot as name, after it checks that the page
// fits its width: nothing makes the page scroll sideways.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	tb.fits(name)
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.fail("screenshot "+name, err)
	}
	for _, dir := range tb.shots {
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			tb.t.Fatal(err)
		}
	}
}

// fits fails unless the page is no wider than the screen: nothing makes
// it scroll sideways, or a mobile browser zoom out (which widens the
// window past the screen).
func (tb *tab) fits(what string) {
	tb.t.Helper()
	js := fmt.Sprintf(`(() => {
		const w = %d, d = document.documentElement, wide = [];
		for (const el of document.body.querySelectorAll("*")) {
			const r = el.getBoundingClientRect();
			if (r.right > w + 0.5 && !el.parentElement.closest(".table-wrap")) {
				wide.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className && el.className.baseVal === undefined ? "." + el.className.replaceAll(" ", ".") : "") + " to " + Math.round(r.right));
			}
		}
		return [d.scrollWidth, window.innerWidth, wide.slice(0, 10).join(", ")];
	})()`, tb.width)
	v := eval[[]any](tb, js)
	if sw, iw := v[0].(float64), v[1].(float64); sw > iw || iw > float64(tb.width) {
		tb.t.Errorf("%s (%s) is %v px wide in a window of %v on a screen of %d; too wide: %s", what, tb.location(), sw, iw, tb.width, v[2])
	}
}

// login signs name in on the login page with their password and code.
func (tb *tab) login(e *env, name string) {
	tb.t.Helper()
	tb.open("/console/")
	tb.sees("h1", "Sign in")
	tb.fill(`input[name="name"]`, name)
	tb.fill(`input[name="password"]`, password)
	tb.fill(`input[name="code"]`, e.code(name))
	tb.click("sign "+name+" in", "#login-submit")
	tb.sees(".who", name)
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// requestRE is the approval request a pending flash names.
var requestRE = regexp.MustCompile(`\(request (\d+)\)`)

// TestBrowserDesk is the issue's scenario, in a laptop's window: two
// operators find a membership in manual review, retry it, refund a paid
// order in part, ask for and approve a manual close above the threshold,
// look at the dashboard and the audit log, and read an order in Chinese.
func TestBrowserDesk(t *testing.T) {
	browser := chromium(t)
	d := newDesk(t, deskConfig{approvalAmount: 20000, approvalCount: 2}) // 200.00 CNY; 2 orders
	d.membershipInReview("M-1")
	d.mismatch("C-1")
	d.failedGroup("G-1")
	d.deadWebhook("C-2")
	d.create("C-7", "checkout", 50000, "")
	d.pay("C-7", 50000)
	nos := d.closableOrders("F", "u-shop", 3)
	d.operator("alice", "operator")
	d.operator("bob", "operator")
	alice := newTab(t, browser, d.env)

	// Signing in: a wrong code first.
	alice.open("/console/")
	alice.sees("h1", "Sign in")
	if loc := alice.location(); !strings.HasPrefix(loc, "/console/login") {
		t.Fatalf("signed out, /console/ is at %s", loc)
	}
	alice.fill(`input[name="name"]`, "alice")
	alice.fill(`input[name="password"]`, password)
	alice.fill(`input[name="code"]`, "000000")
	alice.click("sign in with a wrong code", "#login-submit")
	alice.sees(".login", "Name, password or code is wrong.")
	alice.shot("login.png")
	// The name is kept; the password and code are typed again.
	alice.fill(`input[name="password"]`, password)
	alice.fill(`input[name="code"]`, d.code("alice"))
	alice.click("sign in", "#login-submit")
	alice.sees("main h1", "Review queue")
	alice.sees(".who", "alice · operator")
	alice.sees("table.queue", "M-1", "C-1", "G-1", "C-2", "Card issue failed", "Callback mismatch", "Group buy failed", "Notification failed")
	alice.shot("queue.png")

	// The membership in manual review, found by its category.
	alice.choose(`select[name="category"]`, "card_issue_failed")
	alice.click("filter the queue", "#queue-filter")
	alice.sees("table.queue", "M-1", "Card issue failed", "MANUAL_REVIEW", "card service under maintenance")
	if got := eval[[]string](alice, `[...document.querySelectorAll("table.queue tbody tr td:first-child")].map(td => td.innerText)`); len(got) != 1 || got[0] != "M-1" {
		t.Fatalf("the queue filtered by card_issue_failed lists %q", got)
	}
	alice.shot("queue-filtered.png")
	alice.click("open M-1", `table.queue a[href="/console/orders/M-1"]`)
	alice.sees("main h1", "Order M-1", "MANUAL_REVIEW")
	// Every attempt of its dead delivery, in the timeline.
	hs, err := d.engine.Deliveries(d.ctx, "M-1")
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, h := range hs {
		if h.Subscriber == engine.IssueSubscriber {
			attempts = h.Attempts
		}
	}
	if attempts < 2 {
		t.Fatalf("M-1's issue delivery has %d attempts: %+v", attempts, hs)
	}
	var wants []string
	for i := 1; i <= attempts; i++ {
		wants = append(wants, fmt.Sprintf("Attempt %d to issue (delivery #1)", i))
	}
	alice.sees("table.timeline", wants...)
	if n := eval[int](alice, `document.querySelectorAll("table.timeline tr.kind-attempt").length`); n != attempts {
		t.Errorf("the timeline shows %d attempts of %d", n, attempts)
	}
	alice.sees("table.timeline", "COMPENSATING → MANUAL_REVIEW", "Review #1 opened", "card service under maintenance")
	alice.shot("order.png")

	// Retry, with a code.
	alice.fill(`#retry-form input[name="reason"]`, "card service back")
	alice.fill(`#retry-form input[name="code"]`, d.code("alice"))
	alice.click("retry M-1", `#retry-form button[type="submit"]`)
	alice.sees("main > p.flash", "Done.")
	if kind, _ := alice.flash(); kind != "ok" {
		t.Errorf("the retry's flash is %s", kind)
	}
	alice.sees("main h1", "COMPENSATING")
	if st := d.state("M-1"); st != flows.Compensating {
		t.Fatalf("M-1 is %s after the retry", st)
	}
	alice.lacks("MANUAL_REVIEW → COMPENSATING → MANUAL_REVIEW")
	alice.shot("retry.png")
	d.cards.fixed.Store(true)
	d.drain()
	alice.do("reload M-1", chromedp.Reload())
	alice.sees("table.timeline", "MANUAL_REVIEW → COMPENSATING", "COMPENSATING → ISSUED", "Card #1 issued: swim-10", "order.retry · ok")

	// A partial refund of a paid checkout order, once the retry's second
	// factor is stale: refused without a code, done with one.
	d.clock.Advance(6 * time.Minute)
	alice.open("/console/orders/C-7")
	alice.sees("main h1", "Order C-7", "PAID")
	alice.fill(`#refund-form input[name="amount"]`, "20.00")
	alice.fill(`#refund-form input[name="reason"]`, "one cup arrived broken")
	alice.click("refund without a code", `#refund-form button[type="submit"]`)
	alice.sees("main > p.flash", "Refused:", "needs a fresh second factor")
	if refunds, _ := d.engine.OrderRefunds(d.ctx, "C-7"); len(refunds) != 0 {
		t.Fatalf("a refund without a code was made: %+v", refunds)
	}
	alice.fill(`#refund-form input[name="amount"]`, "20.00")
	alice.fill(`#refund-form input[name="reason"]`, "one cup arrived broken")
	alice.fill(`#refund-form input[name="code"]`, d.code("alice"))
	alice.click("refund with a code", `#refund-form button[type="submit"]`)
	alice.sees("main > p.flash", "Done.")
	d.drain() // the provider refunds; the order is PAID again
	alice.do("reload C-7", chromedp.Reload())
	alice.sees("table.timeline", "Refund of 20.00 CNY: succeeded", "refund.create · ok")
	alice.sees("#refund-form", "Up to 480.00 CNY is left to refund")
	// Above the approval amount, with the code given a moment ago: it
	// waits for a second operator.
	alice.fill(`#refund-form input[name="amount"]`, "250")
	alice.fill(`#refund-form input[name="reason"]`, "the rest of the set")
	alice.click("refund above the approval amount", `#refund-form button[type="submit"]`)
	alice.sees("main > p.flash", "Waiting for a second operator's approval (request ")
	if kind, _ := alice.flash(); kind != "pending" {
		t.Errorf("the big refund's flash is %s", kind)
	}
	if refunds, _ := d.engine.OrderRefunds(d.ctx, "C-7"); len(refunds) != 1 || refunds[0].Amount != 2000 {
		t.Fatalf("refunds of C-7: %+v", refunds)
	}
	// The request shows what it refunds, 250.00 (its stake, with the 20.00
	// refunded before, is 270.00).
	if a := d.pendingApproval(); a.Action != "refund.create" || a.Amount != 25000 || a.Target != "order:C-7" {
		t.Fatalf("the refund's approval request: %+v", a)
	}
	alice.shot("refund.png")

	// A manual close of more orders than ApprovalCount: preview, confirm
	// with a code, pending.
	alice.click("go to manual close", `header nav a[href="/console/close"]`)
	alice.sees("main h1", "Manual close")
	alice.fill(`#close-form textarea[name="order_nos"]`, strings.Join(nos, ", "))
	alice.fill(`#close-form input[name="reason"]`, "the shop closed for good")
	alice.click("preview the close", "#close-preview-submit")
	alice.sees("#close-preview", "3 orders will be closed.", nos[0], nos[2], "19.99 CNY")
	alice.sees("#close-needs-approval", "more than 2 orders")
	alice.shot("close.png")
	alice.fill(`#close-confirm input[name="code"]`, d.code("alice"))
	alice.click("confirm the close", "#close-submit")
	alice.sees("main > p.flash", "Waiting for a second operator's approval (request ")
	_, text := alice.flash()
	m := requestRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the close's flash names no request: %q", text)
	}
	req := m[1]
	if loc := alice.location(); loc != "/console/approvals" {
		t.Errorf("the pending close went to %s", loc)
	}
	alice.sees("#approval-"+req, "close.batch", "You made this request")
	for _, no := range nos {
		if st := d.state(no); st != flows.Unpaid {
			t.Fatalf("%s is %s before the approval", no, st)
		}
	}

	// The second operator, in a browser of their own, approves it with
	// their code.
	bob := newTab(t, browser, d.env)
	bob.login(d.env, "bob")
	bob.click("go to approvals", `header nav a[href="/console/approvals"]`)
	bob.sees("#approval-"+req, "close.batch", "alice", "the shop closed for good", "3")
	bob.shot("approvals.png")
	bob.fill("#approval-"+req+` input[name="code"]`, d.code("bob"))
	bob.click("approve the close", "#approve-"+req)
	bob.sees("main > p.flash", "Request "+req+" approved and carried out.")
	bob.click("open the batch", "#approval-"+req+` a[href^="/console/close/"]`)
	bob.sees("#batch-status", "done")
	bob.sees("#batch-counts", "3")
	for id, want := range map[string]string{"batch-total": "3", "batch-closed": "3", "batch-skipped": "0", "batch-failed": "0"} {
		if got := bob.text("#" + id); got != want {
			t.Errorf("#%s shows %q, want %s", id, got, want)
		}
	}
	bob.sees("dl.facts", "the shop closed for good", "operator:alice", "#"+req)
	bob.shot("batch.png")
	for _, no := range nos {
		if st := d.state(no); st != flows.Closed {
			t.Errorf("%s is %s after the approved close", no, st)
		}
	}

	// The dashboard and the audit log.
	alice.click("go to the dashboard", `header nav a[href="/console/dashboard"]`)
	alice.sees("main h1", "Dashboard")
	alice.sees("#exceptions", "Exceptions, last 24 hours", "By kind, last 24 hours")
	alice.shot("dashboard.png")
	alice.click("go to the audit log", `header nav a[href="/console/audit"]`)
	alice.sees("#audit-rows", "approval.approve", "close.batch", "refund.create", "order.retry", "bob")
	alice.sees("#audit-chain", "verified when you ask")
	alice.click("verify the chain", "#audit-verify")
	alice.sees("#audit-chain", "The chain is intact")
	alice.shot("audit.png")

	// Chinese, on the same order page.
	alice.open("/console/orders/M-1")
	alice.sees("main h1", "Order M-1", "ISSUED")
	alice.choose(`select[name="lang"]`, "zh")
	alice.choose(`select[name="time_zone"]`, "Asia/Shanghai")
	alice.click("switch to Chinese", "#save-preferences")
	if loc := alice.location(); loc != "/console/orders/M-1" {
		t.Errorf("the preferences went back to %s", loc)
	}
	alice.sees("main h1", "订单 M-1", "ISSUED")
	alice.sees("header", "复核队列", "审批", "手动关单", "看板", "审计日志", "操作员")
	alice.sees("main", "返回复核队列", "订单信息", "时间线", "状态流转", "第 1 次尝试 → issue（投递 #1）", "已发卡 #1：swim-10", "CST")
	if lang := eval[string](alice, `document.documentElement.lang`); lang != "zh-CN" {
		t.Errorf("the page's lang is %q", lang)
	}
	alice.lacks("Timeline", "Review queue")
	alice.shot("order-zh.png")
}

// TestBrowserPhone: at a phone's width every page fits the screen, with
// what does not fit scrolling in its own box, and the navigation works.
func TestBrowserPhone(t *testing.T) {
	browser := chromium(t)
	d := newDesk(t, deskConfig{approvalCount: 1})
	d.membershipInReview("M-1")
	d.mismatch("C-1")
	d.failedGroup("G-1")
	d.deadWebhook("C-2")
	d.operator("alice", "operator")
	phone := newTab(t, browser, d.env)
	phone.screen(phoneWidth, phoneHeight, true)

	phone.open("/console/")
	phone.sees("h1", "Sign in")
	phone.shot("login-phone.png")
	phone.login(d.env, "alice")
	phone.sees("table.queue", "M-1", "C-1", "G-1", "C-2")
	phone.shot("queue-phone.png")
	// A row of the queue is a card, not a table's row squeezed into the
	// screen, whose reason would be a column a word wide.
	for _, w := range eval[[]float64](phone, `[...document.querySelectorAll("table.queue tbody td:nth-child(5)")].map(td => td.getBoundingClientRect().width)`) {
		if w < phoneWidth/2 {
			t.Errorf("a reason in the queue is %v px wide on a phone", w)
		}
	}

	// Every link of the navigation shows whole, on the screen, and is what
	// a tap at its middle reaches.
	const js = `[...document.querySelectorAll("header.top nav a")].map(a => {
		const r = a.getBoundingClientRect();
		const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		return [a.getAttribute("href"), r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth && (hit === a || a.contains(hit))];
	})`
	links := eval[[][]any](phone, js)
	if len(links) != 5 {
		t.Fatalf("the navigation has %d links: %v", len(links), links)
	}
	for _, l := range links {
		if l[1] != true {
			t.Errorf("the navigation's link %v cannot be tapped at a phone's width", l[0])
		}
	}

	phone.click("open M-1", `table.queue a[href="/console/orders/M-1"]`)
	phone.sees("main h1", "Order M-1")
	phone.sees("table.timeline", "Attempt 1 to issue (delivery #1)")
	phone.shot("order-phone.png")

	// The other pages, through the navigation, fit too.
	for _, p := range []struct{ href, heading string }{
		{"/console/approvals", "Approvals"},
		{"/console/close", "Manual close"},
		{"/console/dashboard", "Dashboard"},
		{"/console/audit", "Audit log"},
		{"/console/", "Review queue"},
	} {
		phone.click("tap "+p.href, `header.top nav a[href="`+p.href+`"]`)
		phone.sees("main h1", p.heading)
		if loc := phone.location(); loc != p.href {
			t.Errorf("the link to %s went to %s", p.href, loc)
		}
		phone.fits(p.href)
	}
}
