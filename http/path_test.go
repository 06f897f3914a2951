package http_test

import (
	"net/http"
	"testing"

	"github.com/lapsehq/lapse/access"
)

// TestPathIDOneForm: every route about a record by its number takes the
// number in its one decimal form only. +1 and 01 were read as 1, while an
// audited call's row named its target "delivery:+1", "approval:01".
func TestPathIDOneForm(t *testing.T) {
	t.Parallel()
	g := newGuardedEnv(t, access.Config{})
	admin := bearer(g.admin)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/deliveries/+1/retry", ""},
		{"POST", "/v1/reviews/01/resolve", `{"note":"handled"}`},
		{"GET", "/v1/closes/+1", ""},
		{"GET", "/v1/approvals/01", ""},
		{"POST", "/v1/approvals/+1/approve", `{"code":"123456"}`},
		{"POST", "/v1/approvals/01/reject", `{"code":"123456"}`},
	} {
		if p := g.call(c.method, c.path, c.body, admin).want(t, http.StatusBadRequest).problem(t); p.Field != "id" {
			t.Errorf("%s %s: field %q (%s)", c.method, c.path, p.Field, p.Detail)
		}
	}
}
