package console

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/internal/clientaddr"
	"github.com/lapsehq/lapse/internal/problem"
)

type operatorKey struct{}

// operatorOf is the operator a request of the console comes from.
func operatorOf(r *http.Request) *access.Principal {
	p, _ := r.Context().Value(operatorKey{}).(*access.Principal)
	return p
}

// withOperator serves h only to a logged-in operator; others go to the
// login page.
func (c *Console) withOperator(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(lapsehttp.SessionCookie)
		var p *access.Principal
		if err == nil {
			if p, err = c.cfg.Access.Session(r.Context(), ck.Value); err != nil && lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
				// The server could not check the session (its database
				// failed): the login page would tell the operator it ended.
				pr, internal := problem.Of(err)
				if internal {
					c.log.Error("console: a session could not be checked", "err", err)
				}
				http.Error(w, pr.Detail, pr.Status)
				return
			}
		}
		if err != nil || p == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"login?next="+r.URL.EscapedPath(), http.StatusSeeOther)
				return
			}
			// The holder of an ended session is known: the refusal is
			// in the audit log in their name.
			c.refused(w, r, nil, lapse.Errorf(lapse.EUNAUTHORIZED, "the session is not valid or has ended; log in again"))
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, p)))
	}
}

// loginData is the login page's data.
type loginData struct {
	Next   string
	Name   string
	Failed string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login", loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

// login takes the form's name, password and code to access.Login and sets
// the session cookie the API takes too.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	name, next := r.PostForm.Get("name"), safeNext(r.PostForm.Get("next"))
	token, _, err := c.cfg.Access.Login(r.Context(), name, r.PostForm.Get("password"), r.PostForm.Get("code"), c.clientAddr(r))
	if limit, ok := errors.AsType[*access.LoginLimitError](err); ok {
		// The API's limit, counted with its logins: the form is no way
		// around it.
		wait := lapsehttp.RetryAfter(limit.RetryAfter)
		w.Header().Set("Retry-After", wait)
		c.renderStatus(w, r, http.StatusTooManyRequests, "login", loginData{Next: next, Name: name, Failed: t(langOf(r, ""), "login.too_many", wait)})
		return
	}
	if err != nil {
		lang := langOf(r, "")
		if lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
			// The server could not check the login (its database failed):
			// "wrong" would send the operator to try another password.
			p, internal := problem.Of(err)
			if internal {
				c.log.Error("console: a login could not be checked", "err", err)
			}
			c.renderStatus(w, r, p.Status, "login", loginData{Next: next, Name: name, Failed: t(lang, "login.unavailable")})
			return
		}
		c.renderStatus(w, r, http.StatusUnauthorized, "login", loginData{Next: next, Name: name, Failed: t(lang, "login.failed")})
		return
	}
	lapsehttp.EndReplacedSession(r, c.clientAddr(r), c.cfg.Access, c.log)
	http.SetCookie(w, lapsehttp.NewSessionCookie(token, c.cfg.Access.Config().SessionTTL))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the operator's session, if it is still in force, and takes
// its cookie back. A logout the server could not carry out says so and
// keeps the cookie, so that the operator, still signed in, can try again:
// taking the cookie would show them the login page while the session lived
// on, for whoever has its token, until it expired.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(lapsehttp.SessionCookie); err == nil {
		if err := c.cfg.Access.Logout(r.Context(), ck.Value, c.clientAddr(r)); err != nil {
			c.log.Error("console: logout failed; the session is still in force", "err", err)
			lang := langOf(r, "")
			if p, err := c.cfg.Access.SessionHolder(r.Context(), ck.Value); err == nil {
				lang = langOf(r, p.Lang)
			}
			setFlash(w, r, Prefix, flash{Kind: "error", Text: t(lang, "logout.failed")})
			return
		}
	}
	http.SetCookie(w, lapsehttp.ClearSessionCookie())
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// logoutEverywhere ends every session of the operator, on every device,
// this one too (access.Service.LogoutEverywhere), and takes this one's
// cookie back. One the server could not carry out says so and keeps the
// cookie, as logout does, so that the operator can try again.
func (c *Console) logoutEverywhere(w http.ResponseWriter, r *http.Request) {
	p := operatorOf(r)
	if err := c.cfg.Access.LogoutEverywhere(r.Context(), p, c.clientAddr(r)); err != nil {
		if lapse.ErrorCode(err) == lapse.EUNAUTHORIZED {
			// The session ended since the request was let in: nothing of
			// it is left to end here.
			c.refused(w, r, p, err)
			http.SetCookie(w, lapsehttp.ClearSessionCookie())
			http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
			return
		}
		c.log.Error("console: logging out everywhere failed; the sessions are still in force", "err", err)
		setFlash(w, r, Prefix, flash{Kind: "error", Text: t(langOf(r, p.Lang), "logout.all_failed")})
		return
	}
	http.SetCookie(w, lapsehttp.ClearSessionCookie())
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// preferences keeps the operator's language and time zone.
func (c *Console) preferences(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	p := operatorOf(r)
	zone := r.PostForm.Get("time_zone")
	if zone == "" {
		zone = p.TimeZone
	}
	back := safeNext(r.PostForm.Get("next"))
	if err := c.cfg.Access.SetPreferences(r.Context(), p, r.PostForm.Get("lang"), zone); err != nil {
		setFlash(w, r, back, flash{Kind: "error", Text: t(langOf(r, p.Lang), "common.error", err)})
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// safeNext keeps a redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Prefix
	}
	return next
}

// clientAddr is the caller's address: the connection's peer, or, from a
// trusted proxy (Config.TrustedProxies), the client it names.
func (c *Console) clientAddr(r *http.Request) string { return clientaddr.Of(r, c.cfg.TrustedProxies) }
