package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	lapsehttp "github.com/lapsehq/lapse/http"
)

// TestHeaderLimit: a request whose headers run past maxHeaderBytes is
// answered 431 by every listener of lapse serve before any handler runs,
// while one with the few kilobytes a caller needs is served.
func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), time.Minute)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	send := func(headerBytes int) int {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var b strings.Builder
		b.WriteString("GET /healthz HTTP/1.1\r\nHost: lapse\r\n")
		for i := 0; b.Len() < headerBytes; i++ {
			fmt.Fprintf(&b, "X-Padding-%d: %s\r\n", i, strings.Repeat("x", 1000))
		}
		b.WriteString("\r\n")
		if _, err := c.Write([]byte(b.String())); err != nil {
			t.Fatalf("send %d bytes of headers: %v", headerBytes, err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%d bytes of headers: no answer: %v", headerBytes, err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	if got := send(8 << 10); got != http.StatusNoContent {
		t.Errorf("8 KiB of headers: %d, want 204", got)
	}
	if got := send(256 << 10); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("256 KiB of headers: %d, want 431", got)
	}
}

// TestListenersCutSlowBodies: on the listeners of their own (--metrics-http,
// --console-http), a request whose body stops halfway is answered and its
// connection closed within the body deadline, whichever route it asks for,
// as on the API's: net/http reads what a handler left of a body before it
// answers, and without a deadline it waited for the rest for good, holding
// the connection and its goroutine.
func TestListenersCutSlowBodies(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	for name, srv := range map[string]*http.Server{
		"metrics": metricsServer(prometheus.NewRegistry(), timeout),
		"console": consoleServer(http.NotFoundHandler(), timeout),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			for _, path := range []string{"/metrics", "/", "/elsewhere"} {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				start := time.Now()
				if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: lapse\r\nContent-Length: 1000\r\n\r\n{", path); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(timeout + 5*time.Second))
				if _, err := io.ReadAll(c); err != nil {
					t.Fatalf("POST %s with a body that stops: the connection is still open %v later (%v)", path, time.Since(start).Round(time.Millisecond), err)
				}
			}
		})
	}
}

// TestOptionsStarReachesHandler: OPTIONS * goes to Lapse's handler, which
// reads its body within the body deadline, not to net/http's own answer to
// it, which read up to 4 KiB of body first with no deadline: a client that
// sent part of one held the connection for good.
func TestOptionsStarReachesHandler(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(lapsehttp.BodyDeadline(http.NotFoundHandler(), timeout, 1<<10), time.Minute)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprint(c, "OPTIONS * HTTP/1.1\r\nHost: lapse\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout + 5*time.Second))
	if got, err := io.ReadAll(c); err != nil {
		t.Fatalf("OPTIONS * with a body that stops: the connection is still open 5 s past the body deadline (%v; read %q)", err, got)
	}
}

// TestMaxConns: a listener capped by limitConns (--max-conns) keeps at
// most its cap of connections open, idle keep-alive ones counted; the
// connections past it are not refused but wait in the kernel's backlog,
// and a payment callback among them is served as soon as one frees.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	const limit, extra = 4, 6
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if limitConns(ln, 0) != ln {
		t.Error("--max-conns 0 does not leave the listener as it is")
	}
	// Counted by the connections the capped listener hands out, each until
	// its Close, which frees its place (net/http's ConnState says a
	// connection closed only after its Close: a connection let in by that
	// Close would be counted beside it).
	cl := &countingListener{Listener: limitConns(ln, limit)}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), time.Minute)
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })

	send := func(c net.Conn, req string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(c net.Conn, r *bufio.Reader, within time.Duration) (int, error) {
		_ = c.SetReadDeadline(time.Now().Add(within))
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			return 0, err
		}
		_ = res.Body.Close()
		return res.StatusCode, nil
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("dial past the cap: %v (want it to wait in the backlog, not be refused)", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// limit keep-alive connections, each served once and then idle.
	held := make([]net.Conn, limit)
	for i := range held {
		held[i] = dial()
		send(held[i], "GET /healthz HTTP/1.1\r\nHost: lapse\r\n\r\n")
		if code, err := answer(held[i], bufio.NewReader(held[i]), 5*time.Second); err != nil || code != http.StatusNoContent {
			t.Fatalf("connection %d within the cap: %d, %v", i, code, err)
		}
	}
	// extra more: connected (the kernel's backlog), not served.
	const callback = "POST /v1/payments/sandbox/callback HTTP/1.1\r\nHost: lapse\r\nContent-Length: 2\r\n\r\n{}"
	waiting := make([]net.Conn, extra)
	readers := make([]*bufio.Reader, extra)
	for i := range waiting {
		waiting[i] = dial()
		readers[i] = bufio.NewReader(waiting[i])
		send(waiting[i], callback)
	}
	for i := range waiting {
		if code, err := answer(waiting[i], readers[i], 100*time.Millisecond); err == nil {
			t.Errorf("connection %d past the cap was served (%d) while %d were open", limit+i, code, limit)
		}
	}
	if open, most := cl.counts(); open > limit || most > limit {
		t.Errorf("%d connections open (at most %d) with a cap of %d", open, most, limit)
	}
	// One frees: the first callback waiting is served.
	_ = held[0].Close()
	if code, err := answer(waiting[0], readers[0], 5*time.Second); err != nil || code != http.StatusNoContent {
		t.Errorf("callback once a connection freed: %d, %v; want 204", code, err)
	}
	if _, most := cl.counts(); most > limit {
		t.Errorf("at most %d connections were open with a cap of %d", most, limit)
	}
}

// countingListener counts the connections it hands out that are not yet
// closed, and the most at once.
type countingListener struct {
	net.Listener
	mu         sync.Mutex
	open, most int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.open++
	l.most = max(l.most, l.open)
	l.mu.Unlock()
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) counts() (open, most int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.most
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

// Close counts the connection closed before it frees its place.
func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
