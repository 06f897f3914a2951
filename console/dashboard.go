package console

import (
	"cmp"
	"context"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// The dashboard: how many orders automation hands over to people and why,
// how late deadlines fire, what waits, and which path fires deadlines. It
// reads the stores with bounds (dashBound rows of a kind) and says so when a
// bound cut a count short.

func init() {
	addMessages(map[string]msg{
		"dash.title": {"Dashboard", "看板"},
		"dash.drawn": {"As of %s.", "数据截至 %s。"},

		"dash.exceptions":       {"Exceptions, last 24 hours", "近 24 小时异常"},
		"dash.exceptions_help":  {"Reviews created each hour (orders handed to an operator), stacked by kind; the line is the exception rate: reviews per 100 orders created in the same hour.", "每小时新建的复核（转交操作员处理的订单），按类别堆叠；折线为异常率：每 100 笔同一小时创建的订单对应的复核数。"},
		"dash.exceptions_chart": {"Reviews per hour by kind, and exceptions per 100 orders", "每小时复核数（按类别）与每百单异常数"},
		"dash.axis_reviews":     {"reviews", "复核数"},
		"dash.axis_rate":        {"per 100 orders", "每百单"},
		"dash.rate_line":        {"exceptions per 100 orders", "每百单异常数"},
		"dash.by_kind":          {"By kind, last 24 hours", "近 24 小时按类别"},
		"dash.by_kind_chart":    {"Reviews of the last 24 hours by kind", "近 24 小时复核按类别"},
		"dash.total":            {"%s and %s created in the last 24 hours: %s.", "近 24 小时新建 %s、%s：%s。"},
		"dash.rate":             {"%s per 100 orders", "每百单 %s"},
		"dash.rate_none":        {"no rate without orders", "无订单，无异常率"},
		"dash.rate_partial":     {"no rate: not counted in full", "未完整统计，无异常率"},
		"dash.cut_reviews":      {"Only the newest %s reviews were read: the hours before %s are not counted in full.", "只读取了最新的 %s 条复核：%s 之前的各小时未完整统计。"},
		"dash.cut_orders":       {"Only the newest %s orders were read: the hours before %s are not counted in full and show no rate.", "只读取了最新的 %s 笔订单：%s 之前的各小时未完整统计，不显示异常率。"},
		"dash.tip":              {"%s–%s: %s, %s, %s", "%s–%s：%s，%s，%s"},
		"dash.tip_kinds":        {"%s (%s)", "%s（%s）"},
		"dash.list_sep":         {", ", "、"},
		"dash.category_note":    {"Categories are read from each review's reason, as in the review queue.", "类别由复核原因判定，与复核队列一致。"},
		"dash.unit.review":      {"%s review", "%s 条复核"},
		"dash.unit.review_n":    {"%s reviews", "%s 条复核"},
		"dash.unit.order":       {"%s order", "%s 笔订单"},
		"dash.unit.order_n":     {"%s orders", "%s 笔订单"},
		"dash.unit.close":       {"%s close", "%s 次关单"},
		"dash.unit.close_n":     {"%s closes", "%s 次关单"},
		"dash.unit.delivery":    {"%s delivery", "%s 条投递"},
		"dash.unit.delivery_n":  {"%s deliveries", "%s 条投递"},
		"dash.unit.payment":     {"%s payment", "%s 笔支付"},
		"dash.unit.payment_n":   {"%s payments", "%s 笔支付"},
		"dash.dur.us":           {"%s µs", "%s 微秒"},
		"dash.dur.ms":           {"%s ms", "%s 毫秒"},
		"dash.dur.s":            {"%s s", "%s 秒"},
		"dash.dur.min":          {"%d min %d s", "%d 分 %d 秒"},
		"dash.dur.h":            {"%d h %d min", "%d 小时 %d 分"},

		"dash.lag":        {"Close lag", "关单延迟"},
		"dash.lag_help":   {"Time from an order's deadline to its close, for the deadlines this process fired: its own view, kept in memory since it started and for at most 24 hours; other processes keep their own. The quantiles are estimated from a histogram whose bins are at most 28% wide; the maximum is exact.", "从订单截止时间到关单的时长，仅统计本进程触发的截止时间：这是本进程自己的视角，自启动起保存在内存中，最多 24 小时；其他进程各自统计。分位数由直方图估算（每个区间宽度不超过 28%），最大值为精确值。"},
		"dash.lag_window": {"Window", "时间窗"},
		"dash.lag_closes": {"Closes", "关单数"},
		"dash.lag_p50":    {"p50", "p50（中位数）"},
		"dash.lag_p99":    {"p99", "p99"},
		"dash.lag_max":    {"Max", "最大值"},
		"dash.last_hour":  {"Last hour", "近 1 小时"},
		"dash.last_day":   {"Last 24 hours", "近 24 小时"},
		"dash.lag_chart":  {"Close lags of the last hour", "近 1 小时关单延迟分布"},
		"dash.lag_none":   {"This process fired no deadline in the last hour.", "近 1 小时本进程未触发任何截止时间。"},
		"dash.lag_below":  {"under %s", "低于 %s"},
		"dash.lag_above":  {"%s or more", "%s 及以上"},

		"dash.backlogs":                {"Backlogs", "积压"},
		"dash.backlog":                 {"What waits", "积压项"},
		"dash.now":                     {"Now", "当前"},
		"dash.about":                   {"About", "说明"},
		"dash.due_open":                {"Due but open", "已到期未关闭"},
		"dash.due_open_help":           {"Orders whose deadline has passed and that have not moved on yet.", "截止时间已过、尚未流转的订单。"},
		"dash.deliveries_pending":      {"Deliveries pending", "待投递"},
		"dash.oldest_pending":          {"The most overdue was due at %s, %s ago.", "最早一条应于 %s 投递，已过 %s。"},
		"dash.oldest_pending_future":   {"The next is due at %s.", "下一条将于 %s 投递。"},
		"dash.deliveries_dead":         {"Deliveries dead", "投递已放弃"},
		"dash.dead_help":               {"Refused, or out of retries; they wait for an operator.", "被拒绝或重试耗尽，等待操作员处理。"},
		"dash.reviews_open":            {"Open reviews", "待处理复核"},
		"dash.reviews_open_help":       {"Orders automation handed over, not yet resolved.", "自动化转交、尚未处理的订单。"},
		"dash.payments_late":           {"Late payments", "迟到的支付"},
		"dash.payments_late_help":      {"Captured for orders they cannot pay; their refunds are on the way.", "已扣款但无法用于订单的支付，退款进行中。"},
		"dash.payments_refunding":      {"Refunds in progress", "退款中"},
		"dash.payments_refunding_help": {"The provider accepted the refund and has not reported it done.", "支付渠道已受理退款，尚未回报完成。"},
		"dash.payments_review":         {"Payments in review", "待复核的支付"},
		"dash.payments_review_help":    {"Automation gave up on them; an operator decides.", "自动处理已放弃，由操作员决定。"},
		"dash.counted_to":              {"Counted up to %s.", "最多统计 %s。"},
		"dash.unavailable":             {"Could not be read; the logs say why.", "读取失败，原因见日志。"},

		"dash.trigger":                 {"Deadline trigger", "截止时间触发"},
		"dash.trigger_using":           {"In charge: %s.", "当前负责：%s。"},
		"dash.path.redis":              {"the shared trigger (Redis)", "共享触发器（Redis）"},
		"dash.path.database":           {"the database", "数据库"},
		"dash.trigger.none":            {"No shared trigger (Redis) is configured: each process's timer fires the deadlines it knows of, and the database sweep fires the rest.", "未配置共享触发器（Redis）：各进程的定时器触发自己知道的截止时间，其余由数据库巡检触发。"},
		"dash.trigger.auto_shared":     {"Mode auto: the shared trigger answers and holds every pending deadline, so it fires them on time; the database sweep stays the safety net.", "自动模式：共享触发器响应正常且持有全部待触发的截止时间，由它准时触发；数据库巡检作为兜底。"},
		"dash.trigger.auto_degraded":   {"Mode auto: the shared trigger is failing, so the database sweep has taken over on its faster beat until the trigger answers again and is seeded again from the database.", "自动模式：共享触发器出错，数据库巡检以更快的节奏接管，直到触发器恢复响应并从数据库重新填充。"},
		"dash.trigger.auto_stale":      {"Mode auto: the shared trigger answers but may lack deadlines set while it was not in charge; the database is in charge until it has been seeded again.", "自动模式：共享触发器有响应，但可能缺少它不在岗期间设置的截止时间；在从数据库重新填充之前由数据库负责。"},
		"dash.trigger.forced_shared":   {"Mode shared, forced by an operator: the shared trigger is in charge whatever it answers; the sweep keeps its usual beat.", "共享模式（操作员强制）：无论共享触发器是否响应都由它负责；巡检保持正常节奏。"},
		"dash.trigger.forced_database": {"Mode database, forced by an operator: the shared trigger is left alone and the database sweep fires on its faster beat.", "数据库模式（操作员强制）：不使用共享触发器，数据库巡检以更快的节奏触发。"},
		"dash.trigger.error":           {"Its last error: %s", "最近一次错误：%s"},
		"dash.trigger_view":            {"As this process sees it.", "本进程视角。"},
	})
}

// dashCategories are the kinds of review the dashboard tells apart, in the
// order they stack: the queue's taxonomy.
var dashCategories = categories

// dashCategory is the category of a review by its reason, as the queue
// tells it (categorize) from what the reason says: the dashboard reads no
// delivery or order per review.
func dashCategory(reason string) string { return categorize(failure{Reason: reason}) }

// dashData is the dashboard's page.
type dashData struct {
	Drawn      string
	Exceptions dashExceptions
	Lag        dashLag
	Backlogs   []dashBacklog
	Trigger    dashTrigger
}

type dashExceptions struct {
	Unavailable bool
	Chart       template.HTML
	ByKind      template.HTML
	Total       string
	Notes       []string // what the bounds cut short
}

type dashLag struct {
	Rows  []dashLagRow
	Chart template.HTML // empty: no closes in the last hour
}

type dashLagRow struct{ Window, Closes, P50, P99, Max string }

type dashBacklog struct {
	Name, Value, Detail string
	Unavailable         bool
}

type dashTrigger struct {
	Using string
	Why   []string
}

func (c *Console) dashboard(w http.ResponseWriter, r *http.Request) {
	op := operatorOf(r)
	lang, loc := langOf(r, op.Lang), zoneOf(op.TimeZone)
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	now := c.clock.Now()
	d := dashData{
		Drawn:      t(lang, "dash.drawn", when(now, loc)),
		Exceptions: c.dashExceptions(ctx, lang, loc, now),
		Lag:        dashLagOf(lang, c.cfg.Engine.CloseLag(time.Hour), c.cfg.Engine.CloseLag(24*time.Hour)),
		Backlogs:   c.dashBacklogs(ctx, lang, loc, now),
		Trigger:    dashTriggerOf(lang, c.cfg.Engine.TriggerStatus()),
	}
	c.render(w, r, "dashboard", d)
}

// dashExceptions counts, per hour of the operator's zone over the last 24
// (the current one last), the reviews created, by kind, and the orders
// created.
func (c *Console) dashExceptions(ctx context.Context, lang string, loc *time.Location, now time.Time) dashExceptions {
	var out dashExceptions
	local := now.In(loc)
	end := time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), 0, 0, 0, loc).Add(time.Hour)
	from := end.Add(-24 * time.Hour)

	reviews, rc, err := dashReviewHours(ctx, c.cfg.Engine.Reviews, from, 24, dashBound)
	if err != nil {
		c.log.Error("console: dashboard: listing reviews", "err", err)
		return dashExceptions{Unavailable: true}
	}
	orders, oc, err := dashOrderHours(ctx, c.cfg.Engine.Orders, from, 24, dashBound, dashPage)
	if err != nil {
		c.log.Error("console: dashboard: listing orders", "err", err)
		return dashExceptions{Unavailable: true}
	}
	nReviews, nOrders := dashCount(lang, "review", rc.N), dashCount(lang, "order", oc.N)
	if !rc.Cut.IsZero() {
		nReviews = dashCountMore(lang, "review", rc.N)
		out.Notes = append(out.Notes, t(lang, "dash.cut_reviews", dashNum(dashBound), when(rc.Cut, loc)))
	}
	if !oc.Cut.IsZero() {
		nOrders = dashCountMore(lang, "order", oc.N)
		out.Notes = append(out.Notes, t(lang, "dash.cut_orders", dashNum(dashBound), when(oc.Cut, loc)))
	}

	byKind := make([]int64, len(dashCategories))
	names := make([]string, len(dashCategories))
	for i, k := range dashCategories {
		names[i] = t(lang, "cat."+k)
	}
	tc := timeChart{Title: t(lang, "dash.exceptions_chart"), Series: names, Unit: t(lang, "dash.axis_reviews"),
		LineName: t(lang, "dash.rate_line"), LineUnit: t(lang, "dash.axis_rate")}
	for i := range 24 {
		start := from.Add(time.Duration(i) * time.Hour)
		st := step{Values: reviews[i]}
		if i%3 == 0 {
			st.Label = start.In(loc).Format("15:04")
		}
		var n int64
		var kinds []string
		for k, v := range reviews[i] {
			n += v
			byKind[k] += v
			if v > 0 {
				kinds = append(kinds, names[k]+" "+dashNum(v))
			}
		}
		rate := t(lang, "dash.rate_none")
		switch {
		case !rc.complete(start) || !oc.complete(start):
			rate = t(lang, "dash.rate_partial")
		case orders[i] > 0:
			st.Line, st.HasLine = float64(n)*100/float64(orders[i]), true
			rate = t(lang, "dash.rate", dashRate(n, orders[i]))
		}
		what := dashCount(lang, "review", n)
		if len(kinds) > 0 {
			what = t(lang, "dash.tip_kinds", what, strings.Join(kinds, t(lang, "dash.list_sep")))
		}
		st.Tip = t(lang, "dash.tip", start.In(loc).Format("15:04"), start.Add(time.Hour).In(loc).Format("15:04"),
			what, dashCount(lang, "order", orders[i]), rate)
		tc.Steps = append(tc.Steps, st)
	}
	out.Chart = timeSeriesChart(tc)

	bars := make([]bar, len(dashCategories))
	for k := range dashCategories {
		bars[k] = bar{Label: names[k], Value: byKind[k], Note: dashCount(lang, "review", byKind[k])}
	}
	out.ByKind = barChart(t(lang, "dash.by_kind_chart"), bars)
	rate := t(lang, "dash.rate_none")
	switch {
	case !rc.Cut.IsZero() || !oc.Cut.IsZero():
		rate = t(lang, "dash.rate_partial")
	case oc.N > 0:
		rate = t(lang, "dash.rate", dashRate(rc.N, oc.N))
	}
	out.Total = t(lang, "dash.total", nReviews, nOrders, rate)
	return out
}

