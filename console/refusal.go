package console

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// The console refuses some writes itself, before the API sees them: a post
// from another origin, one without a session in force, a form it cannot
// send on (an amount that is not one, a delivery of another order). Each
// such refusal is in the audit log as the API's refusals are (S9), through
// the same path (access.Service.RecordRefusal): who, the action the form
// asked for as the API names it, its target, the form's fields but the
// code, when, and why. A post that names no operator (no session cookie,
// or one that names no session) is refused without a row, as the API's
// requests without a credential are: there is no one to write it for, and
// anyone who can reach the console could fill the log with them.

// pageKey carries the page a request is for, whose audit names its action.
type pageKey struct{}

// maxFormBytes bounds a form read for the row of a refusal: the largest
// form a page reads (a close's selection).
const maxFormBytes = 1 << 20

// secretFields are form fields never kept in the audit log.
var secretFields = map[string]bool{"code": true, "password": true}

// refused writes the audit row of the write r asked for, refused with err
// before it reached the API, when r's page keeps its writes in the audit
// log: in the name of p, or else of the holder of r's session cookie,
// whether the session is in force or not.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, p *access.Principal, err error) {
	pg, _ := r.Context().Value(pageKey{}).(*page)
	if pg == nil || pg.audit == nil {
		return
	}
	if p == nil {
		ck, cerr := r.Cookie(lapsehttp.SessionCookie)
		if cerr != nil {
			return
		}
		if p, cerr = c.cfg.Access.SessionHolder(r.Context(), ck.Value); cerr != nil {
			return
		}
	}
	if r.PostForm == nil {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		_ = r.ParseForm() // a form that cannot be read has no fields to keep
	}
	action, target := pg.audit(c, r, p)
	if action == "" {
		return
	}
	// The target names what the URL names, as the caller wrote it: kept as
	// the API keeps its own (its route's targetOf), on one line and short.
	if kind, what, ok := strings.Cut(target, ":"); ok {
		target = kind + ":" + lapse.CleanReason(what)
	}
	e := p.Entry(action, target, formParams(r))
	e.ClientAddr = c.clientAddr(r)
	if aerr := c.cfg.Access.RecordRefusal(context.WithoutCancel(r.Context()), e, err); aerr != nil {
		c.log.Error("console: the audit row of a refused action could not be written", "action", action, "target", target,
			"actor", p.Name, "err", aerr)
	}
}

// formParams is the posted form of r as an audit row's parameters: the
// first value of each field but the secret ones; nil when none is left.
func formParams(r *http.Request) any {
	params := map[string]string{}
	for k, vs := range r.PostForm {
		if !secretFields[k] && len(vs) > 0 {
			params[k] = vs[0]
		}
	}
	if len(params) == 0 {
		return nil
	}
	return params
}

// The audits of the pages that write: the action and target of the API
// route each form asks for, as the API names them in its own rows.

func logoutAudit(_ *Console, _ *http.Request, p *access.Principal) (string, string) {
	return "logout", "operator:" + strconv.FormatInt(p.OperatorID, 10)
}

func logoutEverywhereAudit(_ *Console, _ *http.Request, p *access.Principal) (string, string) {
	return "logout.all", "operator:" + strconv.FormatInt(p.OperatorID, 10)
}

func approveAudit(_ *Console, r *http.Request, _ *access.Principal) (string, string) {
	return "approval.approve", "approval:" + r.PathValue("id")
}

func rejectAudit(_ *Console, r *http.Request, _ *access.Principal) (string, string) {
	return "approval.reject", "approval:" + r.PathValue("id")
}

func closeAudit(*Console, *http.Request, *access.Principal) (string, string) {
	return "close.batch", "close"
}

// orderActionAudit is the API route orderAction calls for the form's action;
// "" for an action there is none of.
func orderActionAudit(c *Console, r *http.Request, _ *access.Principal) (string, string) {
	no := r.PathValue("order_no")
	id := func(field string) string {
		n, _ := strconv.ParseInt(r.PostForm.Get(field), 10, 64) // as orderAction reads it
		return strconv.FormatInt(n, 10)
	}
	switch r.PathValue("action") {
	case "retry":
		if o, err := c.cfg.Engine.Order(r.Context(), no); err == nil {
			if _, _, group := retryRoute(o, c.cfg.Engine.Flow(o.Flow)); group {
				return "group.retry", "group:" + no
			}
		}
		return "order.retry", "order:" + no
	case "refund":
		return "refund.create", "order:" + no
	case "revive":
		return "delivery.retry", "delivery:" + id("delivery_id")
	case "close":
		return closeAudit(c, r, nil)
	case "resolve":
		return "review.resolve", "review:" + id("review_id")
	case "settle":
		return "review.settle", "review:" + id("review_id")
	}
	return "", ""
}
