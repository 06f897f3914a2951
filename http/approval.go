package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
)

// Four eyes. A risky action by an operator above the access service's
// thresholds (money, or orders in one manual close) is not carried out: it
// is kept as an approval request, with the request as the API got it, and
// answered 202. A second operator, never its maker, approves it with their
// own second factor; the request is then carried out as its maker made it,
// through the same route, with the approver in its audit row, and only
// within what was approved: when it would put more at stake by then (a
// selector matching orders made since, a refund judged with refunds made
// since), it is refused, nothing is done, and the maker asks again.

// stake is what a risky request puts at risk.
type stake struct {
	amount   int64 // minor units of currency: what this request moves
	atRisk   int64 // what is judged against the threshold: amount and what went before it (a refund's earlier refunds)
	currency string
	count    int64 // orders
	reason   string
	// closing is a manual close's: what it was counted as
	// (closes.Closer.PreviewSince). A close admitted on it closes nothing
	// made or changed after it, and no more than its count.
	closing *closes.Preview
}

// storedRequest is the request an approval request carries out.
type storedRequest struct {
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Body           json.RawMessage `json:"body,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// AtRisk is stake.atRisk, which the approval keeps no column of.
	AtRisk int64 `json:"at_risk,omitempty"`
}

func (s *Server) requestApproval(w http.ResponseWriter, r *http.Request, rt *route, entry *lapse.AuditEntry, body []byte, st stake) {
	sr := storedRequest{Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), AtRisk: st.atRisk}
	if len(body) > 0 {
		sr.Body = body
	}
	// Kept as the maker wrote it, < and > too, for the approver to read.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(sr); err != nil {
		s.error(w, r, err)
		return
	}
	raw := bytes.TrimSpace(buf.Bytes())
	a, err := s.access.RequestApproval(r.Context(), principalOf(r.Context()), &lapse.Approval{
		Action: rt.audit, Target: entry.Target, Amount: st.amount, Currency: st.currency, Count: st.count,
		Request: raw, Reason: st.reason,
	}, entry.SecondFactor)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusAccepted, approvalOut(a))
}

// ApprovalRequest is the request an approval request carries out when it
// is approved, as its maker made it: what the approver approves (a close's
// selector, a refund's amount, in Body), shown to them.
type ApprovalRequest struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body,omitempty"`
	// AtRisk is the money the request was judged on, when more than its
	// Amount: a refund counting the order's earlier refunds.
	AtRisk int64 `json:"-"`
}

// RequestOf returns the request a carries out, nil when a keeps none that
// this server reads.
func RequestOf(a *lapse.Approval) *ApprovalRequest {
	var sr storedRequest
	if json.Unmarshal(a.Request, &sr) != nil || sr.Method == "" {
		return nil
	}
	out := &ApprovalRequest{Method: sr.Method, Path: sr.Path}
	if json.Valid(sr.Body) {
		out.Body = sr.Body
	}
	if sr.AtRisk > a.Amount {
		out.AtRisk = sr.AtRisk
	}
	return out
}

// approvalJSON is an approval request as the API shows it.
type approvalJSON struct {
	ID        int64                `json:"id"`
	Status    lapse.ApprovalStatus `json:"status"`
	Action    string               `json:"action"`
	Target    string               `json:"target"`
	Amount    int64                `json:"amount,omitempty"`
	AtRisk    int64                `json:"at_risk,omitempty"`
	Currency  string               `json:"currency,omitempty"`
	Count     int64                `json:"count,omitempty"`
	Reason    string               `json:"reason,omitempty"`
	Request   *ApprovalRequest     `json:"request,omitempty"`
	Maker     string               `json:"maker"`
	CreatedAt time.Time            `json:"created_at"`
	ExpiresAt time.Time            `json:"expires_at"`
	Approver  string               `json:"approver,omitempty"`
	DecidedAt *time.Time           `json:"decided_at,omitempty"`
	Result    string               `json:"result,omitempty"`
}

