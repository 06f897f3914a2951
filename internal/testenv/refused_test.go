//go:build linux

package testenv

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefused: a connect to the address is refused, and no listener can
// take its port while the test runs (a server under test that listens on
// port 0 must never answer there).
func TestRefused(t *testing.T) {
	addr := Refused(t)
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v; want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("a listener took %s, the refused address's port", addr)
	}
}

// TestFreePort: a port given once is not given again, and is outside the
// range the kernel hands to listeners of port 0.
func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if seen[p] || p < 20000 || p >= 32768 {
			t.Fatalf("FreePort gave %d (given before: %v)", p, seen[p])
		}
		seen[p] = true
	}
}