// dashLagOf shows the close lags of the last hour and day, and the last
// hour's histogram.
func dashLagOf(lang string, hour, day engine.LagSummary) dashLag {
	row := func(name string, s engine.LagSummary) dashLagRow {
		r := dashLagRow{Window: t(lang, name), Closes: dashCount(lang, "close", s.Count), P50: "—", P99: "—", Max: "—"}
		if s.Count > 0 {
			r.P50, r.P99, r.Max = dashDuration(lang, s.P50), dashDuration(lang, s.P99), dashDuration(lang, s.Max)
		}
		return r
	}
	out := dashLag{Rows: []dashLagRow{row("dash.last_hour", hour), row("dash.last_day", day)}}
	var bars []bar
	for _, b := range hour.Bins {
		from, to := dashLagGroup(b)
		label := dashDuration(lang, from) + "–" + dashDuration(lang, to)
		switch {
		case b.From == 0:
			label = t(lang, "dash.lag_below", dashDuration(lang, to))
		case b.To == 0:
			label = t(lang, "dash.lag_above", dashDuration(lang, from))
		}
		if n := len(bars); n > 0 && bars[n-1].Label == label {
			bars[n-1].Value += b.Count
		} else {
			bars = append(bars, bar{Label: label, Value: b.Count})
		}
	}
	for i := range bars {
		bars[i].Note = dashCount(lang, "close", bars[i].Value)
	}
	out.Chart = barChart(t(lang, "dash.lag_chart"), bars)
	return out
}

