package console

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// orderData is the order page's data: the order, its one timeline, what
// waits for an operator on it, and the actions that make sense for it now
// (the template shows each only to a role that may take it).
type orderData struct {
	Missing  string // the order_no asked for, when there is no such order
	Order    *lapse.Order
	StateDoc string // what the flow says of the order's state
	Metadata string // indented
	Timeline []entry
	Reviews  []orderReview     // open ones
	Dead     []*lapse.Delivery // deliveries an operator may revive
	Actions  orderActions
}

// orderReview is an open review of the order with its category.
type orderReview struct {
	*lapse.Review
	Category string
}

// orderActions says which actions make sense for the order in its state.
type orderActions struct {
	// Retry is the API route that retries what automation gave up on
	// (compensation, or a group's charges); "" when the state has none.
	Retry      string
	RetryScope string // what Retry needs
	RetryGroup bool   // Retry charges a group buy's members
	// Refundable is what is left to refund of the applied payment, when the
	// state takes a refund; 0: no refund.
	Refundable int64
	RefundText string // Refundable in major units, the form's default
	RefundKey  string // the Idempotency-Key of the refund form, made for this rendering
	Close      bool   // a manual close ends the order in its state ((*lapse.Flow).ClosableByHand)
	CloseOff   bool   // Close, but the console has no closer
}

// orderPage is one order: its data, its timeline and its actions.
func (c *Console) orderPage(w http.ResponseWriter, r *http.Request) {
	no := r.PathValue("order_no")
	ctx := r.Context()
	e := c.cfg.Engine
	o, err := e.Order(ctx, no)
	if errors.Is(err, lapse.ErrOrderNotFound) {
		c.renderStatus(w, r, http.StatusNotFound, "order", orderData{Missing: no})
		return
	}
	if err != nil {
		c.fail(w, "the order could not be read", err)
		return
	}
	d := orderData{Order: o}
	flow := e.Flow(o.Flow)
	if flow != nil {
		if st := flow.State(o.State); st != nil {
			d.StateDoc = st.Doc
		}
	}
	if len(o.Metadata) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, o.Metadata, "", "  ") == nil {
			d.Metadata = buf.String()
		} else {
			d.Metadata = string(o.Metadata)
		}
	}
	op := operatorOf(r)
	tl, err := c.timeline(ctx, langOf(r, op.Lang), zoneOf(op.TimeZone), o, flow)
	if err != nil {
		c.fail(w, "the order's timeline could not be read", err)
		return
	}
	d.Timeline, d.Dead = tl.entries, tl.dead
	for _, rv := range tl.reviews {
		if rv.ResolvedAt == nil {
			d.Reviews = append(d.Reviews, orderReview{Review: rv, Category: categorize(tl.failureOf(rv, o, flow))})
		}
	}
	if flow != nil {
		d.Actions = c.actionsFor(o, flow, tl)
	}
	c.render(w, r, "order", d)
}

// actionsFor says which actions make sense for o now.
func (c *Console) actionsFor(o *lapse.Order, flow *lapse.Flow, tl *timelineData) orderActions {
	var a orderActions
	if ev := retryEvent(flow); ev != "" && flow.Transition(o.State, ev) != nil {
		a.Retry, a.RetryScope, a.RetryGroup = retryRoute(o, flow)
	}
	if flow.Refunds.Start != "" && flow.Transition(o.State, flow.Refunds.Start) != nil {
		var applied []*lapse.Payment
		for _, p := range tl.payments {
			if p.Status == lapse.PaymentApplied {
				applied = append(applied, p)
			}
		}
		if len(applied) == 1 { // the engine refunds the one payment that paid the order
			left := applied[0].Amount
			for _, rf := range tl.refunds {
				if rf.Status != lapse.OrderRefundFailed {
					left -= rf.Amount
				}
			}
			if left > 0 {
				a.Refundable, a.RefundText, a.RefundKey = left, majorUnits(left, o.Currency), newRefundKey()
			}
		}
	}
	// A manual close fires the state's deadline event now; offered only
	// where a manual close does, as the API judges it
	// ((*lapse.Flow).ClosableByHand): a wait for payment that the deadline
	// ends, not an open group buy (closing it early would charge its
	// members) nor a paid order whose state has a deadline of its own (a
	// shipped order confirmed received), which the API refuses to close.
	if flow.ClosableByHand(o.State) {
		a.Close, a.CloseOff = true, c.cfg.Closer == nil
	}
	return a
}

// retryRoute is the API route that retries what automation gave up on for
// o, the scope it needs, and whether it retries a group buy's charges.
func retryRoute(o *lapse.Order, flow *lapse.Flow) (path, scope string, group bool) {
	esc := url.PathEscape(o.OrderNo)
	if flow != nil && flow.Group.Retry != "" {
		return "/v1/groups/" + esc + "/retry", access.ScopePaymentsWrite, true
	}
	return "/v1/orders/" + esc + "/retry", access.ScopeOperationsWrite, false
}

// retryEvent is the event of flow's operator retry, "" when it has none.
func retryEvent(flow *lapse.Flow) lapse.Event {
	if flow.Group.Retry != "" {
		return flow.Group.Retry
	}
	return flow.Issues.Retry
}

// majorUnits is amount as an operator types it back: money's decimal
// without the currency's code.
func majorUnits(amount int64, currency string) string {
	return strings.TrimSuffix(lapse.Money(amount, currency), " "+currency)
}

// newRefundKey is a fresh Idempotency-Key for one refund form: a double
// submit of the form sends it twice, and the engine refunds once.
func newRefundKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "console-" + hex.EncodeToString(b)
}

func init() {
	addMessages(map[string]msg{
		"order.title":          {"Order %v", "订单 %v"},
		"order.missing":        {"No order %q.", "订单 %q 不存在。"},
		"order.back":           {"Back to the review queue", "返回复核队列"},
		"order.data":           {"Order", "订单信息"},
		"order.no":             {"Order no", "订单号"},
		"order.flow":           {"Flow", "流程"},
		"order.state":          {"State", "状态"},
		"order.amount":         {"Amount", "金额"},
		"order.user":           {"User", "用户"},
		"order.items":          {"Items", "商品"},
		"order.coupon":         {"Coupon", "优惠券"},
		"order.metadata":       {"Metadata", "元数据"},
		"order.deadline":       {"Deadline", "截止时间"},
		"order.deadline_ended": {"(the order ended at this deadline)", "（订单在此截止时间结束）"},
		"order.pay_by":         {"Pay by", "最晚支付时间"},
		"order.intent":         {"Customer started paying", "客户开始支付"},
		"order.version":        {"Version", "版本"},
		"order.created":        {"Created", "创建时间"},
		"order.updated":        {"Updated", "更新时间"},
		"order.closed":         {"Closed", "关闭时间"},
		"order.none":           {"none", "无"},
		"order.reviews":        {"Waiting for an operator", "等待人工处理"},
		"order.review":         {"Review #%v", "复核 #%v"},
		"order.timeline":       {"Timeline", "时间线"},
		"order.timeline_at":    {"When", "时间"},
		"order.kind":           {"Kind", "类型"},
		"order.what":           {"What", "内容"},
		"order.empty":          {"Nothing recorded yet.", "暂无记录。"},
	})
}
