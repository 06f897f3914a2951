package port_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/port"
)

// TestConnectTimeoutReloadBoundsTLSHandshake: a reload of the connect
// timeout bounds the TLS handshake of the calls made after it, as it bounds
// their dial: a port that accepts connections and never answers the
// handshake fails the call at the new timeout, not after the one the port
// was made with.
func TestConnectTimeoutReloadBoundsTLSHandshake(t *testing.T) {
	t.Parallel()
	p := newPort(t, "https://"+testenv.Mute(t), port.Config{ConnectTimeout: 30 * time.Second, ReadTimeout: time.Minute})
	p.SetTimeouts(200*time.Millisecond, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	err := p.Deliver(ctx, event("order.closed"))
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), "TLS handshake timeout") || ctx.Err() != nil {
		t.Fatalf("Deliver to a port that never answers the TLS handshake: %v (context: %v); want a TLS handshake timeout", err, ctx.Err())
	}
	if errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, port.ErrReadTimeout) {
		t.Errorf("a handshake that timed out is not sent: %v", err)
	}
	if took > 3*time.Second {
		t.Errorf("a connect timeout reloaded to 200ms let the handshake take %v", took)
	}
}
