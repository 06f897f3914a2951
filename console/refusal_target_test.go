package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestRefusalTargetsCleaned: the target of a refusal's row comes from the
// URL the caller wrote, as the API's do; the console keeps it as the API
// keeps its own (lapse.CleanReason): on one line, without control or
// bidi characters, and at most MaxReasonLen bytes, so that a caller whose
// every post is refused (a viewer, the holder of an ended session) can
// neither forge lines in the log nor grow it, which is never pruned, by
// the length of a URL with each post.
func TestRefusalTargetsCleaned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("vic", access.RoleViewer)
	vic := e.login("vic")
	forged := "X\nresult: ok\u202e" + strings.Repeat("A", 64<<10)
	for _, path := range []string{
		"/console/orders/" + url.PathEscape(forged) + "/refund",
		"/console/approvals/" + url.PathEscape(forged) + "/approve",
	} {
		resp := vic.post(path, url.Values{"amount": {"1.00"}, "idempotency_key": {"k"}})
		if resp.StatusCode < 400 && resp.StatusCode != http.StatusSeeOther {
			t.Errorf("POST %s… = %d", path[:40], resp.StatusCode)
		}
	}
	rows, err := e.store.AuditList(e.ctx, &lapse.AuditListParams{ActorName: "vic"})
	if err != nil {
		t.Fatal(err)
	}
	refusals := 0
	for _, r := range rows {
		if r.Action == "login" {
			continue
		}
		refusals++
		if len(r.Target) > len("approval:")+lapse.MaxReasonLen || strings.ContainsAny(r.Target, "\n\r\u202e") || !utf8.ValidString(r.Target) {
			t.Errorf("the row of %s keeps the target as the caller wrote it: %d bytes, %q…", r.Action, len(r.Target), r.Target[:min(len(r.Target), 40)])
		}
	}
	if refusals != 2 {
		t.Errorf("%d refusals in the log, want 2", refusals)
	}
}
