package testenv

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// Unanswered returns the address of a listener whose accept queue is full,
// so that the kernel drops new SYNs: a connect there hangs until the dialer
// gives up, as with a host that vanished. (An address meant to be
// unroutable may be answered by a transparent proxy in a sandboxed network.)
// On Linux the queue's behaviour is known, so failing to fill it fails tb.
func Unanswered(tb testing.TB) string {
	tb.Helper()
	fd, addr := boundSocket(tb)
	if err := syscall.Listen(fd, 0); err != nil {
		tb.Fatal(err)
	}
	for range 16 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return addr // the queue is full
		}
		tb.Cleanup(func() { c.Close() })
	}
	tb.Fatal("the accept queue of a listener never filled")
	return ""
}
