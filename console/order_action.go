package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

// orderAction takes one action of the order page's forms: POST
// /console/orders/{order_no}/{action}, where action is retry, refund,
// revive, close, resolve or settle (the refund in review a review holds).
// Each is a call of the API route that carries it
// out, with the operator's session and the code the form carries, so that
// the API decides who may, asks for the second factor and four eyes, and
// audits it (a refusal too). The console refuses only what it cannot send:
// a form it cannot read, an order that does not exist, an amount that is not
// one, a delivery or review of another order; those refusals it audits
// itself (refusal.go). It redirects back to the order page with the outcome
// as the flash.
func (c *Console) orderAction(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		c.refused(w, r, operatorOf(r), fmt.Errorf("the form could not be read: %w", err))
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	no, action := r.PathValue("order_no"), r.PathValue("action")
	lang := langOf(r, operatorOf(r).Lang)
	back := Prefix + "orders/" + url.PathEscape(no)
	ctx := r.Context()
	o, err := c.cfg.Engine.Order(ctx, no)
	if errors.Is(err, lapse.ErrOrderNotFound) {
		c.refused(w, r, operatorOf(r), err)
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.fail(w, "the order of an action could not be read", err)
		return
	}
	// refuse refuses the form with text, in the audit log in English.
	refuse := func(text func(lang string) string) {
		c.refused(w, r, operatorOf(r), errors.New(text(langEN)))
		setFlash(w, r, back, flash{Kind: "error", Text: t(lang, "common.error", text(lang))})
	}
	message := func(key string) func(string) string { return func(l string) string { return t(l, key) } }
	notThisOrder := func(kind string, id int64) func(string) string {
		return func(l string) string { return t(l, "order.act.not_this_order", t(l, kind), id) }
	}
	form := r.PostForm
	code := strings.TrimSpace(form.Get("code"))
	esc := url.PathEscape(o.OrderNo)
	var out outcome
	switch action {
	case "retry":
		// Which route is the order's flow's business, not the form's.
		path, _, _ := retryRoute(o, c.cfg.Engine.Flow(o.Flow))
		out = c.call(r, http.MethodPost, path, map[string]string{"reason": form.Get("reason")}, code)
	case "refund":
		amount, err := parseAmount(form.Get("amount"), o.Currency)
		var ae *amountError
		if errors.As(err, &ae) {
			refuse(ae.text)
			return
		}
		if amount <= 0 {
			refuse(message("order.act.refund_zero"))
			return
		}
		key := form.Get("idempotency_key")
		if key == "" {
			refuse(message("order.act.no_key"))
			return
		}
		out = c.callWith(r, http.MethodPost, "/v1/orders/"+esc+"/refunds",
			map[string]any{"amount": amount, "reason": form.Get("reason")}, code, http.Header{"Idempotency-Key": {key}})
	case "revive":
		id, _ := strconv.ParseInt(form.Get("delivery_id"), 10, 64)
		if d, err := c.cfg.Store.DeliveryGet(ctx, id); err != nil || d.OrderNo != o.OrderNo {
			refuse(notThisOrder("tl.kind.delivery", id))
			return
		}
		out = c.call(r, http.MethodPost, "/v1/deliveries/"+strconv.FormatInt(id, 10)+"/retry", nil, code)
	case "close":
		// A manual close of one order rather than the flow's CANCEL event:
		// it fires the state's deadline event as the deadline would, fired
		// by an operator, asks the provider to close a payment the customer
		// started before it closes the order (a CANCEL would not, and a
		// payment that lands after it would be late), keeps the close in
		// the audit log by batch, and counts toward four eyes as closes do.
		out = c.call(r, http.MethodPost, "/v1/closes", map[string]any{
			"selector": closes.Selector{OrderNos: []string{o.OrderNo}}, "reason": form.Get("reason")}, code)
		if out.Status == http.StatusAccepted && out.Approval == 0 {
			var b struct {
				ID int64 `json:"id"`
			}
			_ = json.Unmarshal(out.Body, &b)
			setFlash(w, r, back, flash{Kind: "ok", Text: t(lang, "order.act.close_started", b.ID)})
			return
		}
	case "resolve", "settle":
		id, _ := strconv.ParseInt(form.Get("review_id"), 10, 64)
		rs, err := c.cfg.Engine.Reviews(ctx, &lapse.ReviewListParams{OrderID: o.ID})
		if err != nil {
			c.fail(w, "the reviews of an order could not be read", err)
			return
		}
		if !slices.ContainsFunc(rs, func(rv *lapse.Review) bool { return rv.ID == id }) {
			refuse(notThisOrder("tl.kind.review", id))
			return
		}
		body := map[string]string{"note": form.Get("note")}
		if action == "settle" {
			body["status"] = form.Get("status")
		}
		out = c.call(r, http.MethodPost, "/v1/reviews/"+strconv.FormatInt(id, 10)+"/"+action, body, code)
	default:
		http.NotFound(w, r)
		return
	}
	setFlash(w, r, back, flashOf(lang, out))
}

