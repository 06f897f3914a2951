package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSecurityHeaders: every answer of the console, its pages and its
// refusals, redirects and 404s alike, forbids framing, sniffing, scripts
// other than its own (none inline), a <base> that would move its links and
// forms elsewhere, and, but for the stylesheet, any cache.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", "operator")
	out := e.browser()
	in := e.login("alice")
	do := func(b *browser, method, path, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(url.Values{"lang": {"zh"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		b                    *browser
		method, path, origin string
		status               int
	}{
		{out, "GET", "/console/login", "", http.StatusOK},
		{out, "GET", "/console/", "", http.StatusSeeOther},
		{out, "POST", "/console/logout", e.srv.URL, http.StatusSeeOther},
		{out, "POST", "/console/orders/A-1/refund", e.srv.URL, http.StatusUnauthorized},
		{out, "POST", "/console/login", e.srv.URL, http.StatusUnauthorized},
		{in, "GET", "/console/", "", http.StatusOK},
		{in, "GET", "/console/orders/NONE-1", "", http.StatusNotFound},
		{in, "GET", "/console/no-such-page", "", http.StatusNotFound},
		{in, "GET", "/console/audit?cursor=x", "", http.StatusBadRequest},
		{in, "PUT", "/console/close", "", http.StatusMethodNotAllowed},
		{in, "POST", "/console/preferences", "https://evil.example", http.StatusForbidden},
		{in, "POST", "/console/preferences", e.srv.URL, http.StatusSeeOther},
		{in, "GET", "/console/orders/a%00b", "", http.StatusBadRequest},
	} {
		resp := do(c.b, c.method, c.path, c.origin)
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		if resp.StatusCode != c.status || h.Get("Cache-Control") != "no-store" || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" ||
			!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "base-uri 'none'") ||
			!strings.Contains(csp, "form-action 'self'") {
			t.Errorf("%s %s = %d (want %d), headers:\n%v", c.method, c.path, resp.StatusCode, c.status, h)
		}
	}
	// The stylesheet may be cached; it is still not to be sniffed.
	resp := do(out, "GET", "/console/assets/style.css", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") == "no-store" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("the stylesheet = %d, headers:\n%v", resp.StatusCode, resp.Header)
	}
}
