package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// The queue's bounds: a page reads at most this much, and says so when
// there is more.
const (
	maxQueueReviews = 2000 // open reviews, the newest first
	maxQueueOrders  = 1000 // orders of each state that waits for an operator
	maxQueueRows    = 500  // rows shown after the filters
	maxQueueHeld    = 200  // payments held without their order, in review
)

// queueAges are the age filters: older than each.
var queueAges = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}

// queueRow is one thing automation gave up on.
type queueRow struct {
	OrderNo  string
	Flow     string
	State    lapse.State
	Category string
	Reason   string
	Amount   int64
	Currency string
	Since    time.Time // when it came to the queue: the review's, or the order's last change
	Age      string
	ReviewID int64 // 0: an order waiting without a review (a failed group buy)
	// Delivery is the dead delivery's status now, when an operator revived
	// it since ("pending", "done"); "" while it is dead or there is none.
	Delivery lapse.DeliveryStatus
}

// queueFilter is the queue's GET form.
type queueFilter struct {
	Category, Flow, Age, Min string
}

// Query is the queue's URL with f's filters but category cat.
func (f queueFilter) Query(cat string) string {
	v := url.Values{}
	for k, s := range map[string]string{"category": cat, "flow": f.Flow, "age": f.Age, "min": f.Min} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return Prefix
	}
	return Prefix + "?" + v.Encode()
}

// queueCount is one category's count, a link that filters by it.
type queueCount struct {
	Category string
	N        int
	URL      string
	Active   bool
}

// queueData is the queue page's data.
type queueData struct {
	Filter     queueFilter
	Rows       []queueRow
	Matching   int // rows the filters let through, before maxQueueRows
	Counts     []queueCount
	Total      int // rows of every category under the other filters
	AllURL     string
	Flows      []string
	Categories []string
	Ages       []string
	Truncated  bool   // there was more to read than the bounds allow
	Bounds     [2]int // maxQueueReviews, maxQueueOrders, for the page to say
	Cut        bool   // more rows matched than are shown
	MinError   string // the min filter is not an amount
	// Held are the payments held without their order that are on the
	// desk (lapse.HeldPayment in review), oldest first, at most
	// maxQueueHeld: they have no order, so they stand apart from the rows.
	// An operator refunds or dismisses one through the API.
	Held     []*lapse.HeldPayment
	HeldMore bool
}

// queue is the review queue (seed 003's 人工复核工作台): every open review
// and every order waiting for an operator in a state its flow retries from.
func (c *Console) queue(w http.ResponseWriter, r *http.Request) {
	lang := langOf(r, operatorOf(r).Lang)
	q := r.URL.Query()
	d := queueData{Filter: queueFilter{Category: q.Get("category"), Flow: q.Get("flow"), Age: q.Get("age"), Min: q.Get("min")},
		Categories: categories, Ages: []string{"1h", "24h", "7d"}, Bounds: [2]int{maxQueueReviews, maxQueueOrders}}
	for _, f := range c.cfg.Engine.Flows() {
		d.Flows = append(d.Flows, f.Name)
	}
	if !slices.Contains(categories, d.Filter.Category) {
		d.Filter.Category = ""
	}
	if _, ok := queueAges[d.Filter.Age]; !ok {
		d.Filter.Age = ""
	}
	// An age filter reads from its cutoff back: the oldest reviews, which
	// it asks for, are the ones the bound would otherwise leave unread
	// when more than it are open.
	var olderThan time.Time
	if age, ok := queueAges[d.Filter.Age]; ok {
		olderThan = c.clock.Now().Add(-age)
	}
	rows, truncated, err := c.queueRows(r.Context(), olderThan)
	if err != nil {
		c.fail(w, "the review queue could not be read", err)
		return
	}
	d.Truncated = truncated
	var minimum *minAmount
	if d.Filter.Min != "" {
		m, err := parseMin(d.Filter.Min)
		if err != nil {
			d.MinError = err.text(lang)
		} else {
			minimum = &m
		}
	}
	now := c.clock.Now()
	counts := map[string]int{}
	for _, row := range rows {
		if !queueKeeps(&d, minimum, row, now) {
			continue
		}
		d.Total++
		counts[row.Category]++
		if d.Filter.Category != "" && row.Category != d.Filter.Category {
			continue
		}
		d.Matching++
		if len(d.Rows) < maxQueueRows {
			row.Age = ageText(lang, now.Sub(row.Since))
			d.Rows = append(d.Rows, row)
		}
	}
	d.Cut = d.Matching > len(d.Rows)
	for _, cat := range categories {
		if counts[cat] > 0 || cat == d.Filter.Category {
			d.Counts = append(d.Counts, queueCount{Category: cat, N: counts[cat], URL: d.Filter.Query(cat), Active: cat == d.Filter.Category})
		}
	}
	d.AllURL = d.Filter.Query("")
	held, err := c.cfg.Engine.HeldPayments(r.Context(), &lapse.HeldPaymentListParams{
		Statuses: []lapse.HeldPaymentStatus{lapse.HeldReview}, Limit: maxQueueHeld + 1})
	if err != nil {
		c.fail(w, "the payments held without their order could not be read", err)
		return
	}
	d.HeldMore = len(held) > maxQueueHeld
	d.Held = held[:min(len(held), maxQueueHeld)]
	c.render(w, r, "queue", d)
}

