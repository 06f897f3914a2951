package http_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestAccessSessionRoutesNeedNoScope: an operator whose role grants no
// scope (a role of a newer version, on a shared database) reads their
// session, gives it a second factor and logs out, each audited as for any
// operator; a key, whatever its scopes, has no session there and is
// refused with 400; no credential is 401; another site's page cannot log
// the operator out.
func TestAccessSessionRoutesNeedNoScope(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.operator("zed", access.RoleViewer)
	metricsOnly := g.key("metrics only", access.ScopeMetricsRead)
	ctx := context.Background()
	o, err := g.access.Store().OperatorGet(ctx, "zed")
	if err != nil {
		t.Fatal(err)
	}
	o.Role = "auditor-of-tomorrow"
	if err := g.access.Store().OperatorUpdate(ctx, o); err != nil {
		t.Fatal(err)
	}
	g.rows()
	zed := session(g.login("zed"))
	g.wantRows("login zed ok")

	var sv sessionView
	g.call("GET", "/v1/sessions/current", "", zed).want(t, http.StatusOK).decode(t, &sv)
	if sv.Operator != "zed" || sv.Role != "auditor-of-tomorrow" || len(sv.Scopes) != 0 {
		t.Errorf("current session %+v", sv)
	}
	g.call("GET", "/v1/orders", "", zed).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.call("POST", "/v1/sessions/current/second-factor", `{"code":"`+g.code("zed")+`"}`, zed).want(t, http.StatusOK)
	g.wantRows("second_factor zed ok")

	for _, key := range []string{metricsOnly, g.admin} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/sessions/current", ""},
			{"DELETE", "/v1/sessions/current", ""},
			{"POST", "/v1/sessions/current/second-factor", `{"code":"123456"}`},
		} {
			p := g.call(c.method, c.path, c.body, bearer(key)).refused(t, http.StatusBadRequest, lapse.EINVALID)
			if p.Detail == "" {
				t.Errorf("%s %s with a key: no reason given", c.method, c.path)
			}
			g.call(c.method, c.path, c.body).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
		}
	}
	g.call("DELETE", "/v1/sessions/current", "", zed, header("Sec-Fetch-Site", "cross-site")).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.wantRows()

	r := g.call("DELETE", "/v1/sessions/current", "", zed).want(t, http.StatusNoContent)
	if c := sessionCookie(t, r); c.Value != "" || c.MaxAge >= 0 {
		t.Errorf("logout set %+v, want the cookie cleared", c)
	}
	g.wantRows("logout zed ok")
	g.call("GET", "/v1/sessions/current", "", zed).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
}

// TestLoginLimitPerAddress: past its limit, a client address's logins are
// answered 429 with Retry-After, whatever their names and even with the
// right password and code, and only the first refusal leaves an audit row
// (in the client's address), not one per attempt; the per-operator lockout
// does not count them.
func TestLoginLimitPerAddress(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{LoginsPerMinute: 2})
	g.operator("alice", access.RoleOperator)
	g.rows()
	login := func(name, pw, code string) *response {
		return g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":%q,"password":%q,"code":%q}`, name, pw, code))
	}
	login("nobody", "guess", "123456").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	login("alice", "guess", "123456").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	for i := range 30 {
		r := login(fmt.Sprintf("mallory-%d", i), "guess", "123456")
		p := r.refused(t, http.StatusTooManyRequests, lapse.EUNAVAILABLE)
		if ra := r.header.Get("Retry-After"); ra != "30" || !strings.Contains(p.Detail, "too many login attempts") {
			t.Fatalf("a login past the limit: Retry-After %q, %+v", ra, p)
		}
	}
	code, err := totp.GenerateCode(g.secrets["alice"], g.clock.Now()) // g.code would move the clock on
	if err != nil {
		t.Fatal(err)
	}
	r := login("alice", password, code).want(t, http.StatusTooManyRequests)
	if len(r.header.Values("Set-Cookie")) != 0 {
		t.Errorf("a login refused for its address set %v", r.header.Values("Set-Cookie"))
	}
	rows := g.wantRows("login nobody unknown operator", "login alice wrong password",
		"login mallory-0 refused: too many login attempts from this address")
	if len(rows) == 3 && rows[2].ClientAddr != "127.0.0.1" {
		t.Errorf("the refusal's row %+v", rows[2])
	}
	if o, err := g.access.Store().OperatorGet(context.Background(), "alice"); err != nil || o.FailedLogins != 1 {
		t.Errorf("alice after the flood: %+v, %v; want her one failure counted", o, err)
	}
	// The address's count comes back with time.
	g.clock.Advance(time.Minute)
	g.login("alice")
	g.wantRows("login alice ok")
}
