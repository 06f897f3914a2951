package console_test

import (
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// TestLoginLimitPerAddress: the console's login form is held to the same
// limit per client address as the API's login, counted with it: past it,
// the form answers 429 with Retry-After and says so, even for the right
// password and code, and only the first refusal leaves an audit row.
func TestLoginLimitPerAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{access: func(c *access.Config) { c.LoginsPerMinute = 2 }})
	e.operator("alice", access.RoleOperator)
	b := e.browser()
	if resp := b.post("/console/login", url.Values{"name": {"nobody"}, "password": {"guess"}, "code": {"123456"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong login = %d", resp.StatusCode)
	}
	// The API's login counts toward the same limit.
	resp, err := b.c.Post(e.srv.URL+"/v1/sessions", "application/json", strings.NewReader(`{"name":"nobody","password":"guess","code":"123456"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong login through the API = %d", resp.StatusCode)
	}
	code, err := totp.GenerateCode(e.secrets["alice"], e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mallory", "eve", "alice"} {
		form := url.Values{"name": {name}, "password": {"guess"}, "code": {"123456"}, "next": {"/console/"}}
		if name == "alice" {
			form.Set("password", password)
			form.Set("code", code)
		}
		req, _ := http.NewRequest("POST", e.srv.URL+"/console/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", e.srv.URL)
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" ||
			!strings.Contains(string(body), "Too many sign-in attempts from your address. Try again in 30 seconds.") {
			t.Fatalf("%s's login past the limit = %d, Retry-After %q:\n%s", name, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if len(resp.Cookies()) != 0 {
			t.Errorf("a login refused for its address set %v", resp.Cookies())
		}
	}
	rows, err := e.store.AuditList(e.ctx, &lapse.AuditListParams{Action: "login"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || !strings.HasPrefix(rows[2].Result, "refused: too many login attempts from this address") || rows[2].ActorName != "mallory" {
		for _, r := range rows {
			t.Logf("%s %s %s", r.ActorName, r.Result, r.ClientAddr)
		}
		t.Fatalf("%d login rows, want the two failures and one refusal", len(rows))
	}
	e.clock.Advance(time.Minute)
	e.login("alice")
}

// TestLogoutFailedKeepsTheSession: a logout the server could not carry out
// (its database refused the write) says so and leaves the operator signed
// in, to try again; it took the cookie and showed the login page while the
// session lived on until it expired.
func TestLogoutFailedKeepsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	b := e.login("alice")
	db, err := sql.Open("sqlite", e.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(e.ctx, `CREATE TRIGGER sessions_stuck BEFORE UPDATE ON sessions BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END`); err != nil {
		t.Fatal(err)
	}
	resp := b.post("/console/logout", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("a logout that failed = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == lapsehttp.SessionCookie {
			t.Fatalf("a logout that failed took the session cookie: %v", ck)
		}
	}
	if status, body := b.get("/console/"); status != http.StatusOK || !strings.Contains(body, "Signing out failed, and you are still signed in") {
		t.Fatalf("after a logout that failed, the console = %d:\n%s", status, body)
	}
	if _, err := db.ExecContext(e.ctx, `DROP TRIGGER sessions_stuck`); err != nil {
		t.Fatal(err)
	}
	if resp := b.post("/console/logout", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("the logout again = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if status, _ := b.get("/console/"); status != http.StatusSeeOther {
		t.Fatalf("after the logout the console = %d", status)
	}
}

// TestSessionIdleInTheConsole: a console left alone for the idle limit
// (access.Config.SessionIdle, 30m) signs its operator out; one in use stays
// signed in, and its cookie lasts the session's TTL (12h), which the server
// still bounds. The session lasted 12h, used or not.
func TestSessionIdleInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	b := e.browser()
	resp := b.post("/console/login", url.Values{"name": {"alice"}, "password": {password}, "code": {e.code("alice")}, "next": {"/console/"}})
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == lapsehttp.SessionCookie {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil || cookie.MaxAge != int(access.DefaultSessionTTL.Seconds()) {
		t.Fatalf("login = %d, cookie %v", resp.StatusCode, cookie)
	}
	for range 3 {
		e.clock.Advance(access.DefaultSessionIdle - time.Second)
		if status, _ := b.get("/console/"); status != http.StatusOK {
			t.Fatalf("the console in use, %v after its last page = %d", access.DefaultSessionIdle-time.Second, status)
		}
	}
	e.clock.Advance(access.DefaultSessionIdle)
	if status, _ := b.get("/console/"); status != http.StatusSeeOther {
		t.Fatalf("the console left alone for %v = %d, want the login", access.DefaultSessionIdle, status)
	}
	if resp := b.post("/console/preferences", url.Values{"lang": {"zh"}, "next": {"/console/"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a form posted from a console left alone = %d", resp.StatusCode)
	}
	// Signing out of it takes the cookie back and shows the login page, as
	// a logout in force does; it answered "sign in first" and kept the
	// cookie.
	resp = b.post("/console/logout", nil)
	cleared := false
	for _, ck := range resp.Cookies() {
		cleared = cleared || ck.Name == lapsehttp.SessionCookie && ck.MaxAge < 0
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" || !cleared {
		t.Fatalf("signing out of a session idled out = %d to %q, cookie cleared %v", resp.StatusCode, resp.Header.Get("Location"), cleared)
	}
	if row := e.auditRow("logout", "alice"); row != nil {
		t.Errorf("signing out of a session that had ended wrote a logout row: %+v", row)
	}
}

// TestLoginFailedByTheServer: a login the server could not check (its
// database refused the write of its row) is not answered as a wrong name,
// password or code, which sends the operator to try others: it is a 500
// that says signing in is not possible now, and sets no cookie. The same
// login once the database is back signs in.
func TestLoginFailedByTheServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	db, err := sql.Open("sqlite", e.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(e.ctx, `CREATE TRIGGER audit_stuck BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END`); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	form := url.Values{"name": {"alice"}, "password": {password}, "code": {e.code("alice")}, "next": {"/console/"}}
	req, err := http.NewRequest("POST", e.srv.URL+"/console/login", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.srv.URL)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(body), "Name, password or code is wrong") ||
		!strings.Contains(string(body), "Signing in is not possible now") {
		t.Fatalf("a login the server could not check = %d:\n%s", resp.StatusCode, body)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == lapsehttp.SessionCookie {
			t.Fatalf("a login that failed set the session cookie: %v", ck)
		}
	}
	if _, err := db.ExecContext(e.ctx, `DROP TRIGGER audit_stuck`); err != nil {
		t.Fatal(err)
	}
	form.Set("code", e.code("alice"))
	if resp := b.post("/console/login", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the login again = %d", resp.StatusCode)
	}
}

// TestSessionCheckFailedByTheServer: a page whose session the server could
// not check (its database refused the write that moves the session's end)
// is a 500, not the login page, which told a signed-in operator that their
// session had ended; a post is not refused as one without a session
// either. Once the database is back the session goes on.
func TestSessionCheckFailedByTheServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	b := e.login("alice")
	db, err := sql.Open("sqlite", e.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(e.ctx, `CREATE TRIGGER sessions_stuck BEFORE UPDATE ON sessions BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END`); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(5 * time.Minute) // the next use moves the session's end
	if status, _ := b.get("/console/"); status != http.StatusInternalServerError {
		t.Fatalf("a page whose session could not be checked = %d, want 500", status)
	}
	if resp := b.post("/console/preferences", url.Values{"lang": {"zh"}, "time_zone": {"UTC"}}); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("a post whose session could not be checked = %d, want 500", resp.StatusCode)
	}
	if _, err := db.ExecContext(e.ctx, `DROP TRIGGER sessions_stuck`); err != nil {
		t.Fatal(err)
	}
	if status, _ := b.get("/console/"); status != http.StatusOK {
		t.Fatalf("the page once the database is back = %d", status)
	}
}

// TestLogoutEverywhere: the console's "Sign out everywhere" ends every
// session of the operator, on every device, this one too, and no other
// operator's, with one audit row from the operator's address; a forged
// form from another site ends nothing and is in the audit log.
func TestLogoutEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	e.operator("bob", access.RoleOperator)
	here, there, bob := e.login("alice"), e.login("alice"), e.login("bob")
	if status, body := here.get("/console/"); status != http.StatusOK || !strings.Contains(body, `action="/console/logout-everywhere"`) ||
		!strings.Contains(body, "Sign out everywhere") {
		t.Fatalf("the console = %d, without a sign out everywhere:\n%s", status, body)
	}
	if status := here.crossSite("/console/logout-everywhere", nil); status != http.StatusForbidden {
		t.Fatalf("a forged sign out everywhere = %d", status)
	}
	if row := e.auditRow("logout.all", "alice"); row == nil || !strings.HasPrefix(row.Result, "refused: cross-origin") {
		t.Fatalf("the forged form's row: %+v", row)
	}
	if status, _ := there.get("/console/"); status != http.StatusOK {
		t.Fatalf("a forged form ended a session: %d", status)
	}

	resp := here.post("/console/logout-everywhere", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("sign out everywhere = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if row := e.auditRow("logout.all", "alice"); row == nil || row.Result != "ok" || row.ClientAddr != "127.0.0.1" {
		t.Fatalf("the row of sign out everywhere: %+v", row)
	}
	for name, b := range map[string]*browser{"this browser": here, "the other browser": there} {
		resp, err := b.c.Get(e.srv.URL + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
			t.Errorf("%s after sign out everywhere = %d to %q, want the login", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if status, _ := bob.get("/console/"); status != http.StatusOK {
		t.Errorf("bob's session after alice signed out everywhere = %d", status)
	}
}
