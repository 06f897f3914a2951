package main_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	lapsehttp "github.com/lapsehq/lapse/http"
)

// enrolment matches the TOTP enrolment lapse operator add and reset
// print for alice: the URI, and in it the secret.
var enrolment = regexp.MustCompile(`otpauth URI: (otpauth://totp/Lapse:alice\?\S*secret=([A-Z2-7]+)\S*)`)

// operatorLogin logs name in through the API of url with the TOTP code of
// secret at at, and returns the status and the session cookie's value (""
// when there is none).
func operatorLogin(t *testing.T, url, name, password, secret string, at time.Time) (int, string) {
	t.Helper()
	code, err := totp.GenerateCode(secret, at)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"name": name, "password": password, "code": code})
	resp, err := plainClient.Post(url+"/v1/sessions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /v1/sessions: %v", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	for _, c := range resp.Cookies() {
		if c.Name == lapsehttp.SessionCookie && c.Value != "" {
			return resp.StatusCode, c.Value
		}
	}
	return resp.StatusCode, ""
}

// currentSession reads GET /v1/sessions/current with the session cookie
// and returns the status and the role it answers with.
func currentSession(t *testing.T, url, cookie string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/v1/sessions/current", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: lapsehttp.SessionCookie, Value: cookie})
	resp, err := plainClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/sessions/current: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Role string `json:"role"`
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out.Role
}

// auditActions counts the rows of action that lapse audit list shows.
func auditActions(t *testing.T, dir, action string) int {
	t.Helper()
	out, errOut, code := tool(t, dir, "", "audit", "list", "--limit", "1000")
	if code != 0 {
		t.Fatalf("lapse audit list = %d\n%s", code, errOut)
	}
	return len(regexp.MustCompile(`(?m)\s`+regexp.QuoteMeta(action)+`\s`).FindAllString(out, -1))
}

// addAlice adds alice with role and the password, and returns her TOTP
// secret.
func addAlice(t *testing.T, dir, role, password string) string {
	t.Helper()
	out, errOut, code := tool(t, dir, password+"\n", "operator", "add", "--name", "alice", "--role", role)
	m := enrolment.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("lapse operator add = %d\n%s%s", code, out, errOut)
	}
	return m[2]
}

// TestOperatorEnable: lapse operator enable lets a disabled operator log
// in again, with an audit row; run on one who is enabled, it says nothing
// changed and writes none; an unknown name or a wrong number of arguments
// exits 2.
func TestOperatorEnable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	const password = "correct horse battery staple"
	secret := addAlice(t, dir, "operator", password)
	if out, errOut, code := tool(t, dir, "", "operator", "disable", "alice"); code != 0 {
		t.Fatalf("lapse operator disable = %d\n%s%s", code, out, errOut)
	}
	now := time.Now()
	if code, _ := operatorLogin(t, p.URL, "alice", password, secret, now); code != http.StatusUnauthorized {
		t.Fatalf("a disabled operator's login = %d, want 401", code)
	}
	out, errOut, code := tool(t, dir, "", "operator", "enable", "alice")
	if code != 0 || !strings.Contains(out, `operator "alice" enabled`) {
		t.Fatalf("lapse operator enable = %d\n%s%s", code, out, errOut)
	}
	if code, cookie := operatorLogin(t, p.URL, "alice", password, secret, now); code != http.StatusCreated || cookie == "" {
		t.Errorf("the login of alice enabled again = %d", code)
	}
	if n := auditActions(t, dir, "operator.enable"); n != 1 {
		t.Errorf("%d operator.enable rows, want 1", n)
	}

	out, errOut, code = tool(t, dir, "", "operator", "enable", "alice")
	if code != 0 || !strings.Contains(out, "nothing changed") {
		t.Errorf("lapse operator enable of an enabled operator = %d, want it to say nothing changed:\n%s%s", code, out, errOut)
	}
	if n := auditActions(t, dir, "operator.enable"); n != 1 {
		t.Errorf("%d operator.enable rows after enabling an enabled operator, want still 1", n)
	}
	if _, errOut, code := tool(t, dir, "", "operator", "enable", "nobody"); code != 2 || !strings.Contains(errOut, `no operator is named "nobody"`) {
		t.Errorf("lapse operator enable nobody = %d %s", code, errOut)
	}
	for _, args := range [][]string{{}, {"alice", "bob"}} {
		if _, errOut, code := tool(t, dir, "", append([]string{"operator", "enable"}, args...)...); code != 2 ||
			!strings.Contains(errOut, "give the name of one operator") {
			t.Errorf("lapse operator enable %q = %d %s", args, code, errOut)
		}
	}
}