func approvalOut(a *lapse.Approval) approvalJSON {
	out := approvalJSON{ID: a.ID, Status: a.Status, Action: a.Action, Target: a.Target, Amount: a.Amount, Currency: a.Currency,
		Count: a.Count, Reason: a.Reason, Request: RequestOf(a), Maker: a.MakerName, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
		Approver: a.ApproverName, Result: a.Result}
	if out.Request != nil {
		out.AtRisk = out.Request.AtRisk
	}
	if !a.DecidedAt.IsZero() {
		out.DecidedAt = &a.DecidedAt
	}
	return out
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	q, err := listQuery(r.URL.RawQuery, "status", "limit", "cursor")
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := &lapse.ApprovalListParams{Status: lapse.ApprovalStatus(q.Get("status"))}
	switch p.Status {
	case "", lapse.ApprovalPending, lapse.ApprovalApproved, lapse.ApprovalExecuted, lapse.ApprovalFailed, lapse.ApprovalRejected,
		lapse.ApprovalExpired, lapse.ApprovalCancelled:
	default:
		s.error(w, r, lapse.FieldError("status", "unknown status %q: pending, approved, executed, failed, rejected, expired or cancelled", p.Status))
		return
	}
	limit, before, err := idPage(q, approvalCursor, defaultApprovalLimit)
	if err != nil {
		s.error(w, r, err)
		return
	}
	p.Limit, p.Before = limit+1, before // one more than asked tells whether another page exists
	as, err := s.access.Approvals(r.Context(), p)
	if err != nil {
		s.error(w, r, err)
		return
	}
	as, next := pageOf(as, limit, approvalCursor, func(a *lapse.Approval) (time.Time, int64) { return a.CreatedAt, a.ID })
	out := make([]approvalJSON, 0, len(as))
	for _, a := range as {
		out = append(out, approvalOut(a))
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"approvals": out, "next_cursor": next})
}

// defaultApprovalLimit is the page size of GET /v1/approvals without a
// limit: the 100 it always answered before it took one.
const defaultApprovalLimit = 100

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "an approval request's number")
	if err != nil {
		s.error(w, r, err)
		return
	}
	a, err := s.access.Approval(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, approvalOut(a))
}

// decisionRequest is the body of POST /v1/approvals/{id}/approve and /reject.
type decisionRequest struct {
	Code   string `json:"code"`   // the approver's TOTP code (approve)
	Reason string `json:"reason"` // why (reject)
}

// approve and reject record their own audit rows (route.selfAudit): the
// access service those of a decision, failed those of an attempt that
// decided nothing (a maker approving their own request, an approver
// without the action's scope or a second factor, a request no longer
// pending), so that every attempt is in the log. Their bodies hold
// approvers' codes and are never kept (route.secret).

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "an approval request's number")
	if err != nil {
		s.failed(w, r, err)
		return
	}
	var req decisionRequest
	if err := s.decode(w, r, &req); err != nil {
		s.failed(w, r, err)
		return
	}
	by := principalOf(r.Context())
	a, err := s.access.Approval(r.Context(), id)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	aboutApproval(r, a)
	if scope := s.scopeOf(a); scope != "" && !by.Can(scope) {
		s.failed(w, r, lapse.Errorf(lapse.EFORBIDDEN, "approving %s needs the scope %s, which %s does not have", a.Action, scope, by.Name))
		return
	}
	code := req.Code
	if code == "" {
		code = r.Header.Get(SecondFactorHeader)
	}
	a, err = s.access.Approve(r.Context(), by, id, code, func(ctx context.Context, a *lapse.Approval) (string, error) {
		return s.carryOut(ctx, r, a, by)
	})
	switch {
	case err != nil && a == nil: // nothing was decided, so nothing recorded
		s.failed(w, r, err)
		return
	case err != nil: // approved, then carried out and failed: both are in the log
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, approvalOut(a))
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "an approval request's number")
	if err != nil {
		s.failed(w, r, err)
		return
	}
	var req decisionRequest
	if err := s.decode(w, r, &req); err != nil {
		s.failed(w, r, err)
		return
	}
	a, err := s.access.Approval(r.Context(), id)
	if err != nil {
		s.failed(w, r, err)
		return
	}
	aboutApproval(r, a)
	if a, err = s.access.Reject(r.Context(), principalOf(r.Context()), id, req.Reason); err != nil {
		s.failed(w, r, err) // Reject records only a decision
		return
	}
	s.writeJSON(w, r, http.StatusOK, approvalOut(a))
}

// aboutApproval makes the audit row of r, on a route that audits itself,
// about a, as the access service's rows of a are: its target and its id.
func aboutApproval(r *http.Request, a *lapse.Approval) {
	if e, _ := r.Context().Value(entryKey{}).(*lapse.AuditEntry); e != nil {
		e.ApprovalID = a.ID
		if a.Target != "" {
			e.Target = a.Target
		}
	}
}

