package port_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/port"
)

func TestConnectTimeoutIsNotSent(t *testing.T) {
	t.Parallel()
	p := newPort(t, "http://"+testenv.Unanswered(t), port.Config{ConnectTimeout: 200 * time.Millisecond, ReadTimeout: time.Minute})
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