// TestOperatorRole: lapse operator role gives an operator another role
// and ends their sessions; their next login has the new role. The same
// role again changes nothing, and ends no session; an unknown role, an
// unknown name or a wrong number of arguments exits 2 and changes nothing.
func TestOperatorRole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	const password = "correct horse battery staple"
	secret := addAlice(t, dir, "viewer", password)
	now := time.Now()
	code, cookie := operatorLogin(t, p.URL, "alice", password, secret, now)
	if code != http.StatusCreated {
		t.Fatalf("alice's login = %d", code)
	}
	if code, role := currentSession(t, p.URL, cookie); code != http.StatusOK || role != "viewer" {
		t.Fatalf("alice's session = %d %q, want a viewer's", code, role)
	}

	for args, want := range map[string]string{
		"alice root":         `unknown role "root"`,
		"nobody admin":       `no operator is named "nobody"`,
		"alice":              "give the name of one operator and a role",
		"alice admin viewer": "give the name of one operator and a role",
	} {
		if _, errOut, code := tool(t, dir, "", append([]string{"operator", "role"}, strings.Fields(args)...)...); code != 2 ||
			!strings.Contains(errOut, want) {
			t.Errorf("lapse operator role %s = %d %s; want 2 and %q", args, code, errOut, want)
		}
	}
	if code, role := currentSession(t, p.URL, cookie); code != http.StatusOK || role != "viewer" {
		t.Fatalf("after refused role changes alice's session = %d %q, want a viewer's still", code, role)
	}

	out, errOut, code := tool(t, dir, "", "operator", "role", "alice", "admin")
	if code != 0 || !strings.Contains(out, `operator "alice" has the role admin; their sessions are ended`) {
		t.Fatalf("lapse operator role alice admin = %d\n%s%s", code, out, errOut)
	}
	if code, _ := currentSession(t, p.URL, cookie); code != http.StatusUnauthorized {
		t.Errorf("alice's session from before the role change = %d, want 401", code)
	}
	code, cookie = operatorLogin(t, p.URL, "alice", password, secret, now.Add(30*time.Second))
	if code != http.StatusCreated {
		t.Fatalf("alice's login as admin = %d", code)
	}
	if code, role := currentSession(t, p.URL, cookie); code != http.StatusOK || role != "admin" {
		t.Errorf("alice's new session = %d %q, want an admin's", code, role)
	}
	out, _, _ = tool(t, dir, "", "operator", "list")
	if !regexp.MustCompile(`(?m)^alice\s+admin\s`).MatchString(out) {
		t.Errorf("lapse operator list after the role change:\n%s", out)
	}

	out, errOut, code = tool(t, dir, "", "operator", "role", "alice", "admin")
	if code != 0 || !strings.Contains(out, "admin already; nothing changed") {
		t.Errorf("lapse operator role with the same role = %d, want it to say nothing changed:\n%s%s", code, out, errOut)
	}
	if code, _ := currentSession(t, p.URL, cookie); code != http.StatusOK {
		t.Errorf("the same role again ended alice's session: %d", code)
	}
	if n := auditActions(t, dir, "operator.role"); n != 1 {
		t.Errorf("%d operator.role rows, want 1", n)
	}
}

