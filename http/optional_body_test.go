package http_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestOptionalBodyRead: a route whose body may be left out (a card's
// visit, a delivery's or an order's retry) reads one that is sent as
// strictly as any other. {"count":5} on a visit was taken, and counted one
// visit, as was a text/plain body of anything. A body left out is left out
// however the client frames it: sent chunked, without a Content-Length, an
// empty body was decoded, and the call refused for its missing
// Content-Type.
func TestOptionalBodyRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/v1/cards/42/visits", "/v1/deliveries/42/retry", "/v1/orders/NONE/retry"} {
		if p := e.do("POST", path, `{"count":5}`).want(t, http.StatusBadRequest).problem(t); p.Field != "count" {
			t.Errorf("POST %s {\"count\":5}: field %q (%s)", path, p.Field, p.Detail)
		}
		e.doType("POST", path, "text/plain", "garbage").want(t, http.StatusUnsupportedMediaType)
		e.do("POST", path, `{}`).want(t, http.StatusNotFound)
		e.do("POST", path, "").want(t, http.StatusNotFound)
		e.chunked("POST", path, "").want(t, http.StatusNotFound)
		if p := e.chunked("POST", path, `{"count":5}`).want(t, http.StatusBadRequest).problem(t); p.Field != "count" {
			t.Errorf("POST %s chunked {\"count\":5}: field %q (%s)", path, p.Field, p.Detail)
		}
	}
}

// chunked sends body, JSON when it is not empty, without a Content-Length,
// and reads the answer.
func (e *env) chunked(method, path, body string) *response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return readResponse(e.t, res)
}
