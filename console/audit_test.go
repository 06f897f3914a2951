package console_test

import (
	"database/sql"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// usePrefs sets the browser's operator's language and time zone.
func (b *browser) usePrefs(lang, zone string) {
	b.e.t.Helper()
	if resp := b.post("/console/preferences", url.Values{"lang": {lang}, "time_zone": {zone}, "next": {"/console/"}}); resp.StatusCode != http.StatusSeeOther {
		b.e.t.Fatalf("preferences = %d", resp.StatusCode)
	}
}

// load gets path and fails the test unless it answers status.
func (b *browser) load(path string, status int) string {
	b.e.t.Helper()
	got, body := b.get(path)
	if got != status {
		b.e.t.Fatalf("GET %s = %d, want %d:\n%s", path, got, status, body)
	}
	return body
}

// bodyHas fails the test unless body holds every one of want.
func bodyHas(t *testing.T, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, body)
		}
	}
	if m := missingMessage.FindString(body); m != "" {
		t.Fatalf("%s shows a missing message %s:\n%s", what, m, body)
	}
}

// bodyLacks fails the test if body holds any of unwanted.
func bodyLacks(t *testing.T, what, body string, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(body, u) {
			t.Fatalf("%s holds %q:\n%s", what, u, body)
		}
	}
}

// missingMessage is how t shows a key it does not know.
var missingMessage = regexp.MustCompile(`\[[a-z_]+\.[a-z_.]+\]`)

// redirectedTo is where a POST redirected to, failing the test unless it did.
func redirectedTo(t *testing.T, resp *http.Response, prefix string) string {
	t.Helper()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), prefix) {
		t.Fatalf("answer %d to %q, want a redirect to %s…", resp.StatusCode, resp.Header.Get("Location"), prefix)
	}
	return resp.Header.Get("Location")
}

