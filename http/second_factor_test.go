package http_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// TestSecondFactorCodes tries the codes a hostile caller would on a risky
// route: the code the operator just logged in with (a code is good once),
// the same code twice in two sessions, one from the previous window (good
// once, being newer than the last one taken), and none once the fresh
// window has lapsed. Each refused call refunds nothing and is in the log.
func TestSecondFactorCodes(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{SecondFactorWindow: time.Minute})
	g.operator("alice", access.RoleOperator)
	for i := range 5 {
		g.paidOrder(fmt.Sprintf("SF-%d", i), 1000)
	}
	codeAt := func(at time.Time) string {
		t.Helper()
		c, err := totp.GenerateCode(g.secrets["alice"], at)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	refund := func(no string, c cred, code string) *response {
		t.Helper()
		creds := []cred{c}
		if code != "" {
			creds = append(creds, header(lapsehttp.SecondFactorHeader, code))
		}
		return g.call("POST", "/v1/orders/"+no+"/refunds", `{"amount":10}`, creds...)
	}

	// The login's own code, at once, as the second factor: used already.
	loginCode := g.code("alice")
	r := g.call("POST", "/v1/sessions", fmt.Sprintf(`{"name":"alice","password":%q,"code":%q}`, password, loginCode)).want(t, http.StatusCreated)
	alice := session(sessionCookie(t, r).Value)
	refund("SF-0", alice, loginCode).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if rs := g.refunds("SF-0"); len(rs) != 0 {
		t.Fatalf("the login's code refunded %+v", rs)
	}

	// A code taken in one session is no good in another that is not fresh.
	g.clock.Advance(30 * time.Second)
	code := codeAt(g.clock.Now())
	refund("SF-1", alice, code).want(t, http.StatusCreated)
	other := session(g.login("alice")) // a code of a later step
	refund("SF-2", other, code).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if rs := g.refunds("SF-2"); len(rs) != 0 {
		t.Fatalf("a code used in another session refunded %+v", rs)
	}

	// The previous window's code, newer than the last taken: good once.
	g.clock.Advance(90 * time.Second)
	prev := codeAt(g.clock.Now().Add(-30 * time.Second))
	refund("SF-3", other, prev).want(t, http.StatusCreated)
	g.clock.Advance(time.Minute) // the second factor it gave is no longer fresh
	refund("SF-4", other, prev).refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	refund("SF-4", other, "").refused(t, http.StatusForbidden, lapse.EFORBIDDEN)
	if rs := g.refunds("SF-4"); len(rs) != 0 {
		t.Fatalf("a stale second factor refunded %+v", rs)
	}
	rows := g.rows()
	refused := 0
	for _, e := range rows {
		if e.Action == "refund.create" && len(e.Result) > 8 && e.Result[:8] == "refused:" {
			refused++
		}
	}
	if refused != 4 {
		t.Errorf("%d refused refunds in the audit log, want 4", refused)
	}
}
