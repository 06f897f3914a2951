package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	lapsehttp "github.com/lapsehq/lapse/http"
)

func init() {
	addMessages(map[string]msg{
		"approvals.title":            {"Approvals", "审批"},
		"approvals.pending":          {"Waiting for a decision", "待审批"},
		"approvals.decided":          {"Recently decided", "最近已处理"},
		"approvals.id":               {"No.", "编号"},
		"approvals.action":           {"Action", "操作"},
		"approvals.target":           {"Target", "对象"},
		"approvals.amount":           {"Amount", "金额"},
		"approvals.count":            {"Orders", "订单数"},
		"approvals.request":          {"Request", "申请内容"},
		"approvals.at_risk":          {"%s with the order's earlier refunds", "连同该订单此前的退款共 %s"},
		"approvals.maker":            {"Requested by", "申请人"},
		"approvals.reason":           {"Reason", "原因"},
		"approvals.created":          {"Requested at", "申请时间"},
		"approvals.expires":          {"Expires at", "过期时间"},
		"approvals.status":           {"Status", "状态"},
		"approvals.approver":         {"Decided by", "处理人"},
		"approvals.decided_at":       {"Decided at", "处理时间"},
		"approvals.result":           {"Result", "结果"},
		"approvals.decide":           {"Decision", "审批"},
		"approvals.approve":          {"Approve", "批准"},
		"approvals.reject":           {"Reject", "驳回"},
		"approvals.reject_reason":    {"Why not", "驳回原因"},
		"approvals.mine":             {"You made this request; another operator must decide it.", "这是你提交的申请，须由另一位操作员审批。"},
		"approvals.cannot_decide":    {"Your role cannot decide requests.", "你的角色无权审批。"},
		"approvals.batch":            {"Batch %d", "批次 %d"},
		"approvals.approved":         {"Request %d approved and carried out.", "申请 %d 已批准并执行。"},
		"approvals.rejected":         {"Request %d rejected.", "申请 %d 已驳回。"},
		"approvals.bad_id":           {"No such request.", "没有这个申请。"},
		"approvals.status.pending":   {"pending", "待审批"},
		"approvals.status.approved":  {"approved", "已批准"},
		"approvals.status.executed":  {"executed", "已执行"},
		"approvals.status.failed":    {"failed", "执行失败"},
		"approvals.status.rejected":  {"rejected", "已驳回"},
		"approvals.status.expired":   {"expired", "已过期"},
		"approvals.status.cancelled": {"cancelled", "已撤销"},
	})
}

// approvalsData is the approvals page's data.
type approvalsData struct {
	Pending []approvalRow
	Decided []approvalRow
	// CanDecide is whether the operator's role may decide others'
	// requests, as package access rules (operator or admin); the API
	// refuses anyone else all the same.
	CanDecide bool
	Forbidden bool
}

// approvalRow is one request as the page shows it.
type approvalRow struct {
	*lapse.Approval
	// Request is what approving it carries out (a close's selector, a
	// refund's amount), so that the approver sees what they approve; nil
	// when it cannot be read.
	Request *lapsehttp.ApprovalRequest
	Mine    bool  // made by the operator looking
	Batch   int64 // the close batch an executed close.batch started; 0 when none
}

// recentApprovals is how many requests the page lists.
const recentApprovals = 100

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request) {
	op := operatorOf(r)
	if !op.Can(access.ScopeOrdersRead) {
		c.renderStatus(w, r, http.StatusForbidden, "approvals", approvalsData{Forbidden: true})
		return
	}
	ctx := r.Context()
	pending, err := c.cfg.Access.Approvals(ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalPending, Limit: recentApprovals})
	if err != nil {
		c.failPage(w, r, err)
		return
	}
	recent, err := c.cfg.Access.Approvals(ctx, &lapse.ApprovalListParams{Limit: recentApprovals})
	if err != nil {
		c.failPage(w, r, err)
		return
	}
	batches := map[int64]int64{} // by approval
	if c.cfg.Closer != nil {
		bs, err := c.cfg.Closer.Batches(ctx, &lapse.CloseBatchListParams{Limit: recentApprovals})
		if err != nil {
			c.failPage(w, r, err)
			return
		}
		for _, b := range bs {
			if b.ApprovalID != 0 {
				batches[b.ApprovalID] = b.ID
			}
		}
	}
	d := approvalsData{CanDecide: op.Kind == access.KindOperator && (op.Role == access.RoleOperator || op.Role == access.RoleAdmin)}
	row := func(a *lapse.Approval) approvalRow {
		return approvalRow{Approval: a, Request: lapsehttp.RequestOf(a), Mine: op.Kind == access.KindOperator && a.MakerID == op.OperatorID, Batch: batches[a.ID]}
	}
	for _, a := range pending {
		d.Pending = append(d.Pending, row(a))
	}
	for _, a := range recent {
		if a.Status != lapse.ApprovalPending {
			d.Decided = append(d.Decided, row(a))
		}
	}
	c.render(w, r, "approvals", d)
}

// approve and reject decide a request through the API, which refuses the
// maker, viewers and a wrong code, and audits each attempt.
func (c *Console) approve(w http.ResponseWriter, r *http.Request) {
	c.decideApproval(w, r, "approve", "code", "approvals.approved")
}

func (c *Console) reject(w http.ResponseWriter, r *http.Request) {
	c.decideApproval(w, r, "reject", "reason", "approvals.rejected")
}

// decideApproval posts the form's field (the approver's code, or why not)
// to the API's verb of the request in the path, and goes back to the inbox
// with how it ended.
func (c *Console) decideApproval(w http.ResponseWriter, r *http.Request, verb, field, done string) {
	const back = Prefix + "approvals"
	lang := langOf(r, operatorOf(r).Lang)
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		c.refused(w, r, operatorOf(r), fmt.Errorf("the form could not be read: %w", err))
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.refused(w, r, operatorOf(r), errors.New(t(langEN, "approvals.bad_id")))
		setFlash(w, r, back, flash{Kind: "error", Text: t(lang, "approvals.bad_id")})
		return
	}
	o := c.call(r, http.MethodPost, "/v1/approvals/"+strconv.FormatInt(id, 10)+"/"+verb, map[string]string{field: r.PostForm.Get(field)}, "")
	f := flashOf(lang, o)
	if o.Status == http.StatusOK {
		var a struct {
			ID int64 `json:"id"`
		}
		if json.Unmarshal(o.Body, &a) == nil && a.ID == id {
			f.Text = t(lang, done, id)
		}
	}
	setFlash(w, r, back, f)
}