// queueKeeps reports whether row passes d's filters other than the
// category.
func queueKeeps(d *queueData, minimum *minAmount, row queueRow, now time.Time) bool {
	if d.Filter.Flow != "" && row.Flow != d.Filter.Flow {
		return false
	}
	if age, ok := queueAges[d.Filter.Age]; ok && now.Sub(row.Since) < age {
		return false
	}
	return minimum == nil || minimum.allows(row.Amount, row.Currency)
}

// queueRows reads what the queue shows, newest first, and whether there was
// more than the bounds let it read. Unless olderThan is zero, the open
// reviews are read from those created at olderThan back.
func (c *Console) queueRows(ctx context.Context, olderThan time.Time) ([]queueRow, bool, error) {
	e := c.cfg.Engine
	p := &lapse.ReviewListParams{Open: true, Limit: maxQueueReviews + 1}
	if !olderThan.IsZero() {
		p.Before = &lapse.ReviewCursor{CreatedAt: olderThan, ID: math.MaxInt64}
	}
	reviews, err := e.Reviews(ctx, p)
	if err != nil {
		return nil, false, err
	}
	truncated := len(reviews) > maxQueueReviews
	reviews = reviews[:min(len(reviews), maxQueueReviews)]
	orders := map[string]*lapse.Order{}
	order := func(no string) (*lapse.Order, error) {
		if o, ok := orders[no]; ok {
			return o, nil
		}
		o, err := e.Order(ctx, no)
		orders[no] = o
		return o, err
	}
	var rows []queueRow
	for _, rv := range reviews {
		o, err := order(rv.OrderNo)
		if err != nil {
			return nil, false, fmt.Errorf("review %d: %w", rv.ID, err)
		}
		f := failure{Reason: rv.Reason, Flow: e.Flow(o.Flow), State: o.State}
		row := queueRow{OrderNo: o.OrderNo, Flow: o.Flow, State: o.State, Reason: rv.Reason, Amount: o.Amount,
			Currency: o.Currency, Since: rv.CreatedAt, ReviewID: rv.ID}
		if rv.DeliveryID != 0 {
			d, err := c.cfg.Store.DeliveryGet(ctx, rv.DeliveryID)
			switch {
			case err == nil:
				f.Subscriber, f.Error, f.Unknown = d.Subscriber, d.LastError, d.Unknown
				if d.Status != lapse.DeliveryDead {
					row.Delivery = d.Status
				}
			case !errors.Is(err, lapse.ErrDeliveryNotFound):
				return nil, false, err
			}
		}
		row.Category = categorize(f)
		rows = append(rows, row)
	}
	waiting, more, err := c.waitingOrders(ctx, reviews)
	if err != nil {
		return nil, false, err
	}
	rows = append(rows, waiting...)
	slices.SortStableFunc(rows, func(a, b queueRow) int { return b.Since.Compare(a.Since) })
	return rows, truncated || more, nil
}

// waitingOrders are the orders in a state their flow's operator retry
// leaves from (a failed group buy, a membership in manual review) that no
// review stands for: a failed group buy always (the engine writes it none),
// any other when no review of it was written since it entered the state
// (a membership a refund sent to manual review).
func (c *Console) waitingOrders(ctx context.Context, reviews []*lapse.Review) ([]queueRow, bool, error) {
	e := c.cfg.Engine
	open := map[string]bool{}
	for _, rv := range reviews {
		open[rv.OrderNo] = true
	}
	var rows []queueRow
	more := false
	for _, flow := range e.Flows() {
		for _, st := range waitingStates(flow) {
			os, err := e.Orders(ctx, &lapse.OrderListParams{Flow: flow.Name, State: st, Limit: maxQueueOrders + 1})
			if err != nil {
				return nil, false, err
			}
			more = more || len(os) > maxQueueOrders
			group := flow.Group.Failed != "" && into(flow, flow.Group.Failed, st)
			for _, o := range os[:min(len(os), maxQueueOrders)] {
				if !group {
					if open[o.OrderNo] {
						continue
					}
					rs, err := e.Reviews(ctx, &lapse.ReviewListParams{OrderID: o.ID, Limit: 1})
					if err != nil {
						return nil, false, err
					}
					if len(rs) > 0 && !rs[0].CreatedAt.Before(o.UpdatedAt) {
						continue
					}
				}
				f := failure{Flow: flow, State: o.State}
				if ts, err := e.Transitions(ctx, o.OrderNo); err == nil && len(ts) > 0 {
					last := ts[len(ts)-1]
					f.Reason, f.Event = last.Reason, last.Event
				} else if err != nil {
					return nil, false, err
				}
				rows = append(rows, queueRow{OrderNo: o.OrderNo, Flow: o.Flow, State: o.State, Category: categorize(f), Reason: f.Reason,
					Amount: o.Amount, Currency: o.Currency, Since: o.UpdatedAt})
			}
		}
	}
	return rows, more, nil
}

