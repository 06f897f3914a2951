package httpcall

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/testenv"
)

// TestExchangeErrorHidesTheURLsSecrets: the error of a request that fails
// shows the URL without its query's values or its password, which an
// operator reading a delivery's last error must not learn.
func TestExchangeErrorHidesTheURLsSecrets(t *testing.T) {
	t.Parallel()
	errTimeout := errors.New("read timeout")
	req, err := http.NewRequest("POST", "http://hook:pa55word@"+testenv.Refused(t)+"/in?token=s3cret&v=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Exchange(context.Background(), NewClient(NewTimeouts(time.Second, time.Second), 1, true), req, time.Second, errTimeout,
		func(*http.Response) error { return nil })
	if err == nil {
		t.Fatal("a request to a refused address succeeded")
	}
	msg := err.Error()
	if strings.Contains(msg, "s3cret") || strings.Contains(msg, "pa55word") || !strings.Contains(msg, "token=xxxxx") ||
		!strings.Contains(msg, "/in?") {
		t.Errorf("the error shows %q; want the URL with its query's values and password masked", msg)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://h.example/x":                 "https://h.example/x",
		"https://h.example/x?token=a&token=b": "https://h.example/x?token=xxxxx",
		"https://u:p@h.example/x?k=v":         "https://u:xxxxx@h.example/x?k=xxxxx",
		"https://tok3n@h.example/x":           "https://xxxxx@h.example/x",
		"%zz":                                 "(a URL that does not parse)",
		// A token in the path, as Slack's and Discord's incoming webhooks
		// carry it; an API's own words are kept.
		"https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/abcdEFGHijklMNOPqrstUVWX": "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/xxxxx",
		"https://discord.com/api/webhooks/123456789012345678/tok-tok-tok-tok-tok":       "https://discord.com/api/webhooks/xxxxx/xxxxx",
		"https://merchant.example/v1/stock/refund_requests?k=v":                         "https://merchant.example/v1/stock/refund_requests?k=xxxxx",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAnswerHeadersBounded: an answer whose headers run past
// MaxAnswerHeaderBytes is a failed call, after the request was written,
// rather than headers read into memory up to net/http's 10 MB default on
// every call in flight (a hostile or broken receiver).
func TestAnswerHeadersBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 4 {
			w.Header().Set(fmt.Sprintf("X-Padding-%d", i), strings.Repeat("x", MaxAnswerHeaderBytes/4))
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	client := NewClient(NewTimeouts(time.Second, 5*time.Second), 1, true)
	req, err := http.NewRequest("POST", srv.URL, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	a, written, err := Brief(context.Background(), client, req, 5*time.Second, errors.New("read timeout"))
	if err == nil || !written {
		t.Fatalf("an answer with %d bytes of headers: status %d, written %v, err %v; want a failure after the request was written",
			MaxAnswerHeaderBytes, a.Status, written, err)
	}

	// Headers within the bound are read as always.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Padding", strings.Repeat("x", MaxAnswerHeaderBytes/2))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv2.Close)
	req, err = http.NewRequest("POST", srv2.URL, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := Brief(context.Background(), client, req, 5*time.Second, errors.New("read timeout")); err != nil || a.Status != http.StatusNoContent {
		t.Fatalf("an answer with headers within the bound: %+v, %v", a, err)
	}
}

// TestExchangeReadInTime: an answer that read took in full is the answer,
// however late the read timeout fires after it: it was turned into a
// timeout error wrapping nothing ("%!w(<nil>)"), and a call that had its
// answer was retried or queried back as if its outcome were unknown.
func TestExchangeReadInTime(t *testing.T) {
	t.Parallel()
	errTimeout := errors.New("read timeout")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"ok":true}`) }))
	defer srv.Close()
	req, err := http.NewRequest("POST", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	written, err := Exchange(context.Background(), NewClient(NewTimeouts(time.Second, time.Second), 1, true), req, 50*time.Millisecond, errTimeout,
		func(*http.Response) error {
			time.Sleep(200 * time.Millisecond) // the timer fires meanwhile
			return nil
		})
	if err != nil || !written {
		t.Errorf("Exchange of an answer read in full = %v, %v; want written, no error", written, err)
	}
}
