package faultproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/faultproxy"
)

// echoServer starts a TCP server that writes back whatever it reads, closed
// when tb ends.
func echoServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	tb.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// newProxy starts a proxy to an echo server, closed when tb ends.
func newProxy(tb testing.TB) *faultproxy.Proxy {
	tb.Helper()
	p, err := faultproxy.New(echoServer(tb))
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads its echo, failing tb if it takes longer than
// within.
func roundTrip(tb testing.TB, c net.Conn, msg string, within time.Duration) {
	tb.Helper()
	_ = c.SetDeadline(time.Now().Add(within))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		tb.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		tb.Fatalf("read echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		tb.Fatalf("echo = %q, want %q", got, msg)
	}
}

// readErr returns the error that ends reading c, failing tb if c stays open
// for longer than within.
func readErr(tb testing.TB, c net.Conn, within time.Duration) error {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		tb.Fatalf("connection still open after %v", within)
	}
	if err == nil {
		err = io.EOF // ReadAll reports a clean end as nil
	}
	return err
}

func TestForwardsBothWays(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	var wg sync.WaitGroup
	for range 8 {
		c := dial(t, p.Addr())
		wg.Go(func() {
			for range 50 {
				roundTrip(t, c, "hello through the proxy", 2*time.Second)
			}
		})
	}
	wg.Wait()
}

func TestDownClosesLiveAndRefusesNew(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	live := dial(t, p.Addr())
	roundTrip(t, live, "before", 2*time.Second)

	p.Down()
	readErr(t, live, 2*time.Second)
	// A new connection is reset as soon as it is accepted: the reset may
	// reach the client before its dial returns, or after.
	if refused, err := net.Dial("tcp", p.Addr()); err == nil {
		readErr(t, refused, 2*time.Second)
		refused.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial while down: %v, want a reset (at dial or at read)", err)
	}

	p.Up()
	roundTrip(t, dial(t, p.Addr()), "after", 2*time.Second)
}

func TestResetPeersAbortsLiveConnections(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	live := dial(t, p.Addr())
	roundTrip(t, live, "before", 2*time.Second)

	p.ResetPeers()
	if err := readErr(t, live, 2*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetPeers: %v, want a connection reset", err)
	}
	roundTrip(t, dial(t, p.Addr()), "after", 2*time.Second)
}

func TestBlackholeStallsUntilUp(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	live := dial(t, p.Addr())
	roundTrip(t, live, "before", 2*time.Second)

	p.Blackhole()
	fresh := dial(t, p.Addr())
	for _, c := range []net.Conn{live, fresh} {
		if _, err := io.WriteString(c, "held"); err != nil {
			t.Fatalf("write while blackholed: %v", err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := c.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read while blackholed = %d bytes, %v; want nothing", n, err)
		}
	}

	p.Up()
	for _, c := range []net.Conn{live, fresh} {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got := make([]byte, 4)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
			t.Fatalf("after Up: %q, %v; want the held echo", got, err)
		}
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	t.Parallel()
	p := newProxy(t)
	c := dial(t, p.Addr())
	roundTrip(t, c, "warm", 2*time.Second)

	const d = 100 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	roundTrip(t, c, "slow", 2*time.Second)
	if rt := time.Since(start); rt < 2*d {
		t.Fatalf("round trip took %v with latency %v each way", rt, d)
	}

	p.SetLatency(0)
	start = time.Now()
	roundTrip(t, c, "fast", 2*time.Second)
	if rt := time.Since(start); rt >= d {
		t.Fatalf("round trip took %v after the latency was removed", rt)
	}
}

func TestCloseEndsConnections(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	live := dial(t, p.Addr())
	roundTrip(t, live, "before", 2*time.Second)
	p.Blackhole() // Close must not wait for a stalled link

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	readErr(t, live, 2*time.Second)
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatalf("dial after Close succeeded")
	}
}

func TestOutageLength(t *testing.T) {
	t.Setenv("LAPSE_LONG_TESTS", "")
	t.Setenv("LAPSE_REQUIRE_SERVICES", "")
	if got := faultproxy.OutageLength(); got != faultproxy.ShortOutage {
		t.Fatalf("OutageLength() = %v by default, want %v", got, faultproxy.ShortOutage)
	}
	for _, env := range []string{"LAPSE_LONG_TESTS", "LAPSE_REQUIRE_SERVICES"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "1")
			if got := faultproxy.OutageLength(); got != faultproxy.LongOutage {
				t.Fatalf("OutageLength() = %v with %s=1, want %v", got, env, faultproxy.LongOutage)
			}
		})
	}
}