// dashLagGroup is the group of a histogram bin on the chart: bins are put
// together in steps of 1, 2 and 5 of each decade (which are bounds of the
// engine's bins), so that the chart has a bar for each and round labels.
func dashLagGroup(b engine.LagBin) (from, to time.Duration) {
	if b.From == 0 || b.To == 0 {
		return b.From, b.To
	}
	p := time.Duration(1)
	for p*10 <= b.From {
		p *= 10
	}
	switch m := b.From / p; {
	case m < 2:
		return p, 2 * p
	case m < 5:
		return 2 * p, 5 * p
	}
	return 5 * p, 10 * p
}

// dashBacklogs counts what waits: due orders, deliveries, reviews and
// payments that are not done.
func (c *Console) dashBacklogs(ctx context.Context, lang string, loc *time.Location, now time.Time) []dashBacklog {
	var out []dashBacklog
	failed := func(name, what string, err error) {
		c.log.Error("console: dashboard: "+what, "err", err)
		out = append(out, dashBacklog{Name: t(lang, name), Unavailable: true})
	}
	if n, err := c.cfg.Store.OrderCountDue(ctx, now); err != nil {
		failed("dash.due_open", "counting due orders", err)
	} else {
		out = append(out, dashBacklog{Name: t(lang, "dash.due_open"), Value: dashCount(lang, "order", n), Detail: t(lang, "dash.due_open_help")})
	}
	if n, err := c.cfg.Store.DeliveryCount(ctx); err != nil {
		failed("dash.deliveries_pending", "counting deliveries", err)
		failed("dash.deliveries_dead", "counting deliveries", err)
	} else {
		pending := dashBacklog{Name: t(lang, "dash.deliveries_pending"), Value: dashCount(lang, "delivery", n.Pending)}
		if at := n.OldestPending; at != nil && !at.After(now) {
			pending.Detail = t(lang, "dash.oldest_pending", when(*at, loc), dashDuration(lang, now.Sub(*at).Truncate(time.Second)))
		} else if at != nil {
			pending.Detail = t(lang, "dash.oldest_pending_future", when(*at, loc))
		}
		out = append(out, pending, dashBacklog{Name: t(lang, "dash.deliveries_dead"), Value: dashCount(lang, "delivery", n.Dead),
			Detail: t(lang, "dash.dead_help")})
	}
	if n, more, err := dashOpenReviews(ctx, c.cfg.Engine.Reviews, dashBound); err != nil {
		failed("dash.reviews_open", "counting open reviews", err)
	} else {
		b := dashBacklog{Name: t(lang, "dash.reviews_open"), Value: dashCount(lang, "review", n), Detail: t(lang, "dash.reviews_open_help")}
		if more {
			b.Value = dashCountMore(lang, "review", dashBound)
			b.Detail += " " + t(lang, "dash.counted_to", dashNum(dashBound))
		}
		out = append(out, b)
	}
	for _, st := range []lapse.PaymentStatus{lapse.PaymentLate, lapse.PaymentRefunding, lapse.PaymentReview} {
		name := "dash.payments_" + string(st)
		n, sums, more, err := dashPayments(ctx, c.cfg.Store.PaymentList, st, dashBound, dashPage)
		if err != nil {
			failed(name, "listing payments "+string(st), err)
			continue
		}
		b := dashBacklog{Name: t(lang, name), Value: dashCount(lang, "payment", n), Detail: t(lang, name+"_help")}
		if more {
			b.Value = dashCountMore(lang, "payment", n)
			b.Detail += " " + t(lang, "dash.counted_to", dashNum(dashBound))
		}
		if len(sums) > 0 {
			b.Value += " · " + dashSums(sums)
		}
		out = append(out, b)
	}
	return out
}

