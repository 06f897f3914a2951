package port_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/port"
)

// TestCardIssuer: the card issuer protocol: the path, the key and the body
// sent, and how each answer is read.
func TestCardIssuer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	status := http.StatusCreated
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("body: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get(port.HeaderIdempotencyKey)+" "+r.Header.Get(port.HeaderOrderNo))
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	p, err := port.New("cards", port.Config{URL: srv.URL + "/v1/cards"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := &lapse.CardIssueRequest{IdempotencyKey: "lapse-cards-M-1", OrderNo: "M-1", UserID: "u1",
		Cards: []lapse.CardSpec{{Product: "swim-10", Visits: 10}}}
	if _, err := p.Issue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Revoke(ctx, &lapse.CardRevokeRequest{IdempotencyKey: "lapse-revoke-M-1", OrderNo: "M-1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST /v1/cards/issue lapse-cards-M-1 M-1", "POST /v1/cards/revoke lapse-revoke-M-1 M-1"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("requests %q, want %q", got, want)
	}
	for _, c := range []struct {
		status  int
		ok      bool
		refused bool
	}{{http.StatusConflict, true, false}, {http.StatusServiceUnavailable, false, false}, {http.StatusTooManyRequests, false, false},
		{http.StatusUnprocessableEntity, false, true}} {
		mu.Lock()
		status = c.status
		mu.Unlock()
		_, err := p.Issue(ctx, req)
		if (err == nil) != c.ok || errors.Is(err, lapse.ErrRefused) != c.refused {
			t.Errorf("answer %d: %v (want ok %v, refused %v)", c.status, err, c.ok, c.refused)
		}
	}
}
