package port_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/port"
)

// TestDeliverRetryAfter: a port's 429 or 503 says how long the service asked
// to be left alone (Retry-After, in seconds or as a date), as a webhook
// receiver's does, for the Deliverer to wait at least that long
// (lapse.RetryAfter, bounded by the schedule's longest wait); it was read by
// no one, and the next attempt came when the schedule said, however soon.
func TestDeliverRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		header string
		want   time.Duration
	}{
		{429, "120", 2 * time.Minute},
		{503, start.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{429, start.Add(-time.Minute).Format(http.TimeFormat), 0}, // past
		{429, "soon", 0},
		{429, "-5", 0},
		{429, "", 0},
		{500, "120", 0}, // not a status that asks to wait
		{408, "120", 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status, tt.header), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(tt.status)
			}))
			t.Cleanup(srv.Close)
			p := newPort(t, srv.URL, port.Config{Clock: lapse.NewManualClock(start)})
			err := p.Deliver(context.Background(), event("order.closed"))
			if err == nil || errors.Is(err, lapse.ErrRefused) {
				t.Fatalf("answered %d: %v; want a retryable error", tt.status, err)
			}
			var ra lapse.RetryAfter
			got := time.Duration(0)
			if errors.As(err, &ra) {
				got = ra.RetryAfter()
			}
			if got != tt.want {
				t.Errorf("answered %d with Retry-After %q: asks to wait %v, want %v (%v)", tt.status, tt.header, got, tt.want, err)
			}
		})
	}
}

// TestQueryRetryAfter: a port asked about an unknown outcome that answers
// 429 or 503 with Retry-After says how long to wait before it is asked
// again, as its answer to a delivery does.
func TestQueryRetryAfter(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	p := newPort(t, srv.URL, port.Config{Clock: lapse.NewManualClock(start)})
	_, err := p.Query(context.Background(), event("order.closed"))
	var ra lapse.RetryAfter
	if err == nil || errors.Is(err, lapse.ErrRefused) || !errors.As(err, &ra) || ra.RetryAfter() != 30*time.Second {
		t.Fatalf("Query answered 503 with Retry-After 30: %v; want an error asking to wait 30s", err)
	}
}