// dashSums shows amounts by currency, in the currencies' order.
func dashSums(sums map[string]int64) string {
	var out []string
	for _, cur := range slices.Sorted(maps.Keys(sums)) {
		out = append(out, lapse.Money(sums[cur], cur))
	}
	return strings.Join(out, ", ")
}

// dashTriggerOf says in words which path fires deadlines and why.
func dashTriggerOf(lang string, st engine.TriggerStatus) dashTrigger {
	out := dashTrigger{Using: t(lang, "dash.trigger_using", t(lang, "dash.path."+cmp.Or(st.Using, "database")))}
	why := "dash.trigger.none"
	switch {
	case !st.Configured:
	case st.Mode == engine.TriggerShared:
		why = "dash.trigger.forced_shared"
	case st.Mode == engine.TriggerDatabase:
		why = "dash.trigger.forced_database"
	case st.Using == string(engine.TriggerShared):
		why = "dash.trigger.auto_shared"
	case st.Degraded:
		why = "dash.trigger.auto_degraded"
	default:
		why = "dash.trigger.auto_stale"
	}
	out.Why = append(out.Why, t(lang, why))
	if st.Reason != "" {
		out.Why = append(out.Why, t(lang, "dash.trigger.error", st.Reason))
	}
	out.Why = append(out.Why, t(lang, "dash.trigger_view"))
	return out
}

