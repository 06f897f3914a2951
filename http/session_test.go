package http_test

import (
	"context"
	"net/http"
	"testing"

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
