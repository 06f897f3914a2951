package http_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alexedwards/argon2id"
	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/sqlite"
)

// TestGuardReadsPathValues: the guard of a route with a path value sees it
// before the handler runs: the audit row names the order the action was
// about, and the stake of a risky action is the order's, so that one above
// the approval amount waits for a second operator instead of running.
func TestGuardReadsPathValues(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clock := lapse.NewManualClock(start)
	e, err := engine.New(db, flows.Builtin(), engine.Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	as, err := access.New(db, access.Config{Clock: clock, ApprovalAmount: 1000,
		HashParams: &argon2id.Params{Memory: 1024, Iterations: 1, Parallelism: 1, SaltLength: 16, KeyLength: 32}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lapsehttp.NewServer(e, lapsehttp.Config{Access: as, Logger: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(srv.Close)

	_, enr, err := as.AddOperator(ctx, access.CLI("test"), "olga", access.RoleOperator, "a long enough password")
	if err != nil {
		t.Fatal(err)
	}
	code := func() string {
		clock.Advance(30 * time.Second)
		c, err := totp.GenerateCode(enr.Secret, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	token, _, err := as.Login(ctx, "olga", "a long enough password", code(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, no := range []string{"BIG-1", "SMALL-1"} {
		amount := int64(5000)
		if no == "SMALL-1" {
			amount = 500
		}
		if _, _, err := e.CreateOrder(ctx, &lapse.OrderCreate{OrderNo: no, Flow: "membership", UserID: "u1", Amount: amount, Currency: "CNY"},
			engine.Actor{FiredBy: lapse.FiredByApp, Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	post := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"reason": "test"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(lapsehttp.SecondFactorHeader, code())
		req.AddCookie(&http.Cookie{Name: lapsehttp.SessionCookie, Value: token})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Status string `json:"status"`
			Target string `json:"target"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.Status + " " + out.Target
	}

	// 50.00 CNY is above the approval amount of 10.00: it waits.
	if status, got := post("/v1/orders/BIG-1/retry"); status != http.StatusAccepted || got != "pending order:BIG-1" {
		t.Errorf("a retry above the approval amount = %d %q, want 202 pending order:BIG-1", status, got)
	}
	// 5.00 CNY runs, and fails (a pre-order has nothing to retry); its audit
	// row names the order.
	if status, _ := post("/v1/orders/SMALL-1/retry"); status != http.StatusConflict {
		t.Errorf("a retry of a pre-order = %d, want 409", status)
	}
	rows, err := db.AuditList(ctx, &lapse.AuditListParams{Action: "order.retry"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Target != "order:SMALL-1" || !strings.HasPrefix(rows[0].Result, "409") {
		for _, r := range rows {
			t.Logf("audit row: %s %s %s", r.Action, r.Target, r.Result)
		}
		t.Errorf("the audit rows of order.retry do not name SMALL-1")
	}
}

// TestAuditTargetIsKept: the target of an audit row comes from the request
// (a path value, a field of the body) before anything checks it, so a
// refused request could name one that no store keeps: 2,000 bytes, past
// MySQL's column, or NUL, which PostgreSQL refuses in text. The row of the
// refusal was then not written. A target is cut to what every store keeps.
func TestAuditTargetIsKept(t *testing.T) {
	g := newGuardedEnv(t, access.Config{})
	writer := bearer(g.key("writer", access.ScopeOrdersWrite))
	g.rows() // the keys'
	long := strings.Repeat("a", 2000)
	g.call("POST", "/v1/orders", `{"order_no":"`+long+`","flow":"checkout","user_id":"u1","amount":1,"currency":"CNY"}`, writer).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("POST", "/v1/orders", `{"order_no":"a\u0000b","flow":"checkout","user_id":"u1","amount":1,"currency":"CNY"}`, writer).
		refused(t, http.StatusBadRequest, lapse.EINVALID)
	g.call("PATCH", "/v1/orders/"+long+"/deadline", `{"extend_by":"1m"}`, writer).refused(t, http.StatusNotFound, lapse.ENOTFOUND)
	rows := g.wantRows("order.create writer 400", "order.create writer 400", "order.deadline writer 404")
	for _, e := range rows {
		if len(e.Target) > len("order:")+lapse.MaxReasonLen || strings.ContainsRune(e.Target, 0) || !strings.HasPrefix(e.Target, "order:a") {
			t.Errorf("audit row %s has the target %.80q… (%d bytes); want one every store keeps", e.Action, e.Target, len(e.Target))
		}
	}
}
