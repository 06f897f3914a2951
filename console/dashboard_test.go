package console_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// svgs returns the charts of a page, failing the test when one is not
// well-formed XML or holds markup its labels should have escaped.
func svgs(t *testing.T, page string) []string {
	t.Helper()
	var out []string
	for _, svg := range regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1) {
		d := xml.NewDecoder(strings.NewReader(svg))
		d.Strict = true
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("a chart is not well-formed XML: %v\n%s", err, svg)
			}
		}
		if strings.Contains(svg, "<script") {
			t.Fatalf("a chart holds a script:\n%s", svg)
		}
		out = append(out, svg)
	}
	return out
}

// lagRow returns the cells of the close-lag table's row named window.
func lagRow(t *testing.T, page, window string) []string {
	t.Helper()
	m := regexp.MustCompile(`<tr><td>` + regexp.QuoteMeta(window) + `</td>` + strings.Repeat(`<td class="num">([^<]*)</td>`, 4) + `</tr>`).
		FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no close-lag row %q in\n%s", window, page)
	}
	return m[1:]
}

// dashLogin signs name in on a browser of its own. (env.browser shares one
// http.Client, and so one cookie jar, between all its browsers: the last
// login is every browser's.)
func dashLogin(e *env, name string) *browser {
	e.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Transport: e.srv.Client().Transport, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	b := &browser{e: e, c: c}
	resp := b.post("/console/login", url.Values{"name": {name}, "password": {password}, "code": {e.code(name)}, "next": {"/console/"}})
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("login %s: %d", name, resp.StatusCode)
	}
	return b
}

// dashOperators adds alice, who reads English in UTC, and bo, who reads
// Chinese in Shanghai, and signs them in.
func dashOperators(e *env) (en, zh *browser) {
	e.t.Helper()
	e.operator("alice", "viewer")
	e.operator("bo", "viewer")
	zh = dashLogin(e, "bo")
	if resp := zh.post("/console/preferences", url.Values{"lang": {"zh"}, "time_zone": {"Asia/Shanghai"}, "next": {"/console/dashboard"}}); resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("preferences = %d", resp.StatusCode)
	}
	return dashLogin(e, "alice"), dashLogin(e, "bo")
}

// mustContain fails the test for each of wants that page lacks.
func mustContain(t *testing.T, what, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", what, page)
	}
}

func TestDashboardEmpty(t *testing.T) {
	e := newEnv(t, envConfig{})
	en, zh := dashOperators(e)

	status, page := en.get("/console/dashboard")
	if status != http.StatusOK {
		t.Fatalf("dashboard = %d:\n%s", status, page)
	}
	mustContain(t, "the empty dashboard", page, "Dashboard", "0 reviews and 0 orders created in the last 24 hours: no rate without orders.",
		"This process fired no deadline in the last hour.", "0 closes", "0 orders", "0 deliveries", "0 reviews", "0 payments",
		"In charge: the database.", "No shared trigger (Redis) is configured", "As this process sees it.")
	if got := lagRow(t, page, "Last hour"); got[0] != "0 closes" || got[1] != "—" || got[3] != "—" {
		t.Errorf("last hour, no closes: %q", got)
	}
	if n := len(svgs(t, page)); n != 2 { // the exceptions over time, and by kind
		t.Errorf("%d charts, want 2", n)
	}

	status, page = zh.get("/console/dashboard")
	if status != http.StatusOK {
		t.Fatalf("dashboard in Chinese = %d", status)
	}
	mustContain(t, "the empty dashboard in Chinese", page, "看板", "近 24 小时新建 0 条复核、0 笔订单：无订单，无异常率。",
		"近 1 小时本进程未触发任何截止时间。", "当前负责：数据库。", "未配置共享触发器（Redis）", "CST")
	svgs(t, page)
}

// failing is a subscriber that fails every delivery.
type failing struct{ why string }

func (f failing) Deliver(context.Context, *lapse.Delivery) error { return errors.New(f.why) }

