package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// ErrReadTimeout is in the chain of an error when the receiver accepted the
// connection but did not answer within Config.ReadTimeout.
var ErrReadTimeout = errors.New("webhook: no answer within the read timeout")

// Limits on what is read of an answer: a snippet for the delivery's last
// error, and a bound on the rest so that a connection can be reused without a
// large body holding it.
const (
	snippetLen = 256
	drainLen   = 64 << 10
)

// newClient builds a client whose dialer enforces the connect timeout. The
// read timeout is enforced per request, by roundTrip, so that it also holds
// for a client passed in Config.HTTPClient.
func newClient(connect time.Duration, conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Receivers are on the open internet: the environment's egress proxy,
	// if any, is the way out (the clone keeps ProxyFromEnvironment).
	t.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = connect
	t.MaxIdleConnsPerHost = conns
	return &http.Client{
		Transport: t,
		// A redirected POST turns into a GET that delivers nothing, and
		// would carry the signature elsewhere; the status is reported
		// instead, as a misconfiguration to fix.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// answer is what the receiver said: its status and the start of its body.
type answer struct {
	status int
	body   string
}

// roundTrip sends req and reads the answer. The read timeout starts once a
// connection is held, so it bounds writing the request, waiting for the
// answer and reading it, and never eats into the connect timeout. written
// reports whether the whole request reached the connection: when it did, a
// failure leaves the outcome unknown, since the receiver may have acted on it.
func (s *Sink) roundTrip(ctx context.Context, req *http.Request) (a answer, written bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex // trace hooks may run on the transport's goroutines
		timer *time.Timer
		wrote atomic.Bool
	)
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			if timer == nil {
				timer = time.AfterFunc(s.readTimeout, func() { cancel(ErrReadTimeout) })
			}
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if timer != nil {
			timer.Stop()
		}
	}()
	resp, err := s.client.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrReadTimeout) {
			err = fmt.Errorf("%w (%s)", ErrReadTimeout, s.readTimeout)
		}
		return answer{}, wrote.Load(), err
	}
	defer resp.Body.Close()
	// The status is the answer; a body cut short does not change it.
	head, _ := io.ReadAll(io.LimitReader(resp.Body, snippetLen))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLen))
	return answer{status: resp.StatusCode, body: snippet(head)}, true, nil
}

// snippet makes the start of a body safe to keep in an error message that
// operators read: valid UTF-8, one line.
func snippet(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}
