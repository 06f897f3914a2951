package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"
)

// tool runs a lapse command in dir with stdin and returns what it printed
// and its exit code. The variables of the test's environment that would
// choose another database are cleared.
func tool(t *testing.T, dir, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(lapseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_CONFIG=", "LAPSE_ADMIN_KEY=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("lapse %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// callKey sends a request with key as its bearer key ("": none) through a
// client that adds nothing, and returns the status and the body.
func callKey(t *testing.T, key, method, url string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := plainClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestFirstAdminKey: a first start without --admin-key makes an admin key,
// writes it beside the database readable by its owner only, and logs the
// file's path but never the key; the key works; a second start makes no
// other. --admin-key shorter than 32 characters stops the start, and lapse
// config shows a given one masked.
func TestFirstAdminKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "lapse.db.admin-key")
	p := startServe(t, dir, "--admin-key=")
	info, err := os.Stat(file)
	if err != nil {
		t.Fatalf("no admin key file beside the database: %v", err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("admin key file mode %v, want 0600", mode)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^lapse_[a-z2-7]{12}_[A-Za-z0-9_-]{43}$`).MatchString(key) {
		t.Fatalf("the file holds %q, not an API key", raw)
	}
	logs := p.Logs()
	if !strings.Contains(logs, "an admin key was generated") || !strings.Contains(logs, file) {
		t.Errorf("the logs do not say that a key was generated, in %s:\n%s", file, logs)
	}
	if strings.Contains(logs, key) || strings.Contains(logs, key[len("lapse_")+13:]) {
		t.Errorf("the logs hold the key:\n%s", logs)
	}
	if code, body := callKey(t, "", "GET", p.URL+"/v1/orders", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/orders without a key = %d %s, want 401", code, body)
	}
	if code, body := callKey(t, key, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 5}); code != http.StatusOK {
		t.Errorf("PUT /v1/stock/tea with the key from the file = %d %s, want 200", code, body)
	}
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Opened to others since, the file is warned about at the next start.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, dir, "--admin-key=")
	if logs := p.Logs(); strings.Contains(logs, "an admin key was generated") || !strings.Contains(logs, file) {
		t.Errorf("the second start: want no new key, and the file named:\n%s", logs)
	}
	if logs := p.Logs(); !regexp.MustCompile(`"level":"WARN","msg":"the admin key made at the first start is in this file, which others than its owner may read or write.*"mode":"0644"`).MatchString(logs) {
		t.Errorf("the second start does not warn of the file readable by all:\n%s", logs)
	}
	if again, _ := os.ReadFile(file); !bytes.Equal(again, raw) {
		t.Errorf("the second start rewrote the file")
	}
	if code, _ := callKey(t, key, "GET", p.URL+"/v1/stock/tea", nil); code != http.StatusOK {
		t.Errorf("the key after a restart: %d", code)
	}
	out, errOut, code := tool(t, dir, "", "apikey", "list")
	if code != 0 || strings.Count(out, "admin (first start)") != 1 {
		t.Errorf("lapse apikey list = %d, want one first key:\n%s%s", code, out, errOut)
	}

	// A key too short to be a key stops the start before the database is
	// touched, and so does an origin that is not one.
	other := filepath.Join(t.TempDir(), "lapse.db")
	short := exec.Command(lapseBin, "serve", "--db", other, "--http", "127.0.0.1:0", "--admin-key", "too-short-a-key")
	if got, err := short.CombinedOutput(); err == nil || !strings.Contains(string(got), "--admin-key must be at least 32 characters") ||
		strings.Contains(string(got), "too-short-a-key") {
		t.Errorf("lapse serve --admin-key too-short-a-key: %v\n%s", err, got)
	}
	// A key with a line ending left on it (an env file's CRLF) could never
	// be sent: it too stops the start, and the key is not shown.
	// (Bounded: a start that took the key would serve until killed.)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crlf := exec.CommandContext(ctx, lapseBin, "serve", "--db", other, "--http", "127.0.0.1:0", "--probe-interval", "0")
	crlf.Env = append(os.Environ(), "LAPSE_ADMIN_KEY="+testAdminKey+"\r")
	if got, err := crlf.CombinedOutput(); err == nil || !strings.Contains(string(got), "--admin-key must be printable ASCII without blanks or line endings") ||
		strings.Contains(string(got), testAdminKey) {
		t.Errorf("lapse serve with LAPSE_ADMIN_KEY ending in CR: %v\n%s", err, got)
	}
	origin := exec.Command(lapseBin, "serve", "--db", other, "--http", "127.0.0.1:0", "--trusted-origins", "console.example")
	if got, err := origin.CombinedOutput(); err == nil || !strings.Contains(string(got), "--trusted-origins") {
		t.Errorf("lapse serve --trusted-origins console.example: %v\n%s", err, got)
	}
	proxy := exec.Command(lapseBin, "serve", "--db", other, "--http", "127.0.0.1:0", "--trusted-proxies", "10.0.0.0/8,proxy.internal")
	if got, err := proxy.CombinedOutput(); err == nil || !strings.Contains(string(got), `--trusted-proxies: "proxy.internal" is neither an IP address nor a network`) {
		t.Errorf("lapse serve --trusted-proxies 10.0.0.0/8,proxy.internal: %v\n%s", err, got)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a start refused for its flags made the database: %v", err)
	}
	out, _, code = tool(t, dir, "", "config", "--admin-key", testAdminKey)
	if code != 0 || strings.Contains(out, testAdminKey) || !regexp.MustCompile(`(?m)^admin-key\s+xxxxx\s+flag$`).MatchString(out) {
		t.Errorf("lapse config --admin-key KEY = %d, want it masked:\n%s", code, out)
	}
}

// TestAPIKeyCommands: lapse apikey create prints a key, and only the key,
// on stdout; it acts within its scopes; lapse apikey list shows it, and
// once lapse apikey revoke revoked it, it gets 401; a second revoke says
// that it was revoked already.
func TestAPIKeyCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	out, errOut, code := tool(t, dir, "", "apikey", "create", "--name", "storefront", "--scopes", "orders:read, orders:write")
	if code != 0 {
		t.Fatalf("lapse apikey create = %d\n%s", code, errOut)
	}
	m := regexp.MustCompile(`^lapse_([a-z2-7]{12})_[A-Za-z0-9_-]{43}\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("lapse apikey create printed %q on stdout, want the key on one line", out)
	}
	key, prefix := strings.TrimSpace(out), m[1]
	if !strings.Contains(errOut, prefix) || !strings.Contains(errOut, "orders:read orders:write") || strings.Contains(errOut, key) {
		t.Errorf("stderr of lapse apikey create: %q, want the prefix and scopes and not the key", errOut)
	}
	order := map[string]any{"order_no": "K-1", "flow": "checkout", "user_id": "u1", "amount": 100, "currency": "CNY", "ttl": "1h"}
	if code, body := callKey(t, key, "POST", p.URL+"/v1/orders", order); code != http.StatusCreated {
		t.Errorf("POST /v1/orders with the new key = %d %s", code, body)
	}
	if code, _ := callKey(t, key, "PUT", p.URL+"/v1/stock/tea", map[string]any{"on_hand": 1}); code != http.StatusForbidden {
		t.Errorf("PUT /v1/stock/tea without inventory:write = %d, want 403", code)
	}
	if code, _ := callKey(t, key+"x", "GET", p.URL+"/v1/orders/K-1", nil); code != http.StatusUnauthorized {
		t.Errorf("a wrong key = %d, want 401", code)
	}

	out, _, code = tool(t, dir, "", "apikey", "list")
	if row := regexp.MustCompile(`(?m)^` + prefix + `\s+storefront\s+orders:read,orders:write\s+\S+\s+cli:\S+\s+-$`); code != 0 || !row.MatchString(out) {
		t.Errorf("lapse apikey list = %d, want the key in force:\n%s", code, out)
	}
	out, errOut, code = tool(t, dir, "", "apikey", "revoke", prefix)
	if code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("lapse apikey revoke = %d\n%s%s", code, out, errOut)
	}
	if code, _ := callKey(t, key, "GET", p.URL+"/v1/orders/K-1", nil); code != http.StatusUnauthorized {
		t.Errorf("GET with a revoked key = %d, want 401", code)
	}
	// Revoking it again says that it was revoked before, and changes nothing.
	if again, errOut, code := tool(t, dir, "", "apikey", "revoke", prefix); code != 0 ||
		!strings.Contains(again, "revoked already, since") || !strings.Contains(again, "nothing changed") {
		t.Errorf("lapse apikey revoke of a revoked key = %d, %q %q; want it said revoked already, nothing changed", code, again, errOut)
	}
	out, _, _ = tool(t, dir, "", "apikey", "list")
	if row := regexp.MustCompile(`(?m)^` + prefix + `\s+storefront\s.*\s+\d{4}-\d\d-\d\dT\S+Z$`); !row.MatchString(out) {
		t.Errorf("lapse apikey list after the revoke, want its time:\n%s", out)
	}
	if _, errOut, code := tool(t, dir, "", "apikey", "create", "--name", "x", "--scopes", "orders:everything"); code == 0 ||
		!strings.Contains(errOut, "unknown scope") {
		t.Errorf("an unknown scope = %d %s", code, errOut)
	}
	// The tools make no database.
	if _, errOut, code := tool(t, t.TempDir(), "", "apikey", "list"); code == 0 || !strings.Contains(errOut, "lapse.db") {
		t.Errorf("lapse apikey list without a database = %d %s", code, errOut)
	}
}

// TestOperatorAdd: lapse operator add with a password on stdin prints the
// TOTP enrolment (an otpauth URI and a QR code), with which the operator
// logs in; without one it prints a password it made.
func TestOperatorAdd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	const password = "correct horse battery staple"
	out, errOut, code := tool(t, dir, password+"\n", "operator", "add", "--name", "alice", "--role", "operator")
	if code != 0 {
		t.Fatalf("lapse operator add = %d\n%s", code, errOut)
	}
	m := regexp.MustCompile(`otpauth URI: (otpauth://totp/Lapse:alice\?\S*secret=([A-Z2-7]+)\S*)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "█") || strings.Contains(out, "password (generated") || strings.Contains(out, password) {
		t.Fatalf("lapse operator add printed, want the URI and the QR code and no password:\n%s", out)
	}
	totpCode, err := totp.GenerateCode(m[2], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	login := map[string]any{"name": "alice", "password": password, "code": totpCode}
	if code, body := callKey(t, "", "POST", p.URL+"/v1/sessions", login); code != http.StatusCreated {
		t.Errorf("alice's login = %d %s", code, body)
	}

	out, _, code = tool(t, dir, "", "operator", "add", "--name", "bob", "--role", "viewer")
	if code != 0 || !regexp.MustCompile(`password \(generated; shown this once\): \S{20,}`).MatchString(out) {
		t.Errorf("lapse operator add with nothing on stdin = %d, want a password made:\n%s", code, out)
	}
	out, _, _ = tool(t, dir, "", "operator", "list")
	if !regexp.MustCompile(`(?m)^alice\s+operator\s`).MatchString(out) || !regexp.MustCompile(`(?m)^bob\s+viewer\s`).MatchString(out) {
		t.Errorf("lapse operator list:\n%s", out)
	}
	if out, _, code := tool(t, dir, "", "operator", "disable", "alice"); code != 0 || !strings.Contains(out, "disabled at") {
		t.Errorf("lapse operator disable = %d %s", code, out)
	}
	if out, _, code := tool(t, dir, "", "operator", "disable", "alice"); code != 0 || !strings.Contains(out, "is disabled already") || !strings.Contains(out, "nothing changed") {
		t.Errorf("lapse operator disable again = %d %s; want nothing changed", code, out)
	}
	totpCode, _ = totp.GenerateCode(m[2], time.Now().Add(30*time.Second))
	login["code"] = totpCode
	if code, _ := callKey(t, "", "POST", p.URL+"/v1/sessions", login); code < 400 {
		t.Errorf("a disabled operator's login = %d", code)
	}
	if _, errOut, code := tool(t, dir, "short\n", "operator", "add", "--name", "carol", "--role", "viewer"); code == 0 ||
		!strings.Contains(errOut, "at least 12 characters") {
		t.Errorf("a short password = %d %s", code, errOut)
	}
}

// TestOperatorAddRefusesLookAlikes: lapse operator add refuses a name that
// reads as another operator's, or mixes scripts, or holds an invisible
// character, with the access service's own words about the name, and adds
// no one.
func TestOperatorAddRefusesLookAlikes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, errOut, code := tool(t, dir, "", "migrate"); code != 0 {
		t.Fatalf("lapse migrate = %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := tool(t, dir, "", "operator", "add", "--name", "alice", "--role", "operator"); code != 0 {
		t.Fatalf("lapse operator add alice = %d\n%s", code, errOut)
	}
	for name, want := range map[string]string{
		"Alice":       `lapse: name: reads as the operator "alice"`,
		"\u0430lice":  "lapse: name: mixes scripts (Cyrillic and Latin)",
		"ali\u200bce": "lapse: name: must not hold control, format or invisible characters: it has U+200B",
		"ＡＬＩＣＥ":       `lapse: name: is not in its normal form: write it as "ALICE"`,
	} {
		if _, errOut, code := tool(t, dir, "", "operator", "add", "--name", name, "--role", "viewer"); code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("lapse operator add --name %q = %d %s; want it refused: %s", name, code, errOut, want)
		}
	}
	out, _, _ := tool(t, dir, "", "operator", "list")
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("lapse operator list, want the heading and alice:\n%s", out)
	}
}

// TestMetricsListener: --metrics-http serves /metrics without a credential,
// while the API's /metrics needs the metrics:read scope; an API that
// listens beyond this machine without TLS warns that session cookies need
// HTTPS, and with the sandbox that anyone who reaches it can pay orders.
func TestMetricsListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir, "--metrics-http", "127.0.0.1:0", "--http", "0.0.0.0:0", "--sandbox")
	var metricsURL string
	for _, line := range strings.Split(p.Logs(), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Metrics string `json:"metrics_http"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "lapse serving" {
			metricsURL = rec.Metrics
		}
	}
	if !strings.HasPrefix(metricsURL, "http://127.0.0.1:") {
		t.Fatalf("no metrics_http in the start's log line:\n%s", p.Logs())
	}
	if !strings.Contains(p.Logs(), "session cookies are Secure") {
		t.Errorf("no warning that an API beyond localhost over plain HTTP needs HTTPS for logins:\n%s", p.Logs())
	}
	if !strings.Contains(p.Logs(), "anyone who reaches it can pay any order through POST /sandbox/pay") {
		t.Errorf("no warning that the sandbox beyond localhost lets anyone pay:\n%s", p.Logs())
	}
	if code, body := callKey(t, "", "GET", metricsURL, nil); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET %s without a key = %d, want the metrics", metricsURL, code)
	}
	if code, _ := callKey(t, "", "GET", p.URL+"/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("the API's /metrics without a key = %d, want 401", code)
	}
	scrape, _, _ := tool(t, dir, "", "apikey", "create", "--name", "prometheus", "--scopes", "metrics:read")
	reader, _, _ := tool(t, dir, "", "apikey", "create", "--name", "reader", "--scopes", "orders:read")
	if code, body := callKey(t, strings.TrimSpace(scrape), "GET", p.URL+"/metrics", nil); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("the API's /metrics with metrics:read = %d", code)
	}
	if code, _ := callKey(t, strings.TrimSpace(reader), "GET", p.URL+"/metrics", nil); code != http.StatusForbidden {
		t.Errorf("the API's /metrics with orders:read only = %d, want 403", code)
	}
	if code, _ := callKey(t, "", "GET", strings.TrimSuffix(metricsURL, "/metrics")+"/v1/orders", nil); code != http.StatusNotFound {
		t.Errorf("the metrics listener serves more than /metrics: %d", code)
	}
}
