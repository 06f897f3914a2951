package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/testenv"
)

// TestDatabaseRefuses has PostgreSQL refuse lapse serve's role (its
// connections ended, new ones refused with 53300): a burst of 50 creates is
// answered 503 with Retry-After and code unavailable, and logged once. Once
// the role is let back in, creates succeed again.
func TestDatabaseRefuses(t *testing.T) {
	t.Parallel()
	role := testenv.PostgresRole(t, testenv.PostgresSchema(t))
	p := startServe(t, t.TempDir(), "--db", role.DSN, "--db-conns", "4", "--db-work-conns", "2")
	create := func(no string) map[string]any {
		return map[string]any{"order_no": no, "flow": "checkout", "user_id": "u1", "amount": 2500, "currency": "CNY", "ttl": "15m"}
	}
	if code := call(t, "POST", p.URL+"/v1/orders", create("DOWN-0"), nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d", code)
	}

	role.Refuse()
	var wg sync.WaitGroup
	for w := range 10 { // 50 creates, 10 at a time
		wg.Go(func() {
			for i := range 5 {
				code, body, header := send(t, client, "POST", p.URL+"/v1/orders", create(fmt.Sprintf("DOWN-%d-%d", w, i)), nil)
				var prob struct{ Code string }
				_ = json.Unmarshal([]byte(body), &prob)
				if code != http.StatusServiceUnavailable || header.Get("Retry-After") == "" || prob.Code != "unavailable" {
					t.Errorf("create while the database refuses: %d %s, Retry-After %q; want 503, code unavailable and Retry-After", code, body, header.Get("Retry-After"))
				}
			}
		})
	}
	wg.Wait()
	if n := strings.Count(p.Logs(), `"msg":"http: a dependency is unavailable; answering 503 with Retry-After"`); n != 1 {
		t.Errorf("50 refused creates were logged %d times, want once", n)
	}

	role.Admit()
	waitFor(t, 10*time.Second, func() bool {
		return callQuiet("POST", p.URL+"/v1/orders", create("UP-1")) == http.StatusCreated
	})
}
