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
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/internal/clientaddr"
)

// TestAccessSessionRoutesNeedNoScope: an operator whose role grants no
// scope (a role of a newer version, on a shared database) reads their
// session, gives it a second factor and logs out, each audited as for any
// operator; a key, whatever its scopes, has no session there and is
// refused with 400; no credential is 401; another site's page cannot log
// the operator out, and its attempt is in the audit log.
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
	g.wantRows("logout zed refused: cross-origin request refused")

	r := g.call("DELETE", "/v1/sessions/current", "", zed).want(t, http.StatusNoContent)
	if c := sessionCookie(t, r); c.Value != "" || c.MaxAge >= 0 {
		t.Errorf("logout set %+v, want the cookie cleared", c)
	}
	g.wantRows("logout zed ok")
	g.call("GET", "/v1/sessions/current", "", zed).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
}

// forwardedFor is a cred that sends X-Forwarded-For: addr, as a proxy does.
func forwardedFor(addr string) cred {
	return func(r *http.Request) { r.Header.Add("X-Forwarded-For", addr) }
}

// TestLoginLimitBehindTrustedProxy: behind a proxy named in TrustedProxies
// the login limit counts each client's address as the proxy recorded it,
// so that one client's flood does not lock every other client out, and the
// refusal's audit row names that client; from a peer not trusted,
// X-Forwarded-For is not believed, so a client cannot step past its own
// limit by writing one.
func TestLoginLimitBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	trusted, err := clientaddr.ParseTrusted([]string{"127.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := access.Config{LoginsPerMinute: 2}
	g := guard(newEnvWith(t, options{access: &cfg, cfg: lapsehttp.Config{TrustedProxies: trusted}}))
	g.operator("alice", access.RoleOperator)
	g.rows()
	login := func(name, from string) *response {
		return g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":%q,"password":"guess","code":"123456"}`, name), forwardedFor(from))
	}
	login("nobody", "203.0.113.1").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	login("nobody", "203.0.113.1").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	login("mallory", "203.0.113.1").refused(t, http.StatusTooManyRequests, lapse.EUNAVAILABLE)
	// Another client behind the same proxy still gets its answer.
	login("alice", "203.0.113.2").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	rows := g.wantRows("login nobody unknown operator", "login nobody unknown operator",
		"login mallory refused: too many login attempts from this address", "login alice wrong password")
	for i, want := range []string{"203.0.113.1", "203.0.113.1", "203.0.113.1", "203.0.113.2"} {
		if i < len(rows) && rows[i].ClientAddr != want {
			t.Errorf("audit row %d names %q; want the client, %s", i, rows[i].ClientAddr, want)
		}
	}

	// No proxy trusted: the header is the client's own words.
	cfg2 := access.Config{LoginsPerMinute: 2}
	plain := guard(newEnvWith(t, options{access: &cfg2}))
	for i := range 2 {
		plain.call("POST", "/v1/sessions", `{"name":"nobody","password":"guess","code":"123456"}`, forwardedFor(fmt.Sprintf("198.51.100.%d", i))).
			refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	}
	plain.call("POST", "/v1/sessions", `{"name":"nobody","password":"guess","code":"123456"}`, forwardedFor("198.51.100.9")).
		refused(t, http.StatusTooManyRequests, lapse.EUNAVAILABLE)
	logins := 0
	for _, r := range plain.rows() {
		if r.Action != "login" {
			continue
		}
		logins++
		if r.ClientAddr != "127.0.0.1" {
			t.Errorf("without a trusted proxy a row names %q; want the peer, 127.0.0.1", r.ClientAddr)
		}
	}
	if logins != 3 {
		t.Errorf("without a trusted proxy: %d login rows, want 3 (two failures and the refusal)", logins)
	}
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

// TestLogoutEverywhere: DELETE /v1/sessions ends every session of the
// caller's operator, on every device, and no other operator's; it clears
// the cookie, is audited, and is refused to a key, to no credential and to
// another site's page.
func TestLogoutEverywhere(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	g.operator("alice", access.RoleOperator)
	g.operator("bob", access.RoleOperator)
	here, there, bob := session(g.login("alice")), session(g.login("alice")), session(g.login("bob"))
	g.rows()

	g.call("DELETE", "/v1/sessions", "", bearer(g.admin)).refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("DELETE", "/v1/sessions", "").refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.call("DELETE", "/v1/sessions", "", here, header("Sec-Fetch-Site", "cross-site")).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	g.wantRows("logout.all alice refused: cross-origin request refused")
	g.call("GET", "/v1/sessions/current", "", there).want(t, http.StatusOK)

	r := g.call("DELETE", "/v1/sessions", "", here).want(t, http.StatusNoContent)
	if c := sessionCookie(t, r); c.Value != "" || c.MaxAge >= 0 {
		t.Errorf("logout everywhere set %+v, want the cookie cleared", c)
	}
	g.wantRows("logout.all alice ok")
	for _, c := range []cred{here, there} {
		g.call("GET", "/v1/sessions/current", "", c).refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	}
	g.call("POST", "/v1/orders", `{"order_no":"A-1","flow":"checkout","user_id":"u","amount":1,"currency":"CNY"}`, there).
		refused(t, http.StatusUnauthorized, lapse.EUNAUTHORIZED)
	g.wantRows("order.create alice refused: the session is not valid or has ended")
	g.call("GET", "/v1/sessions/current", "", bob).want(t, http.StatusOK)
}
