package console_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/console"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/sqlite"
)

// t0 is when every test's clock starts.
var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// password is every test operator's password.
const password = "correct horse battery staple"

// env is the API and the console over one fresh SQLite file, served over
// TLS (the session cookie is Secure), with a manual clock.
type env struct {
	t       *testing.T
	ctx     context.Context
	clock   *lapse.ManualClock
	store   *sqlite.Store
	engine  *engine.Engine
	access  *access.Service
	closer  *closes.Closer
	srv     *httptest.Server
	secrets map[string]string // TOTP secrets by operator name
}

// envConfig adjusts an env before it starts.
type envConfig struct {
	access  func(*access.Config)
	engine  func(*engine.Config)
	trusted []string // the API's and the console's trusted origins
	// bodyTimeout is the console's Config.BodyTimeout.
	bodyTimeout time.Duration
	flows       []*lapse.Flow // the engine's flows; default flows.Builtin()
}

func newEnv(t *testing.T, ec envConfig) *env {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clock := lapse.NewManualClock(t0)
	ecfg := engine.Config{Clock: clock}
	if ec.engine != nil {
		ec.engine(&ecfg)
	}
	fs := ec.flows
	if fs == nil {
		fs = flows.Builtin()
	}
	e, err := engine.New(s, fs, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	acfg := access.Config{Clock: clock, HashParams: &argon2id.Params{Memory: 1024, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}}
	if ec.access != nil {
		ec.access(&acfg)
	}
	as, err := access.New(s, acfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := closes.New(e, s)
	if err != nil {
		t.Fatal(err)
	}
	api := lapsehttp.NewServer(e, lapsehttp.Config{Access: as, Closer: cl, TrustedOrigins: ec.trusted})
	con, err := console.New(console.Config{Engine: e, Access: as, Closer: cl, API: api.Handler(), Store: s, TrustedOrigins: ec.trusted,
		BodyTimeout: ec.bodyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", api.Handler())
	mux.Handle(console.Prefix, con.Handler())
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, ctx: ctx, clock: clock, store: s, engine: e, access: as, closer: cl, srv: srv, secrets: map[string]string{}}
}

// operator adds an operator with role and the test password.
func (e *env) operator(name, role string) {
	e.t.Helper()
	_, enr, err := e.access.AddOperator(e.ctx, access.CLI("test"), name, role, password)
	if err != nil {
		e.t.Fatal(err)
	}
	e.secrets[name] = enr.Secret
}

// code is a TOTP code of name's authenticator, a step later than the last
// one asked for, so that no code is ever given twice.
func (e *env) code(name string) string {
	e.t.Helper()
	e.clock.Advance(30 * time.Second)
	c, err := totp.GenerateCode(e.secrets[name], e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// browser is an operator's browser: a client with a cookie jar that does not
// follow redirects on its own, so that tests see them.
type browser struct {
	e *env
	c *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	// A client of its own: srv.Client is one client, shared, so that
	// setting its jar would sign every browser in as the last to log in.
	c := &http.Client{Transport: e.srv.Client().Transport, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{e: e, c: c}
}

// login signs name in and fails the test when it does not work.
func (e *env) login(name string) *browser {
	e.t.Helper()
	b := e.browser()
	resp := b.post("/console/login", url.Values{"name": {name}, "password": {password}, "code": {e.code(name)}, "next": {"/console/"}})
	if resp.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("login %s: %d", name, resp.StatusCode)
	}
	return b
}

// get returns the page at path: its status and body.
func (b *browser) get(path string) (int, string) {
	b.e.t.Helper()
	resp, err := b.c.Get(b.e.srv.URL + path)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// post submits a form as the browser would, from the console's own origin.
func (b *browser) post(path string, form url.Values) *http.Response {
	b.e.t.Helper()
	req, err := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.e.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestLoginAndLanguage(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.operator("alice", "operator")

	// Not signed in: to the login page.
	b := e.browser()
	resp, err := b.c.Get(e.srv.URL + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
		t.Fatalf("GET /console/ signed out = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A wrong code is refused.
	resp = b.post("/console/login", url.Values{"name": {"alice"}, "password": {password}, "code": {"000000"}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("login with a wrong code = %d", resp.StatusCode)
	}

	b = e.login("alice")
	status, body := b.get("/console/")
	if status != http.StatusOK || !strings.Contains(body, "Review queue") || !strings.Contains(body, "alice") {
		t.Fatalf("home = %d:\n%s", status, body)
	}
	// Chinese, kept for the operator.
	if resp := b.post("/console/preferences", url.Values{"lang": {"zh"}, "time_zone": {"Asia/Shanghai"}, "next": {"/console/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("preferences = %d", resp.StatusCode)
	}
	if _, body := e.login("alice").get("/console/"); !strings.Contains(body, "复核队列") {
		t.Fatalf("home in Chinese:\n%s", body)
	}
	// A cross-site form post is refused.
	req, _ := http.NewRequest("POST", e.srv.URL+"/console/logout", nil)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site POST = %d, want 403", resp.StatusCode)
	}
}

// TestLoginEndsTheSessionItReplaces: signing in over a session (another
// operator at the same browser) ends the session whose cookie the new one
// replaces, with its logout row; it does not live on unseen until it
// expires.
func TestLoginEndsTheSessionItReplaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	e.operator("bob", access.RoleOperator)
	b := e.login("alice")
	u, _ := url.Parse(e.srv.URL)
	old := b.c.Jar.Cookies(u)
	if resp := b.post("/console/login", url.Values{"name": {"bob"}, "password": {password}, "code": {e.code("bob")}, "next": {"/console/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bob's login = %d", resp.StatusCode)
	}
	if _, body := b.get("/console/"); !strings.Contains(body, "bob") {
		t.Fatalf("after bob's login the console shows:\n%s", body)
	}
	replay := e.browser()
	replay.c.Jar.SetCookies(u, old)
	if status, _ := replay.get("/console/"); status != http.StatusSeeOther {
		t.Errorf("alice's replaced session still opens the console: %d", status)
	}
	if row := e.auditRow("logout", "alice"); row == nil || row.Result != "ok" {
		t.Errorf("the replaced session's logout row: %+v", row)
	}
}

// TestPagesNeedTheirScope: the console shows what the API would: an
// operator whose role grants no scope (a role of a newer version, on a
// database it shares, gives none here) sees no order, queue, dashboard,
// close or approval, and may still set their preferences and log out.
func TestPagesNeedTheirScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("zed", access.RoleViewer)
	if _, _, err := e.engine.CreateOrder(e.ctx, &lapse.OrderCreate{OrderNo: "S-1", Flow: "checkout", UserID: "u-secret",
		Amount: 100, Currency: "CNY"}, engine.Actor{FiredBy: lapse.FiredByAPI, Name: "test"}); err != nil {
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
	b := e.login("zed")
	for _, path := range []string{"/console/", "/console/orders/S-1", "/console/dashboard", "/console/approvals", "/console/audit",
		"/console/close", "/console/close/1"} {
		status, body := b.get(path)
		if status != http.StatusForbidden || strings.Contains(body, "u-secret") {
			t.Errorf("GET %s by an operator without scopes = %d:\n%s", path, status, body)
		}
	}
	if resp := b.post("/console/close/preview", url.Values{"user_id": {"u-secret"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a close preview by an operator without scopes = %d", resp.StatusCode)
	}
	if resp := b.post("/console/preferences", url.Values{"lang": {"zh"}, "time_zone": {"UTC"}, "next": {"/console/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("preferences = %d", resp.StatusCode)
	}
	if resp := b.post("/console/logout", nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout = %d", resp.StatusCode)
	}
}

// TestTrustedOrigins: a form posted from an origin lapse serve was told to
// trust (--trusted-origins) is taken by the console as by the API; one from
// any other site is refused.
func TestTrustedOrigins(t *testing.T) {
	e := newEnv(t, envConfig{trusted: []string{"https://ops.example"}})
	e.operator("alice", "operator")
	b := e.login("alice")
	post := func(origin string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", e.srv.URL+"/console/preferences", strings.NewReader(url.Values{"lang": {"zh"}, "next": {"/console/"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("https://evil.example"); code != http.StatusForbidden {
		t.Errorf("a post from another site = %d, want 403", code)
	}
	if code := post("https://ops.example"); code != http.StatusSeeOther {
		t.Errorf("a post from a trusted origin = %d, want 303", code)
	}
	if _, err := console.New(console.Config{Engine: e.engine, Access: e.access, API: http.NotFoundHandler(), Store: e.store,
		TrustedOrigins: []string{"not an origin"}}); err == nil {
		t.Error("console.New took a trusted origin that is not one")
	}
}

// TestURLTextRefused: a NUL or invalid UTF-8 in a console URL's path or
// query names nothing a store keeps; it is a 400 before any page reads it
// (on PostgreSQL the lookup was an error).
func TestURLTextRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.operator("alice", "operator")
	b := e.login("alice")
	for _, path := range []string{"/console/orders/a%00b", "/console/orders/%ff", "/console/audit?actor=a%00b", "/console/close?user_id=%ff"} {
		if status, body := b.get(path); status != http.StatusBadRequest || !strings.Contains(body, "without NUL") {
			t.Errorf("GET %s = %d:\n%s", path, status, body)
		}
	}
	if status, _ := b.get("/console/audit?actor=alice"); status != http.StatusOK {
		t.Errorf("GET /console/audit?actor=alice = %d", status)
	}
}
