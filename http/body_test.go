package http_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// slowBody sends a POST to path with its headers and the start of a body that
// Content-Length says is longer, then nothing. It is closed when the test
// ends.
func (e *env) slowBody(path string) net.Conn {
	e.t.Helper()
	return e.slowBodyWith(path, "")
}

// slowBodyWith is slowBody with more header lines, each ending in CRLF.
func (e *env) slowBodyWith(path, header string) net.Conn {
	e.t.Helper()
	u, err := url.Parse(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: 1000\r\n\r\n{\"order_no\":", path, u.Host, header); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestSlowBodyHoldsNoSlot has clients send headers and part of a body, then
// stop, more of them than there are in-flight slots: other requests are
// served meanwhile, and each slow one is answered 400 and cut at the body
// deadline.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	t.Parallel()
	// Long enough for the fast requests to be over well before it on a
	// loaded machine, where they have taken more than 300 ms.
	const timeout = time.Second
	e := newEnvWith(t, options{cfg: lapsehttp.Config{MaxInFlight: 2, BodyTimeout: timeout,
		Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}}})
	opened := time.Now()
	var slow []net.Conn
	for _, path := range []string{"/v1/orders", "/v1/orders", "/v1/payments/hmac/callback", "/v1/orders/X/events"} {
		slow = append(slow, e.slowBody(path))
	}
	e.do("POST", "/v1/orders", `{"order_no":"FAST-1","flow":"checkout","user_id":"u","amount":100,"currency":"CNY","ttl":"15m"}`).
		want(t, http.StatusCreated)
	e.do("GET", "/v1/orders/FAST-1", "").want(t, http.StatusOK)
	if took := time.Since(opened); took >= timeout {
		t.Fatalf("the fast requests took %v, past the slow bodies' deadline: the test proves nothing", took)
	}

	for i, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow body %d: no answer: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "could not be read") {
			t.Errorf("slow body %d: %d %s, want 400: could not be read", i, res.StatusCode, body)
		}
		if took := time.Since(opened); took > timeout+2*time.Second {
			t.Errorf("slow body %d answered after %v; its deadline was %v", i, took, timeout)
		}
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("slow body %d: the connection is still open after its answer (read %d, %v)", i, n, err)
		}
	}
}

// TestSlowBodyRefusedEarly: a request the server refuses for its URL or
// headers, before any handler, is refused once its body is read within the
// body deadline, as every other: answered before, its connection waited for
// the rest of the body with no deadline (net/http reads it before it
// answers), and a client that never sent it held it for good.
func TestSlowBodyRefusedEarly(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	e := newEnvWith(t, options{cfg: lapsehttp.Config{BodyTimeout: timeout}})
	for _, c := range []struct{ path, header, refusal string }{
		{"/v1/orders/A%00", "", "UTF-8 text without NUL"},
		{"/v1/orders", "Idempotency-Key: a\r\nIdempotency-Key: b\r\n", "sent 2 times"},
		{"/v1/orders", "Idempotency-Key: \r\n", "is sent empty"},
	} {
		conn := e.slowBodyWith(c.path, c.header)
		_ = conn.SetReadDeadline(time.Now().Add(timeout + 5*time.Second))
		got, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("%s %q: the connection is still open 5 s past the body deadline (%v; read %q)", c.path, c.header, err, got)
		}
		if !strings.HasPrefix(string(got), "HTTP/1.1 400") || !strings.Contains(string(got), c.refusal) {
			t.Errorf("%s %q: answered %q, want 400: %s", c.path, c.header, got, c.refusal)
		}
	}
}

// TestBrokenBodyRunsNoHandler: a request whose body did not arrive in full,
// or runs past the limit, takes no in-flight slot, so no handler may run
// for it. A GET, whose handler never reads its body, was served all the
// same, beyond the limit (with a body past MaxBodyBytes, any caller could
// run as many reads of the database at once as it had connections), or,
// its body cut by the deadline, answered 500. Each is refused with 400, as
// the handlers that read a body refuse it.
func TestBrokenBodyRunsNoHandler(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	e := newEnvWith(t, options{
		cfg:  lapsehttp.Config{MaxInFlight: 1, BodyTimeout: timeout, MaxBodyBytes: 64},
		wrap: func(s lapse.Store) lapse.Store { return &slowGet{Store: s, hold: hold, held: held} },
	})
	done := make(chan *response)
	go func() { done <- e.do("GET", "/v1/orders/SLOW", "") }()
	<-held // the one slot is taken
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, body, refusal string }{
		{"cut short", "Content-Length: 10\r\n\r\n{", "could not be read"},
		{"past the limit", "Content-Length: 100\r\n\r\n" + strings.Repeat(" ", 100), "larger than the limit of 64 bytes"},
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "GET /v1/orders/OTHER HTTP/1.1\r\nHost: %s\r\n%s", u.Host, c.body); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(timeout + 5*time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer: %v", c.name, err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), c.refusal) {
			t.Errorf("a GET whose body is %s, every slot taken: %d %s; want 400: %s", c.name, res.StatusCode, body, c.refusal)
		}
	}
	close(hold)
	(<-done).want(t, http.StatusNotFound)
}