// waitingStates are the states of flow that wait for an operator: those its
// operator retry (Issues.Retry, Group.Retry) moves an order out of.
func waitingStates(flow *lapse.Flow) []lapse.State {
	var out []lapse.State
	for _, t := range flow.Transitions {
		if t.Event != "" && (t.Event == flow.Issues.Retry || t.Event == flow.Group.Retry) && !slices.Contains(out, t.From) {
			out = append(out, t.From)
		}
	}
	return out
}

// fail answers a page that could not be read.
func (c *Console) fail(w http.ResponseWriter, what string, err error) {
	c.log.Error("console: "+what, "err", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}

// ageText shows a duration as an operator reads an age: the two largest
// units.
func ageText(lang string, d time.Duration) string {
	switch {
	case d < time.Minute:
		return t(lang, "queue.age_now")
	case d < time.Hour:
		return t(lang, "queue.age_m", int(d/time.Minute))
	case d < 24*time.Hour:
		return t(lang, "queue.age_hm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return t(lang, "queue.age_dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func init() {
	addMessages(map[string]msg{
		"queue.title":      {"Review queue", "复核队列"},
		"queue.intro":      {"Everything automation gave up on: dead deliveries, payments in review, memberships in manual review, refunds that failed, failed group buys.", "自动处理已放弃的一切：投递失败、待复核的支付、人工复核中的会员订单、失败的退款、失败的拼团。"},
		"queue.all":        {"All", "全部"},
		"queue.category":   {"Category", "类别"},
		"queue.flow":       {"Flow", "流程"},
		"queue.age":        {"Older than", "早于"},
		"queue.any":        {"any", "不限"},
		"queue.age.1h":     {"1 hour", "1 小时"},
		"queue.age.24h":    {"24 hours", "24 小时"},
		"queue.age.7d":     {"7 days", "7 天"},
		"queue.min":        {"Amount at least", "金额不低于"},
		"queue.filter":     {"Filter", "筛选"},
		"queue.reset":      {"Clear", "清除"},
		"queue.order_no":   {"Order", "订单号"},
		"queue.state":      {"State", "状态"},
		"queue.reason":     {"Reason", "原因"},
		"queue.amount":     {"Amount", "金额"},
		"queue.waiting":    {"Waiting", "已等待"},
		"queue.since":      {"Since", "进入队列"},
		"queue.no_review":  {"no review: the order waits in this state", "无复核记录：订单停留在此状态"},
		"queue.revived":    {"delivery revived: %v", "投递已重试：%v"},
		"queue.truncated":  {"There is more than the queue reads at once (the newest %d open reviews and %d orders of each waiting state): older items are not shown.", "待处理项超过单次读取上限（最新的 %d 条复核和每个等待状态 %d 个订单），更早的未显示。"},
		"queue.cut":        {"Showing %d of %d matching items; narrow the filters to see the rest.", "显示 %d / %d 条匹配项；请缩小筛选范围查看其余。"},
		"queue.min_error":  {"The amount filter was ignored: %v", "金额筛选已忽略：%v"},
		"queue.empty":      {"Nothing waits for an operator.", "没有等待人工处理的订单。"},
		"queue.none_match": {"Nothing matches these filters.", "没有符合筛选条件的项。"},
		"queue.age_now":    {"under a minute", "不到 1 分钟"},
		"queue.age_m":      {"%dm", "%d 分钟"},
		"queue.age_hm":     {"%dh %dm", "%d 小时 %d 分钟"},
		"queue.age_dh":     {"%dd %dh", "%d 天 %d 小时"},
		"queue.held_title": {"Payments held without their order", "无对应订单的暂存支付"},
		"queue.held_intro": {"Captured payments whose callback named an order Lapse does not have, and whose order did not come in time (or whose reports contradict each other). Refund one (POST /v1/held-payments/{id}/refund), apply it to its order once that exists (POST /v1/held-payments/{id}/apply) or dismiss it with a note (POST /v1/held-payments/{id}/dismiss); each needs a second factor.", "回调中的订单号在 Lapse 中不存在、且订单未在时限内出现（或回调相互矛盾）的已扣款支付。可退款（POST /v1/held-payments/{id}/refund）、在订单已存在时应用到该订单（POST /v1/held-payments/{id}/apply），或附说明后忽略（POST /v1/held-payments/{id}/dismiss）；每项都需要动态验证码。"},
		"queue.held_id":    {"Id", "编号"},
		"queue.held_txn":   {"Provider / transaction", "支付渠道 / 交易号"},
		"queue.held_more":  {"More are held than shown (the oldest %d).", "暂存支付多于显示的数量（最早的 %d 笔）。"},
	})
}
