package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/clientaddr"
	"github.com/lapsehq/lapse/internal/problem"
)

// Who may call. Every route with a scope needs a credential: a service's
// API key (Authorization: Bearer <key>) or an operator's session cookie,
// whose requests must also pass the standard library's cross-origin
// protection. No credential is 401, a credential without the route's scope
// is 403; neither reaches the handler. A change made through a route with an
// audit action is in the audit log, in the transaction of its effect
// (engine.WithAudit), or in a row of its own when it failed, changed
// nothing, or was refused, also for a credential that has ended but names
// its holder (refusedEnded). A risky route needs an operator's fresh second
// factor, and above the access service's thresholds it waits, as an
// approval request, for a second operator (approval.go).

// SessionCookie is the name of an operator's session cookie. Its __Host-
// prefix makes browsers take it only as NewSessionCookie sets it (Secure,
// Path /, no Domain), so that a neighbouring subdomain cannot plant one.
const SessionCookie = "__Host-lapse_session"

// SecondFactorHeader carries an operator's TOTP code for a risky action.
const SecondFactorHeader = "Lapse-Second-Factor"

type principalKey struct{}

// repeatKey carries a flag a handler sets (repeated) when its success
// changed nothing because it repeated an earlier request (the same
// Idempotency-Key, the same create): the row guarded then writes says so,
// rather than a bare "ok" that reads as a second change.
type repeatKey struct{}

// resultRepeated is the result of the row of a repeated request.
const resultRepeated = "ok: the same request again; nothing changed"

// repeated notes that r, which succeeded, repeated an earlier request and
// changed nothing (repeatKey).
func repeated(r *http.Request) {
	if p, _ := r.Context().Value(repeatKey{}).(*bool); p != nil {
		*p = true
	}
}

// principalOf returns who r acts as, nil on an unguarded route or server.
func principalOf(ctx context.Context) *access.Principal {
	p, _ := ctx.Value(principalKey{}).(*access.Principal)
	return p
}

// approvedKey marks a request carried out for an approval request: its
// maker gave the second factor when making it, and a second operator
// approved it with theirs, for what it put at stake then (approval.stake).
type approvedKey struct{}

// admittedKey carries the stake a risky request was admitted on, on its
// maker's own word (Access.Admit), to its handler: a manual close closes no
// more than it (stake.closing).
type admittedKey struct{}

type approval struct {
	*lapse.Approval        // as it was approved
	approver        string // who approved it
	stake           stake  // what it was approved for
}

// actor is who a change made by r is recorded as in the order's log.
func actor(r *http.Request) engine.Actor {
	if p := principalOf(r.Context()); p != nil {
		return engine.Actor{FiredBy: lapse.FiredByAPI, Name: p.Kind + ":" + p.Name}
	}
	return engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}
}

// credential returns the credential r comes with: its bearer key, or else
// its session cookie's token (cookie true).
func credential(r *http.Request) (value string, cookie bool, err error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, key, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
			return "", false, lapse.Errorf(lapse.EUNAUTHORIZED, "the Authorization header must be: Bearer <API key>")
		}
		return strings.TrimSpace(key), false, nil
	}
	if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
		return c.Value, true, nil
	}
	return "", false, lapse.Errorf(lapse.EUNAUTHORIZED, "this route needs an API key (Authorization: Bearer <key>) or an operator's session")
}

// authenticate returns who r is, by its bearer key or its session cookie,
// and whether it came by cookie.
func (s *Server) authenticate(r *http.Request) (*access.Principal, bool, error) {
	cred, cookie, err := credential(r)
	switch {
	case err != nil:
		return nil, false, err
	case cookie:
		p, err := s.access.Session(r.Context(), cred)
		return p, true, err
	}
	p, err := s.access.Authenticate(r.Context(), cred)
	return p, false, err
}

// refusedEnded records the refusal of r on rt, refused with err for its
// credential, when rt audits and the credential has ended but names its
// holder: a key revoked (its secret right), a session logged out, expired
// or of a disabled operator. The row is in the holder's name, as a known
// caller's refusal is (S9), and says why, which the answer does not. A
// request without a credential, or with one that names no one (an unknown
// key, a wrong secret), leaves no row: anyone who can reach the API could
// fill the log with them.
func (s *Server) refusedEnded(r *http.Request, rt *route, err error) {
	if rt.audit == "" || lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		return
	}
	cred, cookie, cerr := credential(r)
	if cerr != nil {
		return
	}
	var p *access.Principal
	if cookie {
		p, cerr = s.access.SessionHolder(r.Context(), cred)
	} else if p, cerr = s.access.KeyHolder(r.Context(), cred); cerr == nil {
		err = lapse.Errorf(lapse.EUNAUTHORIZED, "the API key is revoked")
	}
	if cerr != nil {
		return
	}
	body, _ := bodyBytes(r)
	s.refused(r.Context(), s.entry(r, rt, p, body), err)
}

