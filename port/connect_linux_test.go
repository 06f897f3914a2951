package port_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/port"
)

// unanswered returns the address of a listener whose accept queue is full,
// so that the kernel drops new SYNs: a connect there hangs until the dialer
// gives up, as with a host that vanished. Linux only: that is where the
// queue's behaviour is known.
func unanswered(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 16 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return addr // the queue is full
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("the accept queue never filled")
	return ""
}

func TestConnectTimeoutIsNotSent(t *testing.T) {
	t.Parallel()
	p := newPort(t, "http://"+unanswered(t), port.Config{ConnectTimeout: 200 * time.Millisecond, ReadTimeout: time.Minute})
	began := time.Now()
	err := p.Deliver(context.Background(), event("order.closed"))
	took := time.Since(began)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || errors.Is(err, port.ErrReadTimeout) {
		t.Fatalf("Deliver to a host that does not answer SYNs: %v; want a connect timeout", err)
	}
	if errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Errorf("a connect timeout is not an unknown outcome: nothing was sent")
	}
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("a connect timeout of 200ms took %v", took)
	}
}
