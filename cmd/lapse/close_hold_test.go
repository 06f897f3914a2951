package main

import (
	"testing"
	"time"
)

// TestEventStreamsYieldToCloses: lapse serve's event streams (the webhook,
// NATS and RabbitMQ) yield to closes, its effects and notices do not, and
// --delivery-close-hold is a minute by default and 0 for never.
func TestEventStreamsYieldToCloses(t *testing.T) {
	t.Parallel()
	o := parseServeFlags(t, append(everySubscriber, "--nats", "nats://127.0.0.1:1", "--rabbitmq", "amqp://127.0.0.1:1/")...)
	subs, err := o.sf.fanOut(t.Context()) // dials no broker
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]bool{webhookSub.Name: true, natsSub.Name: true, rabbitmqSub.Name: true}
	if len(subs) != 8 {
		t.Fatalf("built %d subscriptions; want the 8 of the flags", len(subs))
	}
	for i := range subs {
		s := &subs[i]
		if s.YieldsToCloses != streams[s.Name] {
			t.Errorf("subscription %s yields to closes: %v; want %v", s.Name, s.YieldsToCloses, streams[s.Name])
		}
	}
	if o.dc.CloseHold != time.Minute {
		t.Errorf("--delivery-close-hold by default = %v; want 1m", o.dc.CloseHold)
	}
	if closeHold(0) >= 0 || closeHold(5*time.Second) != 5*time.Second {
		t.Errorf("closeHold(0) = %v, closeHold(5s) = %v; want negative (never) and 5s", closeHold(0), closeHold(5*time.Second))
	}
}
