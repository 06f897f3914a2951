package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

func init() {
	addMessages(map[string]msg{
		"close.title":          {"Manual close", "手动关单"},
		"close.off":            {"Manual close is not configured on this server.", "此服务未启用手动关单。"},
		"close.choose":         {"Choose the orders one way", "选择订单（三选一）"},
		"close.by_numbers":     {"Order numbers, one per line or comma-separated", "订单号，每行一个或用逗号分隔"},
		"close.by_user":        {"User id", "用户 ID"},
		"close.by_time":        {"Created between (your time zone, %s)", "创建时间范围（你的时区：%s）"},
		"close.from":           {"From (inclusive)", "起（含）"},
		"close.to":             {"To (exclusive)", "止（不含）"},
		"close.or":             {"or", "或"},
		"close.flow":           {"Only the flow", "仅限流程"},
		"close.any_flow":       {"any flow", "全部流程"},
		"close.reason":         {"Reason", "原因"},
		"close.reason_help":    {"Why these orders are closed by hand; it is in every order's audit row.", "手动关单的原因，会写入每个订单的审计记录。"},
		"close.preview":        {"Preview", "预览"},
		"close.preview_title":  {"Preview", "预览结果"},
		"close.count":          {"%d orders will be closed.", "将关闭 %d 个订单。"},
		"close.skipped":        {"%d matched but will not be closed (paid, closed, or not found).", "%d 个匹配订单不会被关闭（已支付、已关闭或不存在）。"},
		"close.sample":         {"The first of them", "前几个订单"},
		"close.needs_approval": {"With your closes of the last 24 hours that is more than %d orders: the close will wait for a second operator's approval.", "连同你最近 24 小时的关单，超过 %d 个订单：关单需等待另一位操作员审批。"},
		"close.confirm":        {"Close these orders", "确认关单"},
		"close.started":        {"Batch %d started.", "批次 %d 已开始。"},
		"close.bad_time":       {"%s is not a date and time.", "%s 不是有效的日期时间。"},
		"close.bad_selection":  {"The selection could not be read; preview again.", "无法读取所选订单，请重新预览。"},
		"close.order_no":       {"Order no.", "订单号"},
		"close.order_flow":     {"Flow", "流程"},
		"close.state":          {"State", "状态"},
		"close.amount":         {"Amount", "金额"},
		"close.user":           {"User", "用户"},
		"close.created":        {"Created", "创建时间"},
		"close.batches":        {"Recent batches", "最近的批次"},
		"close.batch":          {"Batch %d", "批次 %d"},
		"close.batch_id":       {"Batch", "批次"},
		"close.status":         {"Status", "状态"},
		"close.total":          {"Total", "总数"},
		"close.closed":         {"Closed", "已关闭"},
		"close.skipped_n":      {"Skipped", "已跳过"},
		"close.failed":         {"Failed", "失败"},
		"close.created_by":     {"Started by", "发起人"},
		"close.approval":       {"Approval", "审批"},
		"close.finished":       {"Finished", "完成时间"},
		"close.selection":      {"Selection", "选择条件"},
		"close.progress":       {"Progress", "进度"},
		"close.refreshing":     {"This page refreshes every 2 seconds while the batch runs.", "批次运行期间本页每 2 秒刷新一次。"},
		"close.audit_rows":     {"The batch's audit rows", "该批次的审计记录"},
		"close.back":           {"Back to manual close", "返回手动关单"},
		"close.status.running": {"running", "运行中"},
		"close.status.done":    {"done", "已完成"},
	})
}

// closeForm is the manual close form as the operator filled it in.
type closeForm struct {
	OrderNos string
	UserID   string
	From, To string // datetime-local values, in the operator's zone
	Flow     string
	Reason   string
}

// closeData is the manual close page's data.
type closeData struct {
	Off     bool
	Form    closeForm
	Flows   []string
	Error   string
	Preview *closePreview
	Batches []*lapse.CloseBatch
}

// closePreview is what a close would close, with the selection the
// confirm form carries, as JSON, and the preview's time and count, which
// it carries too, so that what is confirmed is what was previewed: the
// close leaves out orders made since, and closes nothing when more are
// closable than were counted.
type closePreview struct {
	Count, Skipped int64
	Sample         []*lapse.Order
	Selection      string
	SelectionID    string // the preview's selection (closes.Selector.Selection)
	AsOf           string // RFC 3339, to the nanosecond
	NeedsApproval  bool
	Threshold      int64
}

