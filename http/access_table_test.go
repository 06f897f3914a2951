package http_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// openRoutes are the only routes anyone may call without a credential:
// the probes, the document, payment callbacks (which their providers sign)
// and the login. A new route is guarded unless it is added here, on
// purpose.
var openRoutes = []string{
	"GET /healthz",
	"GET /readyz",
	"GET /openapi.json",
	"POST /v1/payments/{provider}/callback",
	"POST /v1/sessions",
}

// roleHas reports whether role grants scope.
func roleHas(t *testing.T, role, scope string) bool {
	t.Helper()
	scopes, err := access.RoleScopes(role)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(scopes, scope) || slices.Contains(scopes, access.ScopeAdmin)
}

// TestAccessRouteTable calls every route of the router with every kind of
// credential that must not pass: none, a key whose secret is wrong, a
// revoked key, a session logged out, one idle past its end, one of an
// operator disabled since (401 for all of them), a key without the route's
// scope, and each role's session where the role lacks the route's scope
// (403: a viewer where an operator is needed, an operator where an admin
// is). A role that has the scope is never refused for it. Any route that
// needs no credential must be one of openRoutes, so that a new route
// without a rule fails here.
func TestAccessRouteTable(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{SessionIdle: 30 * time.Minute})
	ctx := context.Background()
	revoked := g.key("revoked", access.ScopeAdmin)
	if _, _, err := g.access.RevokeKey(ctx, g.root, revoked); err != nil {
		t.Fatal(err)
	}
	wrongSecret := []byte(g.admin)
	if i := len(wrongSecret) - 3; wrongSecret[i] == 'A' {
		wrongSecret[i] = 'B'
	} else {
		wrongSecret[i] = 'A'
	}
	metricsOnly, readsOnly := g.key("metrics only", access.ScopeMetricsRead), g.key("reads only", access.ScopeOrdersRead)

	for _, name := range []string{"idler", "leaver", "gone", "vic", "olga", "ada"} {
		role := access.RoleAdmin
		switch name {
		case "vic":
			role = access.RoleViewer
		case "olga":
			role = access.RoleOperator
		}
		g.operator(name, role)
	}
	g.operator("spare", access.RoleAdmin) // so that "gone" is not the last admin
	idler := session(g.login("idler"))
	g.clock.Advance(31 * time.Minute) // idler's session ends unused
	leaver := g.login("leaver")
	if err := g.access.Logout(ctx, leaver, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	gone := session(g.login("gone"))
	if _, _, err := g.access.DisableOperator(ctx, g.root, "gone"); err != nil {
		t.Fatal(err)
	}
	sessions := map[string]cred{
		access.RoleViewer:   session(g.login("vic")),
		access.RoleOperator: session(g.login("olga")),
		access.RoleAdmin:    session(g.login("ada")),
	}
	ended := []struct {
		name string
		cred cred
	}{
		{"no credential", func(*http.Request) {}},
		{"a key with a wrong secret", bearer(string(wrongSecret))},
		{"a revoked key", bearer(revoked)},
		{"a session idle past its end", idler},
		{"a session logged out", session(leaver)},
		{"a session of an operator disabled", gone},
	}

	routes := g.server.Access()
	guarded := 0
	for _, route := range slices.Sorted(maps.Keys(routes)) {
		ra := routes[route]
		if ra.Scope == "" && !ra.Session {
			if !slices.Contains(openRoutes, route) {
				t.Errorf("%s needs no credential, and is not one of the routes meant to be open: give it a scope", route)
			}
			continue
		}
		if slices.Contains(openRoutes, route) {
			t.Errorf("%s is meant to be open, but needs a credential", route)
		}
		guarded++
		method, path, _ := strings.Cut(route, " ")
		path = fill(path)
		body := ""
		if method != "GET" && method != "DELETE" {
			body = "{}"
		}
		for _, c := range ended {
			r := g.call(method, path, body, c.cred)
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s with %s: %d %s, want 401", route, c.name, r.status, r.body)
			}
		}
		if ra.Session {
			continue // no scope: any session in force; keys are refused by the handler
		}
		key := metricsOnly
		if ra.Scope == access.ScopeMetricsRead {
			key = readsOnly
		}
		if r := g.call(method, path, body, bearer(key)); r.status != http.StatusForbidden {
			t.Errorf("%s with a key without %s: %d %s, want 403", route, ra.Scope, r.status, r.body)
		}
		for _, role := range []string{access.RoleViewer, access.RoleOperator, access.RoleAdmin} {
			r := g.call(method, path, body, sessions[role])
			scopeRefusal := r.status == http.StatusForbidden && strings.Contains(string(r.body), "needs the scope")
			switch has := roleHas(t, role, ra.Scope); {
			case !has && !scopeRefusal:
				t.Errorf("%s by a %s, whose role lacks %s: %d %s, want 403", route, role, ra.Scope, r.status, r.body)
			case has && (scopeRefusal || r.status == http.StatusUnauthorized):
				t.Errorf("%s by a %s, whose role has %s: %d %s", route, role, ra.Scope, r.status, r.body)
			}
		}
	}
	if guarded < 40 {
		t.Errorf("only %d routes need a credential", guarded)
	}
	// Nothing the refused calls asked for happened.
	if g.orderExists("O-1") {
		t.Errorf("a refused call made order O-1")
	}
	if st, err := g.engine.Stock(ctx, "SKU-1"); lapse.ErrorCode(err) != lapse.ENOTFOUND {
		t.Errorf("refused calls left SKU-1's stock %+v, %v", st, err)
	}
}