// TestBodyTooLargeBeforeSlot checks that reading bodies ahead of the handler
// keeps the size limit's answers: 400 naming the limit, for the API's JSON
// and for a payment callback.
func TestBodyTooLargeBeforeSlot(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{cfg: lapsehttp.Config{MaxBodyBytes: 100, MaxInFlight: 4,
		Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}}})
	big := `{"order_no":"` + strings.Repeat("x", 200) + `"}`
	if p := e.do("POST", "/v1/orders", big).want(t, http.StatusBadRequest).problem(t); !strings.Contains(p.Detail, "limit of 100 bytes") {
		t.Errorf("create: %q does not name the limit", p.Detail)
	}
	r := e.callback(big, e.clock.Now()).want(t, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "larger than the limit of 100 bytes") {
		t.Errorf("callback: %s does not name the limit", r.body)
	}
	// Exactly at the limit is not too large.
	exact := `{"order_no":"` + strings.Repeat("x", 100-len(`{"order_no":""}`)) + `"}`
	if p := e.do("POST", "/v1/orders", exact).want(t, http.StatusBadRequest).problem(t); strings.Contains(p.Detail, "limit") {
		t.Errorf("a body of exactly the limit: %q", p.Detail)
	}
}

// TestCallbackReserve fills the slots that other requests may use: they are
// shed, while payment callbacks take the reserved ones; once every slot is
// taken a callback is shed too, with 503 in its provider's format.
func TestCallbackReserve(t *testing.T) {
	t.Parallel()
	hold, held := make(chan struct{}), make(chan string, 4)
	e := newEnvWith(t, options{
		cfg:  lapsehttp.Config{MaxInFlight: 3, CallbackReserve: 1, Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}},
		wrap: func(s lapse.Store) lapse.Store { return &holdGet{Store: s, hold: hold, held: held} },
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"hmac": closedProvider{}}}
		},
	})
	for _, no := range []string{"PAY-1", "HOLD-3"} {
		e.do("POST", "/v1/orders", `{"order_no":"`+no+`","flow":"checkout","user_id":"u","amount":1999,"currency":"CNY","ttl":"15m"}`).
			want(t, http.StatusCreated)
	}
	done := make(chan *response, 3)
	for _, no := range []string{"HOLD-1", "HOLD-2"} {
		go func() { done <- e.do("GET", "/v1/orders/"+no, "") }()
		<-held
	}
	r := e.do("GET", "/v1/orders/PAY-1", "")
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Errorf("a third request beside two held: %d, Retry-After %q; want 429 and 1", r.status, r.header.Get("Retry-After"))
	}
	now := e.clock.Now()
	e.callback(noticeBody("PAY-1", "txn-res-1", 1999, now), now).want(t, http.StatusOK)

	// A callback held in the reserved slot: now every slot is taken.
	go func() { done <- e.callback(noticeBody("HOLD-3", "txn-res-3", 1999, now), now) }()
	<-held
	r = e.callback(noticeBody("PAY-1", "txn-res-2", 1999, now), now)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), `"status":"error"`) {
		t.Errorf("a callback with every slot taken: %d %s, Retry-After %q; want 503, the hmac error ack and 1",
			r.status, r.body, r.header.Get("Retry-After"))
	}
	if n := strings.Count(e.logs.String(), "payment callbacks shed"); n != 1 {
		t.Errorf("the shed callback was logged %d times, want once:\n%s", n, e.logs)
	}
	close(hold)
	for range 3 {
		if r := <-done; r.status != http.StatusOK && r.status != http.StatusNotFound {
			t.Errorf("a held request answered %d %s", r.status, r.body)
		}
	}
}

// holdGet holds OrderGet of every order whose number starts with HOLD until
// hold closes, and says so on held.
type holdGet struct {
	lapse.Store
	hold <-chan struct{}
	held chan<- string
}

func (s *holdGet) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	if strings.HasPrefix(orderNo, "HOLD") {
		s.held <- orderNo
		<-s.hold
	}
	return s.Store.OrderGet(ctx, orderNo)
}