// carryOut runs the request a keeps, as its maker, through its route, and
// returns how it ended: the status and the answer, or an error for a status
// of 400 or more.
func (s *Server) carryOut(ctx context.Context, orig *http.Request, a *lapse.Approval, approver *access.Principal) (string, error) {
	var sr storedRequest
	if err := json.Unmarshal(a.Request, &sr); err != nil {
		return "", fmt.Errorf("approval %d: its request does not decode: %w", a.ID, err)
	}
	maker, err := s.access.OperatorPrincipal(ctx, a.MakerName)
	if err != nil {
		return "", fmt.Errorf("approval %d: its maker %q cannot act now: %w", a.ID, a.MakerName, err)
	}
	ctx = context.WithValue(ctx, principalKey{}, maker)
	ctx = context.WithValue(ctx, approvedKey{}, &approval{Approval: a, approver: approver.Name,
		stake: stake{amount: a.Amount, atRisk: sr.AtRisk, currency: a.Currency, count: a.Count}})
	ctx = context.WithValue(ctx, entryKey{}, (*lapse.AuditEntry)(nil)) // the approval's row is not the action's
	req, err := http.NewRequestWithContext(ctx, sr.Method, sr.Path, nil)
	if err != nil {
		return "", fmt.Errorf("approval %d: %w", a.ID, err)
	}
	req.Body = &bufferedBody{r: bytes.NewReader(sr.Body), err: io.EOF}
	req.ContentLength = int64(len(sr.Body))
	req.Header.Set("Content-Type", "application/json")
	if sr.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", sr.IdempotencyKey)
	}
	req.RemoteAddr = net.JoinHostPort(s.clientAddr(orig), "0") // the approver's address, read once
	// The approver must be allowed what they approve (checked before the
	// approval too; the route may have changed since).
	if scope := s.scopeOf(a); scope == "" || !approver.Can(scope) {
		return "", lapse.Errorf(lapse.EFORBIDDEN, "approving %s needs the scope of its route, which %s does not have", a.Action, approver.Name)
	}
	c := &capture{header: http.Header{}}
	s.route(c, req)
	answer := string(bytes.TrimSpace(c.body))
	if len(answer) > 1024 {
		answer = answer[:1024] + "…"
	}
	if c.status >= 400 {
		var p Problem
		if json.Unmarshal(c.body, &p) == nil && p.Detail != "" {
			answer = p.Code + ": " + p.Detail
		}
		return "", lapse.Errorf(lapse.ECONFLICT, "the approved request was refused: %d %s", c.status, answer)
	}
	return fmt.Sprintf("%d %s", c.status, answer), nil
}

// within refuses, with ECONFLICT, a request carried out for ap that now
// puts more at stake than ap was approved for: more orders, more money
// (its own, or with what went before it, as a refund's earlier refunds),
// or money in another currency. Less is within it: orders closed or paid
// since take from what was approved, not add to it.
func (ap *approval) within(now stake) error {
	was := ap.stake
	var approved, asked string
	switch {
	case now.count > was.count:
		approved, asked = fmt.Sprintf("%d orders", was.count), fmt.Sprintf("%d orders", now.count)
	case (now.amount != 0 || was.amount != 0) && now.currency != was.currency:
		approved, asked = fmt.Sprintf("money in %q", was.currency), fmt.Sprintf("money in %q", now.currency)
	case now.amount > was.amount:
		approved, asked = lapse.Money(was.amount, was.currency), lapse.Money(now.amount, now.currency)
	case max(now.amount, now.atRisk) > max(was.amount, was.atRisk):
		approved = lapse.Money(max(was.amount, was.atRisk), was.currency) + " counting what went before it"
		asked = lapse.Money(max(now.amount, now.atRisk), now.currency) + " counting what went before it"
	default:
		return nil
	}
	return lapse.Errorf(lapse.ECONFLICT, "approval %d was for %s; the request is now for %s; nothing was done: make the request again, for a second operator to approve what it is now",
		ap.ID, approved, asked)
}

// scopeOf is the scope of the route the request of a goes to, "" when it
// goes to none.
func (s *Server) scopeOf(a *lapse.Approval) string {
	var sr storedRequest
	if json.Unmarshal(a.Request, &sr) != nil {
		return ""
	}
	req, err := http.NewRequest(sr.Method, sr.Path, nil)
	if err != nil {
		return ""
	}
	if _, pattern := s.mux.Handler(req); s.byPattern[pattern] != nil {
		return s.byPattern[pattern].scope
	}
	return ""
}
