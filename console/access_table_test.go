package console_test

import (
	"database/sql"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/console"
	"github.com/lapsehq/lapse/engine"
)

// openPages are the only pages served without a session: the login, and
// the logout, which takes the cookie back whatever its session.
var openPages = []string{"GET /console/login", "POST /console/login", "POST /console/logout"}

// TestPagesRouteTable visits every page of the console's route table with
// every session that must not pass (none, one logged out, one idle past
// its end, one of an operator disabled since): a GET goes to the login
// page, a POST is 401, and neither shows or changes anything. An operator
// whose role grants no scope is refused (403) every page that needs one.
// A viewer's post of every action changes nothing: their only row that is
// not a refusal is their login. A page open without a session must be one
// of openPages, so that a page added without a rule fails here.
func TestPagesRouteTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.SessionIdle = 30 * time.Minute }})
	if _, _, err := e.engine.CreateOrder(e.ctx, &lapse.OrderCreate{OrderNo: "O-1", Flow: "checkout", UserID: "u-secret",
		Amount: 100, Currency: "CNY"}, engine.Actor{FiredBy: lapse.FiredByAPI, Name: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"idler", "leaver", "gone", "zed", "vic", "spare"} {
		role := access.RoleAdmin
		if name == "vic" || name == "zed" {
			role = access.RoleViewer
		}
		e.operator(name, role)
	}
	idler := e.login("idler")
	e.clock.Advance(31 * time.Minute)
	leaver := e.login("leaver")
	leaverCookie := leaver.c.Jar.Cookies(mustURL(t, e.srv.URL))
	if resp := leaver.post("/console/logout", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout = %d", resp.StatusCode)
	}
	leaver.c.Jar.SetCookies(mustURL(t, e.srv.URL), leaverCookie) // the cookie kept after its logout
	gone := e.login("gone")
	if _, _, err := e.access.DisableOperator(e.ctx, access.CLI("test"), "gone"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", e.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(e.ctx, `UPDATE operators SET role = 'auditor-of-tomorrow' WHERE name = 'zed'`); err != nil {
		t.Fatal(err)
	}
	zed, vic := e.login("zed"), e.login("vic")
	ended := map[string]*browser{"no session": e.browser(), "a session idle past its end": idler,
		"a session logged out": leaver, "a session of an operator disabled": gone}

	fill := strings.NewReplacer("{order_no}", "O-1", "{id}", "1", "{action}", "refund", "{$}", "")
	pages := console.Pages()
	for _, pattern := range slices.Sorted(maps.Keys(pages)) {
		pa := pages[pattern]
		if pa.Open {
			if !slices.Contains(openPages, pattern) {
				t.Errorf("%s is served without a session, and is not one of the pages meant to be: give it a scope", pattern)
			}
			continue
		}
		method, path, _ := strings.Cut(pattern, " ")
		path = fill.Replace(path)
		form := url.Values{"amount": {"1.00"}, "idempotency_key": {"k-1"}, "reason": {"r"}, "order_nos": {"O-1"},
			"lang": {"zh"}, "time_zone": {"UTC"}, "next": {"/console/"}}
		for what, b := range ended {
			if method == "GET" {
				resp, err := b.c.Get(e.srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
					t.Errorf("GET %s with %s: %d to %q, want the login page", path, what, resp.StatusCode, resp.Header.Get("Location"))
				}
				continue
			}
			if resp := b.post(path, form); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST %s with %s: %d, want 401", path, what, resp.StatusCode)
			}
		}
		if pa.Scope != "-" {
			status := 0
			if method == "GET" {
				status, _ = zed.get(path)
			} else {
				status = zed.post(path, form).StatusCode
			}
			if status != http.StatusForbidden {
				t.Errorf("%s %s by an operator whose role grants no scope: %d, want 403", method, path, status)
			}
		}
		if method == "POST" && pattern != "POST /console/logout-everywhere" {
			vic.post(path, form)
		}
	}
	rows, err := e.store.AuditList(e.ctx, &lapse.AuditListParams{ActorName: "vic"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Result, "refused") && r.Action != "login" && !strings.HasPrefix(r.Result, "4") {
			t.Errorf("a viewer's post did something: %s %s %s", r.Action, r.Target, r.Result)
		}
	}
	if o, err := e.engine.Order(e.ctx, "O-1"); err != nil || o.State != "UNPAID" {
		t.Errorf("order O-1 after the refused posts: %+v, %v", o, err)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