// entry is the audit row of r on rt by p, nil when rt does not audit: the
// route's action and target, the body as its parameters unless the route
// keeps it secret, and where r came from.
func (s *Server) entry(r *http.Request, rt *route, p *access.Principal, body []byte) *lapse.AuditEntry {
	if rt.audit == "" {
		return nil
	}
	var params any
	if len(body) > 0 && !rt.secret && json.Valid(body) {
		params = json.RawMessage(body)
	}
	e := p.Entry(rt.audit, rt.targetOf(r, body), params)
	e.ClientAddr = s.clientAddr(r)
	return e
}

// guarded serves r on rt, a route with a scope or a session route, as the
// comment above says.
// The mux calls it for rt, so r has rt's path values.
func (s *Server) guarded(w http.ResponseWriter, r *http.Request, rt *route) {
	if s.access == nil {
		s.unauthorized(w, r, lapse.Errorf(lapse.EUNAUTHORIZED, "this server has no access control configured, so it serves no route that needs a credential"))
		return
	}
	// A request carried out for an approval request (carryOut) acts as its
	// maker, whom the context names; no request from outside can.
	p, cookie := principalOf(r.Context()), false
	if _, approved := r.Context().Value(approvedKey{}).(*approval); p == nil || !approved {
		var err error
		if p, cookie, err = s.authenticate(r); err != nil {
			s.refusedEnded(r, rt, err)
			s.unauthorized(w, r, err)
			return
		}
	}
	// The rows the access service writes for p (a second factor, an
	// approval) say where the request came from, as the route's rows do.
	from := *p
	from.ClientAddr = s.clientAddr(r)
	p = &from
	ctx := context.WithValue(r.Context(), principalKey{}, p)
	r = r.WithContext(ctx)
	body, _ := bodyBytes(r)
	entry := s.entry(r, rt, p, body)
	if cookie {
		// Checked once the row is made, so that a write refused here is
		// in the audit log as any other refusal is (S9).
		if err := s.crossOrigin.Check(r); err != nil {
			err := lapse.Errorf(lapse.EFORBIDDEN, "cross-origin request refused: %v", err)
			refusal := entry
			if refusal == nil && rt.refusedAs != "" {
				refusal = p.Entry(rt.refusedAs, "operator:"+p.ID, nil)
				refusal.ClientAddr = s.clientAddr(r)
			}
			s.refused(ctx, refusal, err)
			s.error(w, r, err)
			return
		}
	}
	if !rt.session && !p.Can(rt.scope) {
		err := lapse.Errorf(lapse.EFORBIDDEN, "%s needs the scope %s, which %s %q does not have", rt.method+" "+rt.path, rt.scope, p.Kind, p.Name)
		s.refused(ctx, entry, err)
		s.error(w, r, err)
		return
	}
	if entry == nil { // a read
		rt.handler(w, r)
		return
	}
	if ap, _ := ctx.Value(approvedKey{}).(*approval); ap != nil {
		entry.Approver, entry.ApprovalID, entry.SecondFactor = ap.approver, ap.ID, "totp"
		if rt.stake != nil {
			// What the request puts at stake is told again: a selector
			// matches the orders made since, a refund is judged with the
			// refunds made since. It is carried out only within what the
			// approver approved.
			st, err := rt.stake(s, r, body)
			if err == nil {
				err = ap.within(st)
			}
			if err != nil {
				s.record(ctx, entry, err)
				s.error(w, r, err)
				return
			}
		}
	} else if rt.risky {
		used, err := s.access.RequireSecondFactor(ctx, p, r.Header.Get(SecondFactorHeader))
		if err != nil {
			s.refused(ctx, entry, err)
			s.error(w, r, err)
			return
		}
		entry.SecondFactor = used
		if rt.stake != nil {
			// Admitted on the operator's own word, its orders count toward
			// their next actions' (access.Service.Admit).
			st, err := rt.stake(s, r, body)
			switch code := lapse.ErrorCode(err); {
			case err == nil:
				need, err := s.access.Admit(ctx, p, rt.audit, entry.Target, max(st.amount, st.atRisk), st.count)
				if err != nil {
					s.record(ctx, entry, err)
					s.error(w, r, err)
					return
				}
				if need {
					s.requestApproval(w, r, rt, entry, body, st)
					return
				}
				// Admitted on this stake: the handler keeps to it.
				ctx = context.WithValue(ctx, admittedKey{}, &st)
			case code == lapse.EINTERNAL || code == lapse.EUNAVAILABLE:
				// The server could not tell it (a read failed): the call
				// is not carried out unjudged.
				s.record(ctx, entry, err)
				s.error(w, r, err)
				return
			}
			// A stake that cannot be told because of the request (an
			// order that does not exist, a bad body) is the handler's to
			// refuse.
		}
	}
	if rt.selfAudit {
		ctx = context.WithValue(ctx, entryKey{}, entry)
	} else {
		ctx = engine.WithAudit(ctx, entry)
	}
	if rt.selfAudit { // a handler that audits itself records its failures too
		rt.handler(w, r.WithContext(ctx))
		return
	}
	rec := &auditRecorder{ResponseWriter: w, header: w.Header().Clone()}
	again := false
	ctx = context.WithValue(ctx, repeatKey{}, &again)
	rt.handler(rec, r.WithContext(ctx))
	if rec.status < 400 && engine.AuditWritten(ctx) {
		rec.release()
		return
	}
	e := *entry
	e.Result = rec.result()
	if again && rec.status < 400 {
		e.Result = resultRepeated
	}
	err := s.access.Record(context.WithoutCancel(ctx), &e)
	if err == nil {
		rec.release()
		return
	}
	s.log.Error("http: the audit row of an action could not be written", "action", e.Action, "target", e.Target,
		"actor", e.ActorName, "result", e.Result, "err", err)
	if rec.status < 400 {
		// A success that committed no row changed nothing (one that
		// changed something committed its row with the change): it is
		// not answered as done without its row (S9), and may be asked
		// again.
		rec.discard()
		s.error(w, r, lapse.Errorf(lapse.EUNAVAILABLE, "the audit log cannot be written now; nothing was changed; try again later"))
	}
}

