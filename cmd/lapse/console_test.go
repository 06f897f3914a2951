package main_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestConsoleServed: lapse serve serves the operators' console under
// /console/ on its API address, and on --console-http too; a page needs a
// login, and the login page is there for anyone.
func TestConsoleServed(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--console-http", "127.0.0.1:0")
	var consoleURL string
	for _, line := range strings.Split(p.Logs(), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Console string `json:"console"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "lapse serving" {
			consoleURL = rec.Console
		}
	}
	if !strings.HasPrefix(consoleURL, "http://127.0.0.1:") || strings.HasPrefix(consoleURL, p.URL) {
		t.Fatalf("no console of its own in the start's log line (%q):\n%s", consoleURL, p.Logs())
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, base := range []string{p.URL + "/console/", consoleURL} {
		resp, err := noRedirect.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
			t.Errorf("GET %s signed out = %d to %q, want the login page", base, resp.StatusCode, resp.Header.Get("Location"))
		}
		if code, body := callKey(t, "", "GET", base+"login", nil); code != http.StatusOK || !strings.Contains(body, "Sign in") {
			t.Errorf("GET %slogin = %d:\n%s", base, code, body)
		}
	}
	// The console's listener serves the console only.
	if code, _ := callKey(t, "", "GET", strings.TrimSuffix(consoleURL, "/console/")+"/v1/orders", nil); code != http.StatusNotFound {
		t.Errorf("the console's listener serves the API: %d", code)
	}
}