func TestDashboardFull(t *testing.T) {
	e := newEnv(t, envConfig{engine: func(c *engine.Config) {
		c.Subscriptions = []engine.Subscription{
			// erp gives up on LAG-0's close at once: a delivery dies, and
			// its review is the deliverer's own.
			{Name: "erp", Events: []string{"order.closed"}, Handler: failing{"HTTP 500"},
				Schedule: lapse.Schedule{Base: time.Second, MaxAttempts: 1}, Filter: func(o *lapse.Order) bool { return o.OrderNo == "LAG-0" }},
			// crm fails LAG-1's close and tries again in a minute.
			{Name: "crm", Events: []string{"order.closed"}, Handler: failing{"connection refused"},
				Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}, Filter: func(o *lapse.Order) bool { return o.OrderNo == "LAG-1" }},
		}
	}})
	en, zh := dashOperators(e)

	// Ten orders at 08:05 due after 1 … 10 s; the claimer fires them at
	// 08:05:20, 19 … 10 s late.
	base := t0.Add(5 * time.Minute)
	e.clock.Set(base)
	var orders []*lapse.Order
	for i := range 10 {
		o, _, err := e.engine.CreateOrder(e.ctx, &lapse.OrderCreate{OrderNo: fmt.Sprintf("LAG-%d", i), Flow: "checkout", UserID: "u1",
			Amount: 1000, Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: 1}}, TTL: time.Duration(i+1) * time.Second},
			engine.Actor{FiredBy: lapse.FiredByAPI, Name: "test"})
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, o)
	}
	e.clock.Set(base.Add(20 * time.Second))
	if n, err := engine.NewClaimer(e.engine, engine.ClaimerConfig{}).RunOnce(e.ctx); n != 10 || err != nil {
		t.Fatalf("claimer fired %d, %v", n, err)
	}
	if n, err := engine.NewDeliverer(e.engine, engine.DelivererConfig{}).RunOnce(e.ctx); n != 2 || err != nil {
		t.Fatalf("deliverer attempted %d, %v", n, err)
	}
	// One more, due and left open.
	if _, _, err := e.engine.CreateOrder(e.ctx, &lapse.OrderCreate{OrderNo: "OPEN-1", Flow: "checkout", UserID: "u1", Amount: 1000,
		Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: 1}}, TTL: time.Second}, engine.Actor{FiredBy: lapse.FiredByAPI, Name: "test"}); err != nil {
		t.Fatal(err)
	}
	// Payments an operator must look at, earlier today and yesterday.
	for i, p := range []struct {
		ago    time.Duration
		status lapse.PaymentStatus
		amount int64
		reason string
	}{
		{3 * time.Hour, lapse.PaymentReview, 1000, "payment T0 of alipay (10.00 CNY) is in review: refund refused: card cancelled"},
		{2 * time.Hour, lapse.PaymentReview, 1000, "payment T1 of alipay (10.00 CNY) is in review: amount differs"},
		{110 * time.Minute, lapse.PaymentLate, 2550, "payment T2 of wechat (25.50 CNY) is in review: currency not accepted"},
		{time.Hour, lapse.PaymentRefunding, 1000, "customer says <b>never ordered</b> & wants a call"},
		{25 * time.Hour, lapse.PaymentLate, 1000, "payment T4 of alipay (10.00 CNY) is in review: refund refused: closed account"},
	} {
		at := base.Add(-p.ago)
		o := orders[i+2]
		_, _, err := e.store.PaymentCreate(e.ctx, &lapse.PaymentCreateParams{
			Payment: &lapse.Payment{Provider: "alipay", TxnID: fmt.Sprintf("T%d", i), OrderID: o.ID, OrderNo: o.OrderNo, Amount: p.amount,
				Currency: "CNY", Merchant: "m1", PaidAt: at, Status: p.status, Reason: p.reason, CreatedAt: at},
			Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: p.reason, CreatedAt: at}})
		if err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Set(base.Add(3 * time.Minute)) // 08:08 UTC, 16:08 in Shanghai

	lag := e.engine.CloseLag(time.Hour)
	if lag.Count != 10 || lag.Max != 19*time.Second || lag.P99 != 19*time.Second || lag.P50 < 12500*time.Millisecond || lag.P50 >= 16*time.Second {
		t.Fatalf("CloseLag(1h) = %+v; want 10 closes 10 … 19 s late", lag)
	}
	secs := func(d time.Duration, unit string) string {
		s := strings.TrimRight(strings.TrimRight(strconv.FormatFloat(d.Seconds(), 'f', 2, 64), "0"), ".")
		return s + " " + unit
	}

	status, page := en.get("/console/dashboard")
	if status != http.StatusOK {
		t.Fatalf("dashboard = %d:\n%s", status, page)
	}
	mustContain(t, "the dashboard", page,
		"As of 2026-11-30 08:08:00 UTC.",
		// Five reviews in the window (the sixth is from yesterday), eleven orders.
		"5 reviews and 11 orders created in the last 24 hours: 45.5 per 100 orders.",
		"08:00–09:00: 1 review (Service unreachable 1), 11 orders, 9.1 per 100 orders",
		"06:00–07:00: 2 reviews (Callback mismatch 2), 0 orders, no rate without orders",
		"05:00–06:00: 1 review (Provider refused 1), 0 orders",
		"07:00–08:00: 1 review (Other 1)",
		// Backlogs.
		"1 order", "1 delivery", "The most overdue was due at 2026-11-30 08:06:20 UTC, 1 min 40 s ago.",
		"6 reviews", "2 payments · 35.50 CNY", "1 payment · 10.00 CNY", "2 payments · 20.00 CNY",
		"this process fired")
	if n := strings.Count(page, "1 delivery</td>"); n != 2 {
		t.Errorf("%d backlogs of one delivery, want 2 (pending, dead)", n)
	}
	hour := lagRow(t, page, "Last hour")
	if want := []string{"10 closes", secs(lag.P50, "s"), "19 s", "19 s"}; strings.Join(hour, "|") != strings.Join(want, "|") {
		t.Errorf("last hour's close lags %q, want %q", hour, want)
	}
	if day := lagRow(t, page, "Last 24 hours"); strings.Join(day, "|") != strings.Join(hour, "|") {
		t.Errorf("last day's close lags %q, want the last hour's %q", day, hour)
	}
	charts := svgs(t, page)
	if len(charts) != 3 {
		t.Fatalf("%d charts, want 3", len(charts))
	}
	// The lags are 10 … 19 s: bars 10–20 s (all ten).
	mustContain(t, "the lag histogram", charts[2], "10 s–20 s", "10 closes")

	status, page = zh.get("/console/dashboard")
	if status != http.StatusOK {
		t.Fatalf("dashboard in Chinese = %d", status)
	}
	mustContain(t, "the dashboard in Chinese", page,
		"数据截至 2026-11-30 16:08:00 CST。",
		"近 24 小时新建 5 条复核、11 笔订单：每百单 45.5。",
		"16:00–17:00：1 条复核（服务不可达 1），11 笔订单，每百单 9.1",
		"14:00–15:00：2 条复核（回调不符 2），0 笔订单，无订单，无异常率",
		"最早一条应于 2026-11-30 16:06:20 CST 投递，已过 1 分 40 秒。", "6 条复核", "2 笔支付 · 35.50 CNY")
	if got, want := lagRow(t, page, "近 1 小时"), []string{"10 次关单", secs(lag.P50, "秒"), "19 秒", "19 秒"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("last hour's close lags in Chinese %q, want %q", got, want)
	}
	svgs(t, page)
}

