package httpcall

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/lapsehq/lapse"
)

// Timeouts are an outbound port's connect and read timeouts, which a
// configuration reload may change while calls are in flight: a new dial and
// a new request take the values of the moment.
type Timeouts struct {
	connect, read atomic.Int64
}

// NewTimeouts returns Timeouts set to connect and read.
func NewTimeouts(connect, read time.Duration) *Timeouts {
	t := &Timeouts{}
	t.Set(connect, read)
	return t
}

// Set changes both timeouts; a zero leaves that one as it is.
func (t *Timeouts) Set(connect, read time.Duration) {
	if connect > 0 {
		t.connect.Store(int64(connect))
	}
	if read > 0 {
		t.read.Store(int64(read))
	}
}

// Connect and Read return the timeouts.
func (t *Timeouts) Connect() time.Duration { return time.Duration(t.connect.Load()) }
func (t *Timeouts) Read() time.Duration    { return time.Duration(t.read.Load()) }

// MaxAnswerHeaderBytes bounds the headers of an answer to an outbound call.
// A webhook receiver, a merchant's port or a payment adapter answers with a
// status and a few headers; net/http would read up to 10 MB of them into
// memory, for every call in flight, from a receiver that is broken or
// hostile. An answer whose headers run past the bound fails the call, after
// the request was written: its outcome is unknown.
const MaxAnswerHeaderBytes = 64 << 10

// NewClient returns a client for one outbound port: its dialer enforces the
// connect timeout of t at each dial, and its TLS handshake that timeout at
// each handshake, as t stands then (Exchange enforces the read timeout, per
// request), it reads at most MaxAnswerHeaderBytes of an answer's headers, it
// keeps up to conns idle connections per host, and it follows no
// redirect: a redirected POST turns into a GET that applies nothing, so the
// redirect's status is reported instead, as a misconfiguration to fix. A
// direct client ignores the environment's proxy: a merchant's own service is
// reached without one, whose failures would blur "not sent" and "unknown".
func NewClient(t *Timeouts, conns int, direct bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if direct {
		tr.Proxy = nil
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: t.Connect(), KeepAlive: 30 * time.Second}
		return d.DialContext(ctx, network, addr)
	}
	tr.MaxIdleConnsPerHost = conns
	tr.MaxResponseHeaderBytes = MaxAnswerHeaderBytes
	return &http.Client{
		Transport:     &transport{timeouts: t, base: tr},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// transport is an http.Transport whose TLS handshake timeout follows the
// connect timeout of its Timeouts. An http.Transport's
// TLSHandshakeTimeout may not change once it is in use, so a change of
// the timeout swaps in a copy of the transport that has the new one:
// calls from then on use the copy, those in flight finish on the old one,
// whose idle connections are closed (and those that come back to it idle
// are closed after its IdleConnTimeout).
type transport struct {
	timeouts *Timeouts
	base     *http.Transport // never used itself: the template of each copy

	mu  sync.Mutex
	cur *http.Transport
	at  time.Duration // cur's TLSHandshakeTimeout
}

func (x *transport) current() *http.Transport {
	c := x.timeouts.Connect()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cur == nil || x.at != c {
		old := x.cur
		x.cur, x.at = x.base.Clone(), c
		x.cur.TLSHandshakeTimeout = c
		if old != nil {
			old.CloseIdleConnections()
		}
	}
	return x.cur
}

func (x *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return x.current().RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the transport in
// use (http.Client.CloseIdleConnections).
func (x *transport) CloseIdleConnections() {
	x.mu.Lock()
	cur := x.cur
	x.mu.Unlock()
	if cur != nil {
		cur.CloseIdleConnections()
	}
}

// Answer is what the other side said: its status and the start of its body,
// made safe for an error message.
type Answer struct {
	Status int
	Body   string
	// RetryAfter is the answer's Retry-After header, as sent.
	RetryAfter string
}

// Limits on what Brief reads of an answer: a snippet for the error message,
// and a bound on the rest so that the connection can be reused without a
// large body holding it.
const (
	snippetLen = 256
	drainLen   = 64 << 10
)

// Brief is Exchange for a port whose answer is its status: it keeps the
// status and the start of the body. A body cut short does not change the
// answer.
func Brief(ctx context.Context, client *http.Client, req *http.Request, readTimeout time.Duration, timeout error) (a Answer, written bool, err error) {
	written, err = Exchange(ctx, client, req, readTimeout, timeout, func(resp *http.Response) error {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, snippetLen))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLen))
		a = Answer{Status: resp.StatusCode, Body: snippet(head), RetryAfter: resp.Header.Get("Retry-After")}
		return nil
	})
	return a, written, err
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

// StatusError is an answer that was not a success. It wraps lapse.ErrRefused
// when the other side refused for good.
type StatusError struct {
	StatusCode int
	// Body is the start of the answer's body, made printable, for the
	// delivery's last error.
	Body    string
	Refused bool
	// Wait is how long the other side asked to be left alone (Retry-After),
	// or zero.
	Wait time.Duration
}

func (e *StatusError) Error() string {
	s := "HTTP " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
	if e.Refused {
		s += ", refused for good"
	}
	if e.Wait > 0 {
		s += ", retry after " + e.Wait.String()
	}
	if e.Body != "" {
		s += ": " + strconv.Quote(e.Body)
	}
	return s
}

// RetryAfter returns Wait: the Deliverer waits that long at least before
// the next attempt (lapse.RetryAfter).
func (e *StatusError) RetryAfter() time.Duration { return e.Wait }

// ParseRetryAfter reads a Retry-After header at now: a number of seconds,
// or an HTTP date. It returns zero for a header that is absent, does not
// parse, or names a time past.
func ParseRetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseUint(h, 10, 63); err == nil {
		if n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// maxRetryAfter bounds what ParseRetryAfter returns, far beyond any
// schedule's longest wait, which bounds it in turn.
const maxRetryAfter = 7 * 24 * time.Hour

// Unwrap returns lapse.ErrRefused for a refusal, so that errors.Is finds it.
func (e *StatusError) Unwrap() error {
	if e.Refused {
		return lapse.ErrRefused
	}
	return nil
}
