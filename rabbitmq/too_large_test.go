package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// brokerMaxMessageSize is RabbitMQ's max_message_size when it is not
// configured (3.8 and later): the test broker's. It is a setting of the
// node, not of a policy, and the broker is shared: the test does not lower
// it, it sends one byte more.
const brokerMaxMessageSize = 128 << 20

// TestDeliverTooLargeIsRefused: a message larger than the broker's
// max_message_size, which the broker refuses by closing the channel (406
// PRECONDITION_FAILED) at every attempt, is refused for good with a reason
// that says so, so that its delivery dies at once into review rather than
// being retried until its schedule runs out; and the sink publishes the
// next event as usual.
func TestDeliverTooLargeIsRefused(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	cfg.ConfirmTimeout = time.Minute // the broker reads all 128 MiB before it refuses them
	s := newSink(t, cfg)
	big := delivery("order.closed", 1)
	big.Event.Payload = make([]byte, brokerMaxMessageSize+1)
	err := s.Deliver(context.Background(), big)
	if !errors.Is(err, lapse.ErrRefused) || !strings.Contains(err.Error(), "max_message_size") {
		t.Fatalf("Deliver of %d bytes = %v; want a refusal for good naming max_message_size", len(big.Event.Payload), err)
	}
	big.Event.Payload = nil // let it go
	if err := s.Deliver(context.Background(), delivery("order.closed", 2)); err != nil {
		t.Fatalf("Deliver after the refusal: %v", err)
	}
	if n := b.count(cfg.Queue); n != 1 {
		t.Errorf("the queue holds %d messages, want 1 (the small one)", n)
	}
}
