package rabbitmq_test

import (
	"context"
	"testing"
	"time"
)

// TestTopologyLostWhileRunning: the exchange, or the queue, deleted while
// the sink runs: a publish fails (the event waits in the outbox), and the
// sink declares its topology again, so that a retry is enqueued.
func TestTopologyLostWhileRunning(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	s := newSink(t, cfg)
	ctx := context.Background()
	if err := s.Deliver(ctx, delivery("order.closed", 1)); err != nil {
		t.Fatal(err)
	}
	_ = b.read(cfg.Queue)
	n := 1
	for _, lose := range []struct {
		name string
		do   func() error
	}{
		{"exchange deleted", func() error { return b.ch.ExchangeDelete(cfg.Exchange, false, false) }},
		{"queue deleted", func() error { _, err := b.ch.QueueDelete(cfg.Queue, false, false, false); return err }},
	} {
		if err := lose.do(); err != nil {
			t.Fatalf("%s: %v", lose.name, err)
		}
		n++
		d := delivery("order.closed", n)
		first := s.Deliver(ctx, d)
		err := first
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			err = s.Deliver(ctx, d)
		}
		if err != nil {
			t.Fatalf("%s: the retries of an event still fail: %v (first: %v)", lose.name, err, first)
		}
		if msgs := b.read(cfg.Queue); len(msgs) != 1 || msgs[0].MessageId != d.Event.ID {
			t.Fatalf("%s: the queue holds %d messages, want the event (first attempt: %v)", lose.name, len(msgs), first)
		}
	}
}
