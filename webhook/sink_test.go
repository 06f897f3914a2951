package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/webhook"
)

// delivery returns a delivery of an order.closed event, as the store hands
// it to a handler.
func delivery() *lapse.Delivery {
	o := &lapse.Order{OrderNo: "A-1", Flow: "checkout", State: "CLOSED", Amount: 1990, Currency: "CNY",
		UserID: "u1", Items: []lapse.Item{{SKU: "TEA", Qty: 1}}, CreatedAt: signedAt, UpdatedAt: signedAt}
	ev := lapse.NewOutboxEvent("order.closed", o, nil)
	return &lapse.Delivery{ID: 7, EventID: ev.ID, EventType: ev.Type, OrderNo: o.OrderNo, Subscriber: "hooks", Event: &ev}
}

// received is one request a test receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver starts a server that records what it gets and answers status.
func receiver(t *testing.T, status int) (url string, got func() []received) {
	t.Helper()
	var (
		mu   sync.Mutex
		reqs []received
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, received{r.Header.Clone(), b})
		mu.Unlock()
		w.Header().Set("Location", "/elsewhere")
		w.WriteHeader(status)
		fmt.Fprint(w, "reason\x00 from\nthe receiver")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), reqs...)
	}
}

func newSink(t *testing.T, cfg webhook.Config) *webhook.Sink {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = secret
	}
	if cfg.Clock == nil {
		cfg.Clock = lapse.NewManualClock(signedAt)
	}
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	return s
}

func TestDeliverSigned(t *testing.T) {
	t.Parallel()
	url, got := receiver(t, http.StatusNoContent)
	clock := lapse.NewManualClock(signedAt)
	s := newSink(t, webhook.Config{URL: url, Clock: clock})
	d := delivery()
	if err := s.Deliver(context.Background(), d); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	reqs := got()
	if len(reqs) != 1 {
		t.Fatalf("the receiver got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if string(r.body) != string(d.Event.Payload) {
		t.Errorf("body %s, want the event's payload %s", r.body, d.Event.Payload)
	}
	for k, want := range map[string]string{
		"Content-Type":            "application/json",
		webhook.HeaderEventID:     d.EventID,
		webhook.HeaderEventType:   "order.closed",
		webhook.HeaderSignature:   webhook.Sign(signedAt, d.Event.Payload, secret),
		"Idempotency-Key":         "",
		"Lapse-Signature-Version": "",
	} {
		if v := r.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	sig := r.header.Get(webhook.HeaderSignature)
	if err := webhook.Verify(secret, sig, r.body, signedAt.Add(time.Minute), time.Minute); err != nil {
		t.Errorf("the receiver cannot verify the request: %v", err)
	}
	if err := webhook.Verify(secret, sig, r.body, signedAt.Add(time.Hour), time.Minute); !errors.Is(err, webhook.ErrStaleSignature) {
		t.Errorf("an hour later: %v, want ErrStaleSignature", err)
	}
	if err := webhook.Verify(secret, sig, append(r.body[:len(r.body)-1:len(r.body)-1], ' ', '}'), signedAt, 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("tampered body: %v, want ErrSignatureMismatch", err)
	}
	if err := webhook.Verify(newSecret, sig, r.body, signedAt, 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("wrong secret: %v, want ErrSignatureMismatch", err)
	}

	// A retry is signed anew, at its own time, for the same event id.
	clock.Advance(10 * time.Minute)
	if err := s.Deliver(context.Background(), d); err != nil {
		t.Fatalf("Deliver again: %v", err)
	}
	again := got()[1]
	if again.header.Get(webhook.HeaderEventID) != d.EventID {
		t.Errorf("the retry has event id %q, want %q", again.header.Get(webhook.HeaderEventID), d.EventID)
	}
	if err := webhook.Verify(secret, again.header.Get(webhook.HeaderSignature), again.body, clock.Now(), 0); err != nil {
		t.Errorf("the retry does not verify at its own time: %v", err)
	}
}

func TestDeliverSignsWithEverySecret(t *testing.T) {
	t.Parallel()
	url, got := receiver(t, http.StatusOK)
	s := newSink(t, webhook.Config{URL: url, Secret: secret, Secrets: []string{newSecret}})
	if err := s.Deliver(context.Background(), delivery()); err != nil {
		t.Fatal(err)
	}
	r := got()[0]
	for _, sec := range []string{secret, newSecret} {
		if err := webhook.Verify(sec, r.header.Get(webhook.HeaderSignature), r.body, signedAt, 0); err != nil {
			t.Errorf("Verify with %q: %v", sec, err)
		}
	}
}

func TestDeliverStatusMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   string // ok, refused, retry
	}{
		{200, "ok"}, {202, "ok"}, {204, "ok"}, {409, "ok"},
		{400, "refused"}, {401, "refused"}, {403, "refused"}, {404, "refused"}, {410, "refused"}, {422, "refused"},
		{408, "retry"}, {425, "retry"}, {429, "retry"},
		{500, "retry"}, {502, "retry"}, {503, "retry"}, {301, "retry"}, {307, "retry"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			t.Parallel()
			url, got := receiver(t, tt.status)
			err := newSink(t, webhook.Config{URL: url}).Deliver(context.Background(), delivery())
			switch tt.want {
			case "ok":
				if err != nil {
					t.Errorf("answered %d: %v; want nil", tt.status, err)
				}
			case "refused":
				if !errors.Is(err, lapse.ErrRefused) {
					t.Errorf("answered %d: %v; want ErrRefused", tt.status, err)
				}
			case "retry":
				if err == nil || errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrUnknownOutcome) {
					t.Errorf("answered %d: %v; want a retryable error", tt.status, err)
				}
			}
			var se *webhook.StatusError
			if err != nil && (!errors.As(err, &se) || se.StatusCode != tt.status || !strings.Contains(err.Error(), `"reason  from the receiver"`)) {
				t.Errorf("error %q: want a StatusError %d with the start of the body, printable", err, tt.status)
			}
			if n := len(got()); n != 1 {
				t.Errorf("the receiver got %d requests: redirects must not be followed", n)
			}
		})
	}
}

