package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/rabbitmq"
)

// broker is a direct connection to the real broker (never through a proxy)
// to inspect and change what a sink declared.
type broker struct {
	tb   testing.TB
	conn *amqp.Connection
	ch   *amqp.Channel
}

// testConfig returns a sink config with an exchange and queue of its own,
// deleted when tb ends, and a direct connection to the broker.
func testConfig(tb testing.TB) (rabbitmq.Config, *broker) {
	tb.Helper()
	addr := testenv.Require(tb, testenv.EnvRabbitMQ, "RabbitMQ")
	conn, err := amqp.Dial(addr)
	if err != nil {
		tb.Fatalf("connect to %s: %v", testenv.EnvRabbitMQ, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatalf("channel: %v", err)
	}
	name := "lapse.test." + randomHex(6)
	cfg := rabbitmq.Config{
		URL:            addr,
		Exchange:       name,
		Queue:          name + ".events",
		ConfirmTimeout: 2 * time.Second,
		Logger:         slog.New(slog.DiscardHandler),
	}
	tb.Cleanup(func() {
		if _, err := ch.QueueDelete(cfg.Queue, false, false, false); err != nil {
			tb.Errorf("delete queue %s: %v", cfg.Queue, err)
		}
		if err := ch.ExchangeDelete(cfg.Exchange, false, false); err != nil {
			tb.Errorf("delete exchange %s: %v", cfg.Exchange, err)
		}
		_ = conn.Close()
	})
	return cfg, &broker{tb: tb, conn: conn, ch: ch}
}

// count returns how many messages queue holds.
func (b *broker) count(queue string) int {
	b.tb.Helper()
	q, err := b.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		b.tb.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// read consumes every message of queue, as a subscriber would.
func (b *broker) read(queue string) []amqp.Delivery {
	b.tb.Helper()
	want := b.count(queue)
	ch, err := b.conn.Channel()
	if err != nil {
		b.tb.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	msgs, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		b.tb.Fatalf("consume %s: %v", queue, err)
	}
	var got []amqp.Delivery
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case m := <-msgs:
			got = append(got, m)
		case <-timeout:
			b.tb.Fatalf("read %d of %d messages from %s", len(got), want, queue)
		}
	}
	return got
}

func newSink(tb testing.TB, cfg rabbitmq.Config) *rabbitmq.Sink {
	tb.Helper()
	s, err := rabbitmq.New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// delivery returns a delivery of a fresh event of type typ.
func delivery(typ string, n int) *lapse.Delivery {
	at := time.Now().Truncate(time.Second) // AMQP timestamps have seconds
	id := lapse.NewEventID(at)
	orderNo := fmt.Sprintf("T-%d", n)
	payload, _ := json.Marshal(map[string]any{"id": id, "type": typ, "order": map[string]any{"order_no": orderNo}})
	return &lapse.Delivery{
		ID: int64(n), EventID: id, EventType: typ, OrderNo: orderNo, Subscriber: "rabbitmq",
		Event: &lapse.OutboxEvent{ID: id, OrderNo: orderNo, Type: typ, Payload: payload, CreatedAt: at},
	}
}

// viaProxy returns u with its host replaced by addr.
func viaProxy(tb testing.TB, u, addr string) string {
	tb.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		tb.Fatalf("parse %s: %v", u, err)
	}
	pu.Host = addr
	return pu.String()
}

func TestDeliverPublishesEvents(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	s := newSink(t, cfg)
	sent := map[string]*lapse.Delivery{}
	for i, typ := range []string{"order.created", "order.closed", "order.paid", "delivery.dead"} {
		d := delivery(typ, i)
		if err := s.Deliver(context.Background(), d); err != nil {
			t.Fatalf("Deliver %s: %v", typ, err)
		}
		sent[d.Event.ID] = d
	}

	msgs := b.read(cfg.Queue)
	if len(msgs) != len(sent) {
		t.Fatalf("%d messages in the queue, want %d", len(msgs), len(sent))
	}
	for _, m := range msgs {
		d, ok := sent[m.MessageId]
		if !ok {
			t.Fatalf("message with unknown id %q", m.MessageId)
		}
		ev := d.Event
		switch {
		case m.Exchange != cfg.Exchange || m.RoutingKey != ev.Type:
			t.Errorf("published to %s with key %s, want %s with key %s", m.Exchange, m.RoutingKey, cfg.Exchange, ev.Type)
		case m.Type != ev.Type || m.Headers[rabbitmq.HeaderEventID] != ev.ID ||
			m.Headers[rabbitmq.HeaderEventType] != ev.Type || m.Headers[rabbitmq.HeaderOrderNo] != ev.OrderNo:
			t.Errorf("type %q, headers %v; want type %s and order %s", m.Type, m.Headers, ev.Type, ev.OrderNo)
		case m.ContentType != "application/json" || m.DeliveryMode != amqp.Persistent:
			t.Errorf("content type %q, delivery mode %d; want application/json, persistent", m.ContentType, m.DeliveryMode)
		case !m.Timestamp.Equal(ev.CreatedAt):
			t.Errorf("timestamp %v, want %v", m.Timestamp, ev.CreatedAt)
		case string(m.Body) != string(ev.Payload):
			t.Errorf("body = %s, want %s", m.Body, ev.Payload)
		}
	}
}