// refused records a refused action of a known caller, when rt audits.
func (s *Server) refused(ctx context.Context, entry *lapse.AuditEntry, err error) {
	if entry == nil {
		return
	}
	if aerr := s.access.RecordRefusal(context.WithoutCancel(ctx), entry, err); aerr != nil {
		s.log.Error("http: the audit row of a refused action could not be written", "action", entry.Action, "err", aerr)
	}
}

// failed answers r with err and, on a route that audits itself, records
// the row of its entry as guarded records the failure of a route that does
// not: "refused: …" for a 403, else the status and the problem. Handlers
// call it for the failures their callees do not record themselves.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, err error) {
	if entry, _ := r.Context().Value(entryKey{}).(*lapse.AuditEntry); entry != nil {
		s.record(r.Context(), entry, err)
	}
	s.error(w, r, err)
}

// record writes the row of entry for an action that failed with err, as
// failed does.
func (s *Server) record(ctx context.Context, entry *lapse.AuditEntry, err error) {
	e := *entry
	if lapse.ErrorCode(err) == lapse.EFORBIDDEN {
		e.Result = "refused: " + lapse.Reason(err)
	} else {
		p, _ := problem.Of(err)
		e.Result = fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail)
	}
	if aerr := s.access.Record(context.WithoutCancel(ctx), &e); aerr != nil {
		s.log.Error("http: the audit row of a failed action could not be written", "action", e.Action, "err", aerr)
	}
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	var le *lapse.Error
	if errors.As(err, &le) && le.Code == lapse.EUNAUTHORIZED {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lapse"`)
	}
	s.error(w, r, err)
}

// clientAddr is the caller's address: the connection's peer, or, from a
// trusted proxy (Config.TrustedProxies), the client it names.
func (s *Server) clientAddr(r *http.Request) string { return clientaddr.Of(r, s.proxies) }

// auditRecorder keeps the status and, for an error, the start of the
// problem's detail, for the audit row of a change that did not commit one.
// It holds a success back (status, headers and body) until release, so that
// a success whose row cannot be written is not sent; an error goes out as
// it is written.
type auditRecorder struct {
	http.ResponseWriter
	header http.Header // the headers set before the handler ran
	status int
	body   []byte // a success's whole body, or an error's first 2 kB
}

func (w *auditRecorder) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code >= 400 {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *auditRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status < 400 {
		w.body = append(w.body, b...)
		return len(b), nil
	}
	if len(w.body) < 2048 {
		w.body = append(w.body, b[:min(len(b), 2048-len(w.body))]...)
	}
	return w.ResponseWriter.Write(b)
}

// release sends a success held back.
func (w *auditRecorder) release() {
	if w.status == 0 || w.status >= 400 {
		return // nothing written (net/http sends 200), or sent already
	}
	w.ResponseWriter.WriteHeader(w.status)
	if _, err := w.ResponseWriter.Write(w.body); err != nil {
		return // the client went away
	}
}

// discard drops a success held back and the headers its handler set.
func (w *auditRecorder) discard() {
	h := w.ResponseWriter.Header()
	clear(h)
	for k, v := range w.header {
		h[k] = v
	}
	w.status, w.body = 0, nil
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *auditRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *auditRecorder) result() string {
	if w.status < 400 {
		return "ok"
	}
	var p Problem
	if json.Unmarshal(w.body, &p) == nil && p.Detail != "" {
		return fmt.Sprintf("%d %s: %s", w.status, p.Code, p.Detail)
	}
	return fmt.Sprintf("%d %s", w.status, http.StatusText(w.status))
}