// submit posts form to path and returns the page it answers with, for
// a POST that renders rather than redirects.
func (b *browser) submit(path string, form url.Values) (int, string) {
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
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// auditRowsShown counts the rows of the audit page's table.
func auditRowsShown(body string) int { return strings.Count(body, `<tr id="audit-`) }

// pagerLink is the href of the audit page's link rel (prev or next), "" when
// there is none.
func pagerLink(body, rel string) string {
	m := regexp.MustCompile(`<a href="([^"]*)" rel="` + rel + `"`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// dbPath is the SQLite file of e. newEnv keeps it in a directory of the
// test's own, which t.TempDir makes a sibling of.
func (e *env) dbPath() string {
	e.t.Helper()
	paths, err := filepath.Glob(filepath.Join(filepath.Dir(e.t.TempDir()), "*", "lapse.db"))
	if err != nil || len(paths) != 1 {
		e.t.Fatalf("the env's database: %v, %v", paths, err)
	}
	return paths[0]
}

func TestAuditPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.operator("alice", access.RoleOperator)
	e.operator("vic", access.RoleViewer)
	alice, vic := e.login("alice"), e.login("vic")
	if _, err := lapse.AuditSeal(e.ctx, e.store, 0); err != nil { // as the server's sealer does
		t.Fatal(err)
	}
	seq, _, err := e.store.AuditHead(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.store.AuditList(e.ctx, &lapse.AuditListParams{})
	if err != nil || len(rows) != int(seq) {
		t.Fatalf("%d rows, %v; want the %d sealed", len(rows), err, seq)
	}

	// Viewers read the log too, newest first. The chain is verified when
	// asked, not on every view (which would read the whole log each time).
	body := vic.load("/console/audit", http.StatusOK)
	bodyHas(t, "audit page", body, "<h1>Audit log</h1>", "The hash chain is verified when you ask",
		`<a href="/console/audit?verify=1" id="audit-verify">Verify the chain</a>`)
	bodyLacks(t, "audit page", body, "The chain is intact")
	body = vic.load("/console/audit?verify=1", http.StatusOK)
	bodyHas(t, "audit page, verified", body, "<h1>Audit log</h1>", fmt.Sprintf("The chain is intact: %d rows verified.", seq),
		`name="actor"`, `name="action"`, `name="target"`, `name="batch"`, "login", "operator:vic", "(viewer)", "cli:test")
	if n := auditRowsShown(body); n != int(seq) {
		t.Fatalf("%d rows shown, %d in the log", n, seq)
	}
	if strings.Index(body, fmt.Sprintf(`id="audit-%d"`, rows[len(rows)-1].ID)) > strings.Index(body, fmt.Sprintf(`id="audit-%d"`, rows[0].ID)) {
		t.Fatal("the log is not newest first")
	}
	bodyLacks(t, "the only page", body, `rel="next"`, `rel="prev"`, "not sealed yet")
	vic.usePrefs("zh", "Asia/Shanghai")
	body = vic.load("/console/audit?verify=1", http.StatusOK)
	bodyHas(t, "audit page in Chinese", body, "审计日志", "哈希链完整", "操作者", "2026-11-30 16:0", "CST")

	// Filters.
	body = alice.load("/console/audit?actor=alice&action=login", http.StatusOK)
	bodyHas(t, "filtered audit page", body, "operator:alice", `value="alice"`, `value="login"`)
	bodyLacks(t, "filtered audit page", body, "operator:vic", "cli:test")
	bodyHas(t, "a filter that matches nothing", alice.load("/console/audit?target=order:none", http.StatusOK), "Nothing here.")
	status, body := alice.get("/console/audit?batch=x")
	if status != http.StatusBadRequest {
		t.Fatalf("a bad batch = %d", status)
	}
	bodyHas(t, "a bad batch", body, "Batch must be a whole number.")

	// A success that changed nothing ("ok: …") is shown as a success, not
	// in red as a refusal.
	if err := e.access.Record(e.ctx, &lapse.AuditEntry{ActorKind: "key", ActorID: "k", ActorName: "shop", Action: "card.use",
		Target: "card:7", Result: "ok: the same request again; nothing changed"}); err != nil {
		t.Fatal(err)
	}
	bodyHas(t, "a repeat's row", alice.load("/console/audit?action=card.use", http.StatusOK),
		`<span class="clip ok">ok: the same request again; nothing changed</span>`)

	// Pages of 50, by cursor, with the filters kept.
	for i := range 60 {
		if err := e.access.Record(e.ctx, &lapse.AuditEntry{ActorKind: "cli", ActorID: "pager", ActorName: "pager", Action: "test.page",
			Target: fmt.Sprintf("thing:%d", i), Result: "ok", ClientAddr: "192.0.2.9"}); err != nil {
			t.Fatal(err)
		}
	}
	body = alice.load("/console/audit?action=test.page", http.StatusOK)
	bodyHas(t, "the first page, not verified", body, "thing:59", `<span id="audit-unsealed">6`,
		`<a href="/console/audit?action=test.page&amp;verify=1" id="audit-verify">`)
	bodyLacks(t, "the first page, not verified", body, "The chain is intact", "audit-checkpoint")
	body = alice.load("/console/audit?action=test.page&verify=1", http.StatusOK)
	bodyHas(t, "the first page", body, "thing:59", "192.0.2.9", `title="not sealed yet"`,
		fmt.Sprintf("The chain is intact: %d rows verified. <span id=\"audit-unsealed\">6", seq), "newer rows are not sealed yet, the oldest from 2026-",
		fmt.Sprintf(`<span id="audit-checkpoint">Checkpoint, to keep outside the database (lapse audit verify --checkpoint checks it later): <code>%d:`, seq))
	older := pagerLink(body, "next")
	if n := auditRowsShown(body); n != 50 || !strings.Contains(older, "action=test.page") || !strings.Contains(older, "cursor=") ||
		strings.Contains(older, "verify") || pagerLink(body, "prev") != "" {
		t.Fatalf("first page: %d rows, older %q", n, older)
	}
	body = alice.load(older, http.StatusOK)
	bodyHas(t, "the second page", body, "thing:0", "thing:9")
	bodyLacks(t, "the second page", body, "thing:10<", `rel="next"`)
	if n, newer := auditRowsShown(body), pagerLink(body, "prev"); n != 10 || newer != "/console/audit?action=test.page" {
		t.Fatalf("second page: %d rows, newer %q", n, newer)
	}

	// An edited row breaks the chain, and the page says where, in red.
	db, err := sql.Open("sqlite", e.dbPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(e.ctx, `UPDATE audit_log SET result = 'ok, honestly' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	body = alice.load("/console/audit", http.StatusOK)
	bodyHas(t, "a broken chain, not verified", body, `id="audit-verify"`)
	bodyLacks(t, "a broken chain, not verified", body, "The chain is intact", "The chain is broken")
	body = alice.load("/console/audit?verify=1", http.StatusOK)
	bodyHas(t, "a broken chain", body, `<p class="flash flash-error" role="alert" id="audit-chain">The chain is broken at row 3: its content does not match its hash`)
	bodyLacks(t, "a broken chain", body, "The chain is intact")
	vic.usePrefs("zh", "UTC")
	bodyHas(t, "a broken chain in Chinese", vic.load("/console/audit?verify=1", http.StatusOK), "哈希链在第 3 行断裂")
}