// TestDeliverTwiceEnqueuesTwice documents that RabbitMQ does not deduplicate:
// a retried event arrives twice with the same MessageId, and consumers drop
// the second.
func TestDeliverTwiceEnqueuesTwice(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	s := newSink(t, cfg)
	d := delivery("order.closed", 1)
	for range 2 {
		if err := s.Deliver(context.Background(), d); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	msgs := b.read(cfg.Queue)
	if len(msgs) != 2 || msgs[0].MessageId != d.Event.ID || msgs[1].MessageId != d.Event.ID {
		t.Fatalf("%d messages after delivering one event twice, want 2 with MessageId %s", len(msgs), d.Event.ID)
	}
}

func TestNewDeclaresAQuorumQueue(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	newSink(t, cfg)
	// Declaring an existing queue with other arguments fails, so a classic
	// declaration failing proves the queue is a quorum queue.
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	_, err = ch.QueueDeclare(cfg.Queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("declaring the queue as classic: %v, want PRECONDITION_FAILED (it is a quorum queue)", err)
	}
}

func TestNewRefusesAClassicQueue(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	if _, err := b.ch.QueueDeclare(cfg.Queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare classic queue: %v", err)
	}
	if s, err := rabbitmq.New(context.Background(), cfg); err == nil {
		_ = s.Close()
		t.Fatalf("New accepted a classic queue where it declares a quorum queue")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]rabbitmq.Config{
		"no URL":           {},
		"not an AMQP URL":  {URL: "http://127.0.0.1:5672/"},
		"negative timeout": {URL: "amqp://127.0.0.1:1/", ConfirmTimeout: -time.Second},
	} {
		if s, err := rabbitmq.New(context.Background(), cfg); err == nil {
			_ = s.Close()
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestDeliverRefusesWhatCannotBePublished(t *testing.T) {
	t.Parallel()
	cfg, _ := testConfig(t)
	s := newSink(t, cfg)
	for name, d := range map[string]*lapse.Delivery{
		"no event": {ID: 1},
		"no type":  delivery("", 2),
	} {
		if err := s.Deliver(context.Background(), d); !errors.Is(err, lapse.ErrRefused) {
			t.Errorf("%s: Deliver = %v, want lapse.ErrRefused", name, err)
		}
	}
}

// TestUnroutableIsAnError removes the queue's binding behind the sink's back:
// the broker returns the mandatory message, Deliver fails, and the next one
// declares the binding again and succeeds.
func TestUnroutableIsAnError(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	s := newSink(t, cfg)
	if err := b.ch.QueueUnbind(cfg.Queue, "#", cfg.Exchange, nil); err != nil {
		t.Fatalf("unbind: %v", err)
	}
	if err := s.Deliver(context.Background(), delivery("order.closed", 1)); err == nil {
		t.Fatalf("Deliver succeeded with nothing bound to the exchange")
	}
	d := delivery("order.closed", 2)
	if err := s.Deliver(context.Background(), d); err != nil {
		t.Fatalf("Deliver after a return: %v", err)
	}
	if msgs := b.read(cfg.Queue); len(msgs) != 1 || msgs[0].MessageId != d.Event.ID {
		t.Fatalf("queue holds %d messages, want only the second event", len(msgs))
	}
}

// TestNackIsAnError binds a full queue that rejects publishes; the broker
// nacks a message routed to it, and the sink keeps publishing afterwards.
func TestNackIsAnError(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	s := newSink(t, cfg)
	full := cfg.Queue + ".full"
	_, err := b.ch.QueueDeclare(full, false, true, false, false, amqp.Table{"x-max-length": 1, "x-overflow": "reject-publish"})
	if err != nil {
		t.Fatalf("declare %s: %v", full, err)
	}
	t.Cleanup(func() { _, _ = b.ch.QueueDelete(full, false, false, false) })
	if err := b.ch.QueueBind(full, "order.rejected", cfg.Exchange, false, nil); err != nil {
		t.Fatalf("bind %s: %v", full, err)
	}

	if err := s.Deliver(context.Background(), delivery("order.rejected", 1)); err != nil {
		t.Fatalf("Deliver while the queue has room: %v", err)
	}
	if err := s.Deliver(context.Background(), delivery("order.rejected", 2)); err == nil {
		t.Fatalf("Deliver succeeded into a full reject-publish queue")
	}
	if err := s.Deliver(context.Background(), delivery("order.closed", 3)); err != nil {
		t.Fatalf("Deliver after a nack: %v", err)
	}
}

// TestConcurrentDeliversAreConfirmedOnce publishes from many goroutines at
// once, more than the sink keeps channels for: every event is confirmed and
// enqueued once.
func TestConcurrentDeliversAreConfirmedOnce(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t)
	s := newSink(t, cfg)
	const workers, each = 40, 20
	var wg sync.WaitGroup
	ids := make(chan string, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d := delivery("order.closed", w*each+i)
				if err := s.Deliver(context.Background(), d); err != nil {
					t.Errorf("Deliver: %v", err)
					return
				}
				ids <- d.Event.ID
			}
		})
	}
	wg.Wait()
	close(ids)
	want := map[string]bool{}
	for id := range ids {
		want[id] = true
	}
	seen := map[string]int{}
	for _, m := range b.read(cfg.Queue) {
		seen[m.MessageId]++
	}
	if len(seen) != len(want) {
		t.Fatalf("%d distinct events in the queue, want %d", len(seen), len(want))
	}
	for id, n := range seen {
		if !want[id] || n != 1 {
			t.Fatalf("event %s is in the queue %d times", id, n)
		}
	}
}
