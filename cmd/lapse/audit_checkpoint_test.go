package main_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAuditCheckpoint: the newest audit rows removed together with the
// head that names them leave a chain that is whole, which lapse audit
// verify alone cannot tell; a checkpoint it printed before, given back with
// --checkpoint, can. So can a row rewritten, head and all, before it.
func TestAuditCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	key := func(name string) {
		t.Helper()
		if _, errOut, code := tool(t, dir, "", "apikey", "create", "--name", name, "--scopes", "orders:read"); code != 0 {
			t.Fatalf("lapse apikey create %s = %d %s", name, code, errOut)
		}
	}
	verify := func(args ...string) (string, string, int) {
		t.Helper()
		return tool(t, dir, "", append([]string{"audit", "verify"}, args...)...)
	}
	checkpointOf := func(out string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^checkpoint: (\d+:[0-9a-f]{64}) `).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("lapse audit verify printed no checkpoint:\n%s", out)
		}
		return m[1]
	}

	if out, errOut, code := tool(t, dir, "", "migrate"); code != 0 {
		t.Fatalf("lapse migrate = %d:\n%s%s", code, out, errOut)
	}
	key("first")
	out, errOut, code := verify()
	if code != 0 {
		t.Fatalf("lapse audit verify = %d:\n%s%s", code, out, errOut)
	}
	cp := checkpointOf(out)
	key("second")
	key("third")
	out, errOut, code = verify("--checkpoint", cp)
	if code != 0 || !strings.Contains(out, "the chain holds row") {
		t.Fatalf("lapse audit verify --checkpoint %s on a log that grew = %d:\n%s%s", cp, code, out, errOut)
	}
	later := checkpointOf(out)

	for _, bad := range []string{"1", "x:00", "0:" + strings.Repeat("0", 64), "1:" + strings.Repeat("g", 64), "1:abcd"} {
		if out, errOut, code := verify("--checkpoint", bad); code != 2 || !strings.Contains(errOut, "--checkpoint: must be ROW:HASH") {
			t.Errorf("lapse audit verify --checkpoint %q = %d, want 2 and what a checkpoint is:\n%s%s", bad, code, out, errOut)
		}
	}

	// Remove the newest rows, and move the head back to the row before
	// them, as someone with the database's credentials could: the chain
	// is whole.
	sqldb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seq int64
	if err := sqldb.QueryRowContext(ctx, `SELECT seq FROM audit_log WHERE action = 'apikey.create' AND target LIKE 'apikey:%' ORDER BY seq DESC LIMIT 1`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := sqldb.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`DELETE FROM audit_log WHERE seq >= ?`, seq)
	exec(`UPDATE audit_head SET seq = ?, hash = (SELECT hash FROM audit_log WHERE seq = ?) WHERE id = 1`, seq-1, seq-1)
	if out, errOut, code := verify(); code != 0 {
		t.Fatalf("the cut log, without a checkpoint = %d, want 0 (the chain is whole):\n%s%s", code, out, errOut)
	}
	out, errOut, code = verify("--checkpoint", later)
	if code != 1 || !strings.Contains(errOut, "rows were removed from its end") || !strings.Contains(out, "not the checkpoint") {
		t.Errorf("lapse audit verify --checkpoint %s after the newest rows were cut = %d, want 1:\n%s%s", later, code, out, errOut)
	}
	// The earlier checkpoint's row is still there, as it was.
	if out, errOut, code := verify("--checkpoint", cp); code != 0 {
		t.Errorf("lapse audit verify --checkpoint %s (before the cut rows) = %d, want 0:\n%s%s", cp, code, out, errOut)
	}
	// A checkpoint whose row has another hash: the log was rewritten.
	n, _, _ := strings.Cut(cp, ":")
	if out, errOut, code := verify("--checkpoint", n+":"+strings.Repeat("ab", 32)); code != 1 || !strings.Contains(errOut, "rewritten up to it") {
		t.Errorf("lapse audit verify with another hash for row %s = %d, want 1:\n%s%s", n, code, out, errOut)
	}
}
