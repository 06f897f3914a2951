package main_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuditVerifyHeadGone: the log's head removed by hand, with a row
// appended since that nothing can be sealed onto, is a break that lapse
// audit verify names (exit 1: it found something wrong), not a failure to
// run (exit 2).
func TestAuditVerifyHeadGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if out, errOut, code := tool(t, dir, "", "migrate"); code != 0 {
		t.Fatalf("lapse migrate = %d:\n%s%s", code, out, errOut)
	}
	if _, errOut, code := tool(t, dir, "", "apikey", "create", "--name", "first", "--scopes", "orders:read"); code != 0 {
		t.Fatalf("lapse apikey create = %d %s", code, errOut)
	}
	if out, errOut, code := tool(t, dir, "", "audit", "verify"); code != 0 {
		t.Fatalf("lapse audit verify = %d:\n%s%s", code, out, errOut)
	}
	sqldb, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "lapse.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sqldb.ExecContext(ctx, `DELETE FROM audit_head`); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := tool(t, dir, "", "apikey", "create", "--name", "second", "--scopes", "orders:read"); code != 0 {
		t.Fatalf("lapse apikey create = %d %s", code, errOut)
	}
	out, errOut, code := tool(t, dir, "", "audit", "verify")
	if code != 1 || !strings.Contains(errOut, "audit log broken at row 1: the log's head is gone") {
		t.Errorf("lapse audit verify with the head gone = %d, want 1 and the break:\n%s%s", code, out, errOut)
	}
}
