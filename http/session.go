package http

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// Operators' sessions: a login with name, password and TOTP code sets a
// session cookie (Secure, HttpOnly, SameSite=Strict), which the console and
// the API accept in place of a key. Logging in is not a second factor:
// risky actions need a code of their own (POST
// /v1/sessions/current/second-factor, or the Lapse-Second-Factor header).

// loginRequest is the body of POST /v1/sessions.
type loginRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
	Code     string `json:"code"`
}

// sessionJSON is the session's operator as the API shows it.
type sessionJSON struct {
	Operator       string     `json:"operator"`
	Role           string     `json:"role"`
	Scopes         []string   `json:"scopes"`
	ExpiresAt      time.Time  `json:"expires_at"`
	SecondFactorAt *time.Time `json:"second_factor_at,omitempty"`
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.access == nil {
		s.error(w, r, lapse.Errorf(lapse.EUNAUTHORIZED, "this server has no access control configured"))
		return
	}
	if err := s.crossOrigin.Check(r); err != nil {
		s.error(w, r, lapse.Errorf(lapse.EFORBIDDEN, "cross-origin request refused: %v", err))
		return
	}
	var req loginRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	token, p, err := s.access.Login(r.Context(), req.Name, req.Password, req.Code, s.clientAddr(r))
	if limit, ok := errors.AsType[*access.LoginLimitError](err); ok {
		// Too many attempts from the caller's address: 429, as any
		// overload, not the 503 of a dependency that is down.
		w.Header().Set("Retry-After", RetryAfter(limit.RetryAfter))
		writeProblem(w, problemFor(http.StatusTooManyRequests, lapse.EUNAVAILABLE, "", lapse.ErrorMessage(err)))
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	EndReplacedSession(r, s.clientAddr(r), s.access, s.log)
	http.SetCookie(w, NewSessionCookie(token, s.access.Config().SessionTTL))
	s.writeJSON(w, r, http.StatusCreated, sessionOut(p.Name, p.Role, p.Scopes, p.Session))
}

// RetryAfter is the value of a Retry-After header that asks a client to
// wait d: whole seconds, rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

// EndReplacedSession ends the session of r's session cookie, if it has one,
// with its logout row: r is a login that succeeded, whose new cookie
// replaces the old one in the browser, and a session no one holds any more
// must not stay in force until it expires. The console's login calls it
// too. A failure is logged: the login stands.
func EndReplacedSession(r *http.Request, clientAddr string, acc *access.Service, log *slog.Logger) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return
	}
	if err := acc.Logout(context.WithoutCancel(r.Context()), c.Value, clientAddr); err != nil {
		log.Warn("http: the session a login replaced could not be ended; it ends when it expires", "err", err)
	}
}

// NewSessionCookie is the cookie of a new session with token: Secure,
// HttpOnly, SameSite=Strict, for the whole site (the API and the console),
// lasting as long as the session may (ttl, access.Config.SessionTTL, by
// Max-Age, so that a browser's clock does not decide). The server still
// checks the session at each request, which ends sooner when it is idle.
func NewSessionCookie(token string, ttl time.Duration) *http.Cookie {
	return &http.Cookie{Name: SessionCookie, Value: token, Path: "/", MaxAge: max(1, int(ttl.Seconds())),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// ClearSessionCookie is the cookie that ends a session's in the browser.
func ClearSessionCookie() *http.Cookie {
	return &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode}
}

func sessionOut(name, role string, scopes []string, ss *lapse.Session) sessionJSON {
	out := sessionJSON{Operator: name, Role: role, Scopes: scopes, ExpiresAt: ss.ExpiresAt}
	if !ss.SecondFactorAt.IsZero() {
		out.SecondFactorAt = &ss.SecondFactorAt
	}
	return out
}

// currentSession is the session r came with, or an error for a request
// that did not come with one (a key's): the session routes need no scope,
// only a session, which this refuses every other credential for.
func (s *Server) currentSession(r *http.Request) (*lapse.Session, error) {
	p := principalOf(r.Context())
	if p == nil || p.Session == nil {
		return nil, lapse.Errorf(lapse.EINVALID, "this route is about an operator's own session, and this request did not come with one: "+
			"an API key has no session to read, end or give a second factor to (revoke a key with lapse apikey revoke)")
	}
	return p.Session, nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	ss, err := s.currentSession(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := principalOf(r.Context())
	s.writeJSON(w, r, http.StatusOK, sessionOut(p.Name, p.Role, p.Scopes, ss))
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if _, err := s.currentSession(r); err != nil {
		s.error(w, r, err)
		return
	}
	c, _ := r.Cookie(SessionCookie)
	if err := s.access.Logout(r.Context(), c.Value, s.clientAddr(r)); err != nil {
		s.error(w, r, err)
		return
	}
	http.SetCookie(w, ClearSessionCookie())
	w.WriteHeader(http.StatusNoContent)
}

// logoutEverywhere ends every session of the caller's operator, this one
// too (access.Service.LogoutEverywhere), and takes this one's cookie back.
func (s *Server) logoutEverywhere(w http.ResponseWriter, r *http.Request) {
	if _, err := s.currentSession(r); err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.access.LogoutEverywhere(r.Context(), principalOf(r.Context()), s.clientAddr(r)); err != nil {
		s.error(w, r, err)
		return
	}
	http.SetCookie(w, ClearSessionCookie())
	w.WriteHeader(http.StatusNoContent)
}

// secondFactorRequest is the body of POST /v1/sessions/current/second-factor.
type secondFactorRequest struct {
	Code string `json:"code"`
}

func (s *Server) secondFactor(w http.ResponseWriter, r *http.Request) {
	if _, err := s.currentSession(r); err != nil {
		s.error(w, r, err)
		return
	}
	var req secondFactorRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if req.Code == "" {
		s.error(w, r, lapse.FieldError("code", "is required: the TOTP code of your authenticator"))
		return
	}
	p := principalOf(r.Context())
	if err := s.access.VerifySecondFactor(r.Context(), p, req.Code); err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, sessionOut(p.Name, p.Role, p.Scopes, p.Session))
}
