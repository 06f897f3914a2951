package http_test

import (
	"net/http"
	"testing"
)

// TestOptionalBodyRead: a route whose body may be left out (a card's
// visit, a delivery's retry) reads one that is sent as strictly as any
// other. {"count":5} on a visit was taken, and counted one visit, as was
// a text/plain body of anything.
func TestOptionalBodyRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/v1/cards/42/visits", "/v1/deliveries/42/retry"} {
		if p := e.do("POST", path, `{"count":5}`).want(t, http.StatusBadRequest).problem(t); p.Field != "count" {
			t.Errorf("POST %s {\"count\":5}: field %q (%s)", path, p.Field, p.Detail)
		}
		e.doType("POST", path, "text/plain", "garbage").want(t, http.StatusUnsupportedMediaType)
		e.do("POST", path, `{}`).want(t, http.StatusNotFound)
		e.do("POST", path, "").want(t, http.StatusNotFound)
	}
}