// trigger is a shared trigger that answers everything and holds nothing.
type trigger struct{}

func (trigger) Add(context.Context, []engine.TriggerDue) error { return nil }
func (trigger) Claim(context.Context, time.Time, time.Duration, int) ([]string, bool, error) {
	return nil, true, nil
}
func (trigger) Done(context.Context, []string) error { return nil }
func (trigger) Release(context.Context, []string, time.Time) error {
	return nil
}
func (trigger) Retry(context.Context, string, time.Time, []time.Duration) (int, bool, error) {
	return 1, false, nil
}
func (trigger) Next(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
func (trigger) BeginSeed(context.Context) error               { return nil }
func (trigger) MarkSeeded(context.Context) error              { return nil }
func (trigger) ToNotify(context.Context) (int64, error)       { return 0, nil }
func (trigger) Ping(context.Context) error                    { return nil }
func (trigger) OrderID(string) (int64, bool)                  { return 0, false }
func (trigger) Requeue(context.Context, []engine.TriggerDue) error {
	return nil
}

func TestDashboardTrigger(t *testing.T) {
	e := newEnv(t, envConfig{engine: func(c *engine.Config) { c.Trigger = trigger{} }})
	e.operator("alice", "viewer")
	b := dashLogin(e, "alice")
	_, page := b.get("/console/dashboard")
	mustContain(t, "the trigger in auto mode", page, "In charge: the shared trigger (Redis).", "Mode auto: the shared trigger answers")
	if err := e.engine.SetTriggerMode(engine.TriggerDatabase); err != nil {
		t.Fatal(err)
	}
	_, page = b.get("/console/dashboard")
	mustContain(t, "the trigger forced to the database", page, "In charge: the database.", "Mode database, forced by an operator")
}