// dashNum shows n with thousands separators.
func dashNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// dashCount shows n of unit ("order", "review", …) in lang.
func dashCount(lang, unit string, n int64) string {
	key := "dash.unit." + unit + "_n"
	if n == 1 {
		key = "dash.unit." + unit
	}
	return t(lang, key, dashNum(n))
}

// dashCountMore shows "n+" of unit: a count a bound cut short.
func dashCountMore(lang, unit string, n int64) string {
	return t(lang, "dash.unit."+unit+"_n", dashNum(n)+"+")
}

// dashRate shows reviews per 100 orders to one decimal.
func dashRate(reviews, orders int64) string {
	tenths := (reviews*1000 + orders/2) / orders
	return dashNum(tenths/10) + "." + strconv.FormatInt(tenths%10, 10)
}

// dashDuration shows d with its unit in lang: µs, ms and s with up to a
// decimal or two, then minutes and seconds, then hours and minutes.
func dashDuration(lang string, d time.Duration) string {
	dec := func(v float64, places int) string { return strconv.FormatFloat(v, 'f', places, 64) }
	trim := func(s string) string {
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	switch {
	case d < time.Millisecond:
		return t(lang, "dash.dur.us", trim(dec(float64(d)/1e3, 0)))
	case d < time.Second:
		return t(lang, "dash.dur.ms", trim(dec(float64(d)/1e6, 1)))
	case d < time.Minute:
		return t(lang, "dash.dur.s", trim(dec(float64(d)/1e9, 2)))
	case d < time.Hour:
		return t(lang, "dash.dur.min", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return t(lang, "dash.dur.h", int(d/time.Hour), int(d%time.Hour/time.Minute))
}
