package testenv

import (
	"fmt"
	"syscall"
	"testing"
)

// Refused returns an address of 127.0.0.1 where a connect is refused, as
// with a server that is down, for as long as the test runs. Its port is held
// by a socket bound there that never listens: the kernel answers a connect
// with a reset, and no listener of this or another test can take the port.
// (A port from a listener closed at once may be handed to the next
// listener that asks for port 0, such as the server under test.)
func Refused(tb testing.TB) string {
	tb.Helper()
	_, addr := boundSocket(tb)
	return addr
}

// boundSocket returns a TCP socket bound to a port of 127.0.0.1 that the
// kernel chose, closed when tb ends, and its address.
func boundSocket(tb testing.TB) (fd int, addr string) {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	return fd, fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