// silent returns the address of a server that accepts connections and reads
// requests but never answers.
func silent(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c) // until the client hangs up
			})
		}
	})
	return l.Addr().String()
}

func TestReadTimeout(t *testing.T) {
	t.Parallel()
	s := newSink(t, webhook.Config{URL: "http://" + silent(t), ConnectTimeout: time.Minute, ReadTimeout: 200 * time.Millisecond})
	began := time.Now()
	err := s.Deliver(context.Background(), delivery())
	took := time.Since(began)
	if !errors.Is(err, webhook.ErrReadTimeout) || !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Deliver to a receiver that never answers: %v; want ErrReadTimeout, outcome unknown", err)
	}
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("a read timeout of 200ms took %v", took)
	}
}

func TestCallerDeadlineBeatsReadTimeout(t *testing.T) {
	t.Parallel()
	s := newSink(t, webhook.Config{URL: "http://" + silent(t), ReadTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Deliver(ctx, delivery())
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, webhook.ErrReadTimeout) {
		t.Fatalf("Deliver past the caller's deadline: %v; want context.DeadlineExceeded", err)
	}
}

func TestConnectionRefusedIsNotSent(t *testing.T) {
	t.Parallel()
	addr := testenv.Refused(t)
	err := newSink(t, webhook.Config{URL: "http://" + addr}).Deliver(context.Background(), delivery())
	if err == nil || errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, lapse.ErrRefused) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("Deliver to a closed port: %v; want a retryable error saying nothing was sent", err)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	const url = "https://hooks.example.com/lapse"
	for _, tt := range []struct {
		name string
		cfg  webhook.Config
	}{
		{"no URL", webhook.Config{Secret: secret}},
		{"relative URL", webhook.Config{URL: "/lapse", Secret: secret}},
		{"not http", webhook.Config{URL: "ftp://hooks.example.com", Secret: secret}},
		{"no secret", webhook.Config{URL: url}},
		{"short secret", webhook.Config{URL: url, Secret: "0123456789abcde"}},
		{"short rotation secret", webhook.Config{URL: url, Secret: secret, Secrets: []string{"short"}}},
		{"secret twice", webhook.Config{URL: url, Secret: secret, Secrets: []string{secret}}},
		{"negative timeout", webhook.Config{URL: url, Secret: secret, ReadTimeout: -time.Second}},
	} {
		if _, err := webhook.New(tt.cfg); err == nil {
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
	if _, err := webhook.New(webhook.Config{URL: url, Secrets: []string{newSecret}}); err == nil {
		t.Errorf("New with rotation secrets but no Secret succeeded")
	}
	if _, err := webhook.New(webhook.Config{URL: url, Secret: secret}); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

// TestDeliverRetryAfter: a 429 or 503 says how long the receiver asked to be
// left alone (Retry-After, in seconds or as a date), for the Deliverer to
// wait at least that long (lapse.RetryAfter); it was read by no one, and
// the next attempt came when the schedule said, however soon.
func TestDeliverRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		header string
		want   time.Duration
	}{
		{429, "120", 2 * time.Minute},
		{503, signedAt.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{429, signedAt.Add(-time.Minute).Format(http.TimeFormat), 0}, // past
		{429, "soon", 0},
		{429, "-5", 0},
		{429, "", 0},
		{500, "120", 0}, // not a status that asks to wait
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
			err := newSink(t, webhook.Config{URL: srv.URL}).Deliver(context.Background(), delivery())
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
