package main_test

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAuditVerify: after a mixed run (keys made, orders, a payment and a
// refund by key, a manual close of which one order's customer had started
// paying, settled with the sandbox first) lapse audit verify passes; once
// one row is edited in the database it exits 1 naming that row.
func TestAuditVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	sandbox := []string{"--sandbox", "--sandbox-secret", "audit-secret"}
	p := startServe(t, dir, append(sandbox, "--delivery-poll", "100ms")...)
	key, errOut, code := tool(t, dir, "", "apikey", "create", "--name", "shop", "--scopes", "orders:write,orders:read,refunds:write")
	if code != 0 {
		t.Fatalf("lapse apikey create = %d %s", code, errOut)
	}
	key = strings.TrimSpace(key)
	create := func(no, user string) {
		t.Helper()
		body := map[string]any{"order_no": no, "flow": "checkout", "user_id": user, "amount": 2500, "currency": "CNY", "ttl": "1h"}
		if code, body := callKey(t, key, "POST", p.URL+"/v1/orders", body); code != http.StatusCreated {
			t.Fatalf("POST /v1/orders %s = %d %s", no, code, body)
		}
	}
	create("AU-1", "u-pay")
	if code := call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": "AU-1", "amount": 2500, "currency": "CNY"}, nil); code != http.StatusOK {
		t.Fatalf("POST /sandbox/pay = %d", code)
	}
	if code, body := callKey(t, key, "POST", p.URL+"/v1/orders/AU-1/refunds", map[string]any{"amount": 1000, "reason": "one cup broken"}); code != http.StatusCreated {
		t.Fatalf("a refund by key = %d %s", code, body)
	}
	for _, no := range []string{"AU-2", "AU-3", "AU-4"} {
		create(no, "u-close")
	}
	if code := call(t, "POST", p.URL+"/v1/orders/AU-4/payment-intents", map[string]any{"provider": "sandbox"}, nil); code != http.StatusOK {
		t.Fatalf("payment-intents AU-4 = %d", code)
	}
	out, errOut, code := tool(t, dir, "", append([]string{"close", "--user", "u-close", "--reason", "test close"}, sandbox...)...)
	if code != 0 || !strings.Contains(out, "3 closed") {
		t.Fatalf("lapse close = %d:\n%s%s", code, out, errOut)
	}
	// The sandbox closed AU-4's payment before the order closed: it takes
	// no payment now.
	if code := call(t, "POST", p.URL+"/sandbox/pay", map[string]any{"order_no": "AU-4", "amount": 2500, "currency": "CNY"}, nil); code != http.StatusConflict {
		t.Errorf("paying AU-4 after lapse close = %d, want 409: the sandbox's payment closed", code)
	}

	out, errOut, code = tool(t, dir, "", "audit", "verify")
	m := regexp.MustCompile(`^(\d+) rows verified`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("lapse audit verify after the run = %d:\n%s%s", code, out, errOut)
	}
	list, _, _ := tool(t, dir, "", "audit", "list", "--limit", "100")
	for _, action := range []string{"apikey.create", "order.create", "refund.create", "close.batch", "order.close"} {
		if !strings.Contains(list, action) {
			t.Errorf("lapse audit list has no %s row:\n%s", action, list)
		}
	}
	if got, _, _ := tool(t, dir, "", "audit", "list", "--target", "order:AU-3"); !regexp.MustCompile(`order\.close\s+order:AU-3\s+ok\s+"test close"`).MatchString(got) {
		t.Errorf("lapse audit list --target order:AU-3:\n%s", got)
	}

	// Edit one row as someone with the database's credentials could.
	sqldb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seq int64
	if err := sqldb.QueryRowContext(ctx, `SELECT seq FROM audit_log WHERE action = 'refund.create'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := sqldb.ExecContext(ctx, `UPDATE audit_log SET params = ? WHERE seq = ?`, []byte(`{"amount":1}`), seq); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = tool(t, dir, "", "audit", "verify")
	want := "lapse: audit log broken at row " + strconv.FormatInt(seq, 10) + ": its content does not match its hash"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("lapse audit verify after an edit = %d, want 1 and %q:\n%s%s", code, want, out, errOut)
	}
}