// TestOperatorReset: lapse operator reset gives a new password (from
// stdin, or made and printed) and prints a new TOTP enrolment; the old
// session ends, and the operator logs in with the new password and secret
// only. A bad password or an unknown name exits 2 and changes nothing.
func TestOperatorReset(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	const password, newPassword = "correct horse battery staple", "a brand new passphrase"
	oldSecret := addAlice(t, dir, "operator", password)
	now := time.Now()
	code, cookie := operatorLogin(t, p.URL, "alice", password, oldSecret, now)
	if code != http.StatusCreated {
		t.Fatalf("alice's login = %d", code)
	}

	if _, errOut, code := tool(t, dir, "short\n", "operator", "reset", "alice"); code != 2 || !strings.Contains(errOut, "at least 12 characters") {
		t.Errorf("lapse operator reset with a short password = %d %s", code, errOut)
	}
	if _, errOut, code := tool(t, dir, newPassword+"\n", "operator", "reset", "nobody"); code != 2 ||
		!strings.Contains(errOut, `no operator is named "nobody"`) {
		t.Errorf("lapse operator reset nobody = %d %s", code, errOut)
	}
	if _, errOut, code := tool(t, dir, "", "operator", "reset"); code != 2 || !strings.Contains(errOut, "give the name of one operator") {
		t.Errorf("lapse operator reset without a name = %d %s", code, errOut)
	}
	if code, _ := currentSession(t, p.URL, cookie); code != http.StatusOK {
		t.Fatalf("refused resets ended alice's session: %d", code)
	}

	out, errOut, code := tool(t, dir, newPassword+"\n", "operator", "reset", "alice")
	m := enrolment.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "█") || !strings.Contains(out, "TOTP secret: "+m[2]) ||
		strings.Contains(out, "password (generated") || strings.Contains(out, newPassword) {
		t.Fatalf("lapse operator reset = %d, want the enrolment and no password:\n%s%s", code, out, errOut)
	}
	newSecret := m[2]
	if newSecret == oldSecret {
		t.Fatal("the reset kept the TOTP secret")
	}
	if code, _ := currentSession(t, p.URL, cookie); code != http.StatusUnauthorized {
		t.Errorf("alice's session from before the reset = %d, want 401", code)
	}
	later := now.Add(30 * time.Second)
	if code, _ := operatorLogin(t, p.URL, "alice", password, newSecret, later); code != http.StatusUnauthorized {
		t.Errorf("a login with the old password = %d, want 401", code)
	}
	if code, _ := operatorLogin(t, p.URL, "alice", newPassword, oldSecret, later); code != http.StatusUnauthorized {
		t.Errorf("a login with the old secret = %d, want 401", code)
	}
	if code, _ := operatorLogin(t, p.URL, "alice", newPassword, newSecret, now); code != http.StatusCreated {
		t.Errorf("a login with the new password and secret = %d, want 201", code)
	}

	// Nothing on stdin: a password is made and printed.
	out, errOut, code = tool(t, dir, "", "operator", "reset", "alice")
	pw := regexp.MustCompile(`password \(generated; shown this once\): (\S{20,})`).FindStringSubmatch(out)
	m = enrolment.FindStringSubmatch(out)
	if code != 0 || pw == nil || m == nil {
		t.Fatalf("lapse operator reset with nothing on stdin = %d, want a password made:\n%s%s", code, out, errOut)
	}
	if code, _ := operatorLogin(t, p.URL, "alice", pw[1], m[2], now); code != http.StatusCreated {
		t.Errorf("a login with the made password = %d, want 201", code)
	}
	if n := auditActions(t, dir, "operator.reset"); n != 2 {
		t.Errorf("%d operator.reset rows, want 2", n)
	}
}

// TestOperatorLogout: lapse operator logout logs an operator out
// everywhere, with an audit row; they may log in again; an unknown name or
// a wrong number of arguments exits 2.
func TestOperatorLogout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	const password = "correct horse battery staple"
	secret := addAlice(t, dir, "operator", password)
	now := time.Now()
	var cookies []string
	for _, at := range []time.Time{now.Add(-30 * time.Second), now} { // two devices, a code each
		code, cookie := operatorLogin(t, p.URL, "alice", password, secret, at)
		if code != http.StatusCreated || cookie == "" {
			t.Fatalf("login = %d", code)
		}
		cookies = append(cookies, cookie)
	}
	out, errOut, code := tool(t, dir, "", "operator", "logout", "alice")
	if code != 0 || !strings.Contains(out, `operator "alice" logged out everywhere`) {
		t.Fatalf("lapse operator logout = %d\n%s%s", code, out, errOut)
	}
	for _, c := range cookies {
		if code, _ := currentSession(t, p.URL, c); code != http.StatusUnauthorized {
			t.Errorf("a session after lapse operator logout = %d, want 401", code)
		}
	}
	if n := auditActions(t, dir, "operator.logout"); n != 1 {
		t.Errorf("%d operator.logout rows, want 1", n)
	}
	if code, _ := operatorLogin(t, p.URL, "alice", password, secret, now.Add(30*time.Second)); code != http.StatusCreated {
		t.Errorf("a login after lapse operator logout = %d", code)
	}
	if _, errOut, code := tool(t, dir, "", "operator", "logout", "nobody"); code != 2 || !strings.Contains(errOut, `no operator is named "nobody"`) {
		t.Errorf("lapse operator logout nobody = %d %s", code, errOut)
	}
	for _, args := range [][]string{{}, {"alice", "bob"}} {
		if _, errOut, code := tool(t, dir, "", append([]string{"operator", "logout"}, args...)...); code != 2 ||
			!strings.Contains(errOut, "give the name of one operator") {
			t.Errorf("lapse operator logout %v = %d %s", args, code, errOut)
		}
	}
}