// closeBody is the body of POST /v1/closes and /v1/closes/preview.
type closeBody struct {
	Selector *closes.Selector `json:"selector"`
	Reason   string           `json:"reason"`
	Preview  *previewSeen     `json:"preview,omitempty"`
}

// previewSeen is the preview a close was confirmed from.
type previewSeen struct {
	AsOf      time.Time `json:"as_of"`
	Count     int64     `json:"count"`
	Selection string    `json:"selection"`
}

// recentBatches is how many batches the close page lists.
const recentBatches = 20

func (c *Console) closePage(w http.ResponseWriter, r *http.Request) {
	c.renderClose(w, r, http.StatusOK, closeData{})
}

// renderClose renders the close page with d, adding the flows and the
// recent batches.
func (c *Console) renderClose(w http.ResponseWriter, r *http.Request, status int, d closeData) {
	if c.cfg.Closer == nil {
		c.renderStatus(w, r, status, "close", closeData{Off: true})
		return
	}
	for _, f := range c.cfg.Engine.Flows() {
		d.Flows = append(d.Flows, f.Name)
	}
	var err error
	if d.Batches, err = c.cfg.Closer.Batches(r.Context(), &lapse.CloseBatchListParams{Limit: recentBatches}); err != nil {
		c.failPage(w, r, err)
		return
	}
	c.renderStatus(w, r, status, "close", d)
}

// previewClose shows what the form's selection would close, through the
// API (POST /v1/closes/preview), so that its checks apply.
func (c *Console) previewClose(w http.ResponseWriter, r *http.Request) {
	op := operatorOf(r)
	lang, zone := langOf(r, op.Lang), zoneOf(op.TimeZone)
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	form := closeFormOf(r.PostForm)
	sel, err := form.selector(lang, zone)
	if err != nil {
		c.renderClose(w, r, http.StatusBadRequest, closeData{Form: form, Error: err.Error()})
		return
	}
	o := c.call(r, http.MethodPost, "/v1/closes/preview", closeBody{Selector: sel, Reason: form.Reason}, "")
	if o.Status != http.StatusOK {
		c.renderClose(w, r, o.Status, closeData{Form: form, Error: flashOf(lang, o).Text})
		return
	}
	var pv closes.Preview
	if err := json.Unmarshal(o.Body, &pv); err != nil {
		c.failPage(w, r, err)
		return
	}
	need, err := c.cfg.Access.NeedsApproval(r.Context(), op, 0, pv.Count)
	if err != nil {
		c.failPage(w, r, err)
		return
	}
	raw, _ := json.Marshal(sel) // strings and times: it cannot fail
	d := closeData{Form: form, Preview: &closePreview{Count: pv.Count, Skipped: pv.Skipped, Sample: pv.Sample,
		Selection: string(raw), SelectionID: pv.Selection, AsOf: pv.AsOf.Format(time.RFC3339Nano), NeedsApproval: need, Threshold: c.cfg.Access.Config().ApprovalCount}}
	c.renderClose(w, r, http.StatusOK, d)
}

// startClose asks the API to close the previewed selection (POST
// /v1/closes) with the operator's code: a batch that runs is followed on
// its page, one that waits for a second operator on the approvals page.
func (c *Console) startClose(w http.ResponseWriter, r *http.Request) {
	op := operatorOf(r)
	lang, zone := langOf(r, op.Lang), zoneOf(op.TimeZone)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.refused(w, r, op, fmt.Errorf("the form could not be read: %w", err))
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	reason := r.PostForm.Get("reason")
	var sel closes.Selector
	seen, err := previewOf(r.PostForm)
	if err == nil {
		err = json.Unmarshal([]byte(r.PostForm.Get("selection")), &sel)
	}
	if err != nil {
		c.refused(w, r, op, fmt.Errorf("%s: %w", t(langEN, "close.bad_selection"), err))
		c.renderClose(w, r, http.StatusBadRequest, closeData{Form: closeForm{Reason: reason}, Error: t(lang, "close.bad_selection")})
		return
	}
	o := c.call(r, http.MethodPost, "/v1/closes", closeBody{Selector: &sel, Reason: reason, Preview: seen}, r.PostForm.Get("code"))
	switch {
	case o.Approval != 0:
		setFlash(w, r, Prefix+"approvals", flashOf(lang, o))
		return
	case o.Status == http.StatusAccepted:
		var b struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(o.Body, &b); err != nil || b.ID == 0 {
			c.failPage(w, r, errors.New("console: POST /v1/closes answered 202 without a batch"))
			return
		}
		setFlash(w, r, Prefix+"close/"+strconv.FormatInt(b.ID, 10), flash{Kind: "ok", Text: t(lang, "close.started", b.ID)})
		return
	}
	c.renderClose(w, r, o.Status, closeData{Form: formOf(&sel, reason, zone), Error: flashOf(lang, o).Text})
}