func init() {
	addMessages(map[string]msg{
		"order.act.title":          {"Actions", "操作"},
		"order.act.none":           {"No action makes sense for this order in its state.", "该订单当前状态下无可执行操作。"},
		"order.act.viewer":         {"Your role may look, not act: the actions are for operators.", "你的角色只能查看，操作需由操作员执行。"},
		"order.act.reason":         {"Reason", "原因"},
		"order.act.retry":          {"Retry the compensation", "重新补偿（重发）"},
		"order.act.retry_help":     {"Runs the issuing (or whatever automation gave up on) again, on its schedule.", "按补偿计划重新执行发卡（或其他被放弃的操作）。"},
		"order.act.retry_group":    {"Retry the group's charges", "重新扣款（拼团）"},
		"order.act.retry_group_h":  {"Charges the members not charged yet, once each.", "对尚未扣款的团员各扣款一次。"},
		"order.act.refund":         {"Refund", "退款"},
		"order.act.refund_help":    {"Up to %v is left to refund. Type the amount in %v, such as 12.50; the whole of it refunds in full.", "可退金额至多 %v。请以 %v 为单位填写金额，如 12.50；填写全部即为全额退款。"},
		"order.act.amount":         {"Amount", "金额"},
		"order.act.refund_zero":    {"A refund is of more than nothing.", "退款金额必须大于零。"},
		"order.act.no_key":         {"The form lost its idempotency key; reload the page.", "表单缺少幂等键，请刷新页面。"},
		"order.act.revive":         {"Revive delivery #%v to %v", "重试投递 #%v（%v）"},
		"order.act.revive_help":    {"Makes the dead delivery pending again, due now, with a fresh retry schedule.", "将失败的投递恢复为待投递，立即执行并重新计算重试计划。"},
		"order.act.close":          {"Close the order", "关单"},
		"order.act.close_help":     {"Closes it as its deadline would, now, through a manual close (the provider is asked to close a payment the customer started first).", "通过手动关单立即按截止规则关闭订单（若客户已发起支付，先请支付渠道关闭该支付）。"},
		"order.act.close_off":      {"Manual close is off on this console.", "此控制台未开启手动关单。"},
		"order.act.close_started":  {"Manual close batch #%v started.", "手动关单批次 #%v 已开始。"},
		"order.act.resolve":        {"Mark review #%v resolved and archive it", "将复核 #%v 标记为已处理并归档"},
		"order.act.settle":         {"Settle the refund of review #%v", "处理复核 #%v 中的退款"},
		"order.act.settle_help":    {"The provider's reports about this refund disagree with Lapse's, or Lapse never asked for it. Look at the provider, then say how it ended; this resolves the review.", "渠道关于该退款的通知与 Lapse 的记录不符，或该退款并非 Lapse 发起。请先到支付渠道核实，再选择结果；提交即处理该复核。"},
		"order.act.settle_done":    {"The money went back (succeeded)", "款项已退回（成功）"},
		"order.act.settle_fail":    {"The money did not go back (failed)", "款项未退回（失败）"},
		"order.act.settle_submit":  {"Settle the refund", "确认退款结果"},
		"order.act.note":           {"Note", "备注"},
		"order.act.code_optional":  {"Authenticator code, if asked", "动态验证码（如需要）"},
		"order.act.not_this_order": {"There is no %v %v of this order.", "该订单没有 %v %v。"},
	})
}
