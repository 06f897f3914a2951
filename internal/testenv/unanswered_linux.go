package testenv

import (
	"fmt"
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
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		tb.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
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