// previewOf reads the preview the confirm form carries.
func previewOf(v url.Values) (*previewSeen, error) {
	at, err := time.Parse(time.RFC3339Nano, v.Get("as_of"))
	if err != nil {
		return nil, fmt.Errorf("as_of: %w", err)
	}
	n, err := strconv.ParseInt(v.Get("count"), 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("count %q is not a count", v.Get("count"))
	}
	id := v.Get("selection_id")
	if id == "" {
		return nil, errors.New("selection_id is missing")
	}
	return &previewSeen{AsOf: at, Count: n, Selection: id}, nil
}

// batchData is a close batch's page's data.
type batchData struct {
	*lapse.CloseBatch
	Off bool
}

// Done is how many of the batch's items are settled.
func (d batchData) Done() int64 { return d.Closed + d.Skipped + d.Failed }

// Percent is Done as a whole percentage of Total.
func (d batchData) Percent() int64 {
	if d.Total == 0 {
		return 100
	}
	return d.Done() * 100 / d.Total
}

// Running reports whether the batch is still closing orders.
func (d batchData) Running() bool { return d.Status == lapse.CloseBatchRunning }

func (c *Console) batchPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Closer == nil {
		c.renderStatus(w, r, http.StatusServiceUnavailable, "close_batch", batchData{Off: true})
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	b, err := c.cfg.Closer.Batch(r.Context(), id)
	if errors.Is(err, lapse.ErrAccessNotFound) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.failPage(w, r, err)
		return
	}
	d := batchData{CloseBatch: b}
	if d.Running() {
		w.Header().Set("Refresh", "2")
	}
	c.render(w, r, "close_batch", d)
}

// closeFormOf reads the form.
func closeFormOf(v url.Values) closeForm {
	return closeForm{OrderNos: v.Get("order_nos"), UserID: strings.TrimSpace(v.Get("user_id")),
		From: strings.TrimSpace(v.Get("from")), To: strings.TrimSpace(v.Get("to")),
		Flow: strings.TrimSpace(v.Get("flow")), Reason: v.Get("reason")}
}

// datetimeLocal is the value of an <input type="datetime-local">, with or
// without seconds.
const (
	datetimeLocal        = "2006-01-02T15:04"
	datetimeLocalSeconds = "2006-01-02T15:04:05"
)

// selector is the form's choice as a closes.Selector, its times read in
// zone. Whether it chooses one way, and well, is the API's to say.
func (f closeForm) selector(lang string, zone *time.Location) (*closes.Selector, error) {
	sel := &closes.Selector{UserID: f.UserID, Flow: f.Flow}
	seen := map[string]bool{}
	for _, no := range strings.FieldsFunc(f.OrderNos, func(r rune) bool { return r == ',' || r == '，' || unicode.IsSpace(r) }) {
		if !seen[no] {
			seen[no] = true
			sel.OrderNos = append(sel.OrderNos, no)
		}
	}
	for _, in := range []struct {
		value, label string
		dst          **time.Time
	}{{f.From, t(lang, "close.from"), &sel.From}, {f.To, t(lang, "close.to"), &sel.To}} {
		if in.value == "" {
			continue
		}
		at, err := time.ParseInLocation(datetimeLocal, in.value, zone)
		if err != nil {
			at, err = time.ParseInLocation(datetimeLocalSeconds, in.value, zone)
		}
		if err != nil {
			return nil, errors.New(t(lang, "close.bad_time", in.label))
		}
		*in.dst = &at
	}
	return sel, nil
}

// formOf is the form that chooses what sel chooses, to fill it in again.
func formOf(sel *closes.Selector, reason string, zone *time.Location) closeForm {
	f := closeForm{OrderNos: strings.Join(sel.OrderNos, "\n"), UserID: sel.UserID, Flow: sel.Flow, Reason: reason}
	local := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		if t.Second() != 0 {
			return t.In(zone).Format(datetimeLocalSeconds)
		}
		return t.In(zone).Format(datetimeLocal)
	}
	f.From, f.To = local(sel.From), local(sel.To)
	return f
}
