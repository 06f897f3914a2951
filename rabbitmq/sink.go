// Package rabbitmq delivers Lapse outbox events to RabbitMQ.
//
// Every event becomes one persistent message published to a durable topic
// exchange with the event type as routing key (order.closed), the event's
// JSON payload as body and the event id as MessageId. The sink declares a
// durable quorum queue bound to the exchange with "#", so that no event is
// dropped for want of a consumer; subscribers may bind queues of their own.
//
// Publishing is at least once: a publish whose confirm was lost is sent
// again, and RabbitMQ, unlike JetStream, does not deduplicate, so a queue may
// hold two messages with the same MessageId. Consumers must deduplicate on
// MessageId (the event id, also the payload's "id"), which Lapse's own
// handlers do with their (consumer, event_id) rows.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse"
)

// Message headers set on every event besides the AMQP properties, named as
// the webhook sink names its own, so that a consumer reads every sink alike.
const (
	HeaderEventID   = "Lapse-Event-Id"
	HeaderEventType = "Lapse-Event-Type"
	HeaderOrderNo   = "Lapse-Order-No"
)

// maxIdleChannels is how many confirm-mode channels a connection keeps open
// between publishes; more concurrent publishes open extra channels, closed
// after use. Opening one costs two round trips, so the pool should cover the
// usual concurrency: at 64 callers, a cap of 64 instead of 16 measured 25 %
// more events/s, and an idle channel costs the broker little.
const maxIdleChannels = 64

// Config configures a Sink. Only URL is required.
type Config struct {
	// URL is the broker, e.g. amqp://guest:guest@127.0.0.1:5672/ (amqps://
	// for TLS).
	URL string
	// Exchange is the durable topic exchange the sink publishes to.
	// Default: lapse.
	Exchange string
	// Queue is the durable quorum queue the sink declares and binds to the
	// exchange with "#". Default: lapse.events.
	Queue string
	// ConfirmTimeout bounds one Deliver: connecting when it must, opening a
	// channel, publishing and waiting for the broker's confirm. Default: 5 s.
	ConfirmTimeout time.Duration
	// Logger receives connection changes. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.URL == "" {
		return fmt.Errorf("rabbitmq: a broker URL is required")
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		return fmt.Errorf("rabbitmq: URL: %w", err)
	}
	if c.Exchange == "" {
		c.Exchange = "lapse"
	}
	if c.Queue == "" {
		c.Queue = "lapse.events"
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = 5 * time.Second
	}
	if c.ConfirmTimeout < 0 {
		return fmt.Errorf("rabbitmq: negative confirm timeout")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Sink publishes outbox events to RabbitMQ with publisher confirms. It
// implements lapse.Handler and is safe for concurrent use: every Deliver in
// flight has a confirm-mode channel to itself, so a confirm or a returned
// message is always matched to the publish it belongs to.
//
// It keeps one connection. When the connection drops, nothing reconnects in
// the background: the next Deliver dials again (one at a time) and declares
// the topology again, so a sink that has nothing to deliver holds no
// goroutine retrying a dead broker.
type Sink struct {
	cfg     Config
	log     *slog.Logger
	maxIdle int

	// dialLock serializes dialing and declaring; a channel rather than a
	// mutex so that a Deliver waiting behind a slow dial keeps its deadline.
	dialLock chan struct{}

	mu      sync.Mutex
	cur     *link     // the last connection made, perhaps closed since; nil before the first
	stale   bool      // declare the topology again before the next publish
	closed  bool      // Close was called
	failed  time.Time // when the last dial failed
	failErr error

	bg sync.WaitGroup // closes of abandoned channels
}

// New returns a Sink, connecting and declaring the exchange, the queue and
// its binding within ConfirmTimeout. An error means the configuration is invalid or the broker
// refused it: bad credentials or vhost, or an exchange or queue that exists
// with other settings (such as a classic queue of the same name).
//
// When the broker cannot be reached at all, New still returns a Sink, which
// connects and declares on its first Deliver. That is safe because Deliver
// reports success only on the broker's confirm, which cannot come before the
// topology exists: until then every Deliver fails and its event waits in the
// outbox. A service can therefore start while its broker is down, like the
// outbox it drains.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:      cfg,
		log:      cfg.Logger.With("sink", "rabbitmq", "exchange", cfg.Exchange),
		maxIdle:  maxIdleChannels,
		dialLock: make(chan struct{}, 1),
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConfirmTimeout)
	defer cancel()
	if _, err := s.link(ctx); err != nil {
		if !unreachable(err) {
			return nil, err
		}
		s.log.Warn("rabbitmq: broker unreachable; connecting on the first delivery", "err", err)
	}
	return s, nil
}

// unreachable reports whether a failed connect or declare found no broker
// to talk to, as opposed to a broker that refused us. amqp091 reports a
// connection dropped during authentication as ErrCredentials, so that case
// counts as a refusal too: better to fail a start than to hide a wrong
// password until the first event.
func unreachable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return !ae.Server && ae != amqp.ErrCredentials && ae != amqp.ErrSASL && ae != amqp.ErrVhost
	}
	return false
}

// Deliver publishes d's event and returns nil once the broker has confirmed
// it: routed to every bound queue and, for the quorum queue, written to a
// majority of its replicas.
//
// It returns an error for a nack, for a message the broker returned as
// unroutable (the topology is declared again before the next publish), and
// for any connection failure. When the confirm does not arrive within
// ConfirmTimeout the message may have been enqueued; the error is a plain
// one all the same, not lapse.ErrUnknownOutcome, because a retry only risks
// a second copy with the same MessageId, which consumers deduplicate. An
// event that cannot be published at all wraps lapse.ErrRefused: one with
// no id or no routing key, and one larger than the broker's
// max_message_size (128 MiB unless configured), which the broker refuses
// by closing the channel (406 PRECONDITION_FAILED) every time.
func (s *Sink) Deliver(ctx context.Context, d *lapse.Delivery) error {
	ev := d.Event
	if ev == nil || ev.ID == "" {
		return fmt.Errorf("rabbitmq: delivery %d carries no event: %w", d.ID, lapse.ErrRefused)
	}
	if ev.Type == "" || len(ev.Type) > 255 {
		return fmt.Errorf("rabbitmq: event %s: type %q is not a routing key: %w", ev.ID, ev.Type, lapse.ErrRefused)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.ConfirmTimeout, errNoConfirm)
	defer cancel()
	p, err := s.publisher(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: event %s: %w", ev.ID, err)
	}
	msg := amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    ev.ID,
		Type:         ev.Type,
		Timestamp:    ev.CreatedAt,
		AppId:        "lapse",
		Headers:      amqp.Table{HeaderEventID: ev.ID, HeaderEventType: ev.Type, HeaderOrderNo: ev.OrderNo},
		Body:         ev.Payload,
	}
	dc, err := p.ch.PublishWithDeferredConfirm(s.cfg.Exchange, ev.Type, true, false, msg)
	if err != nil {
		if p.ch.IsClosed() {
			if big := tooLarge(ev, s.closedBy(p)); big != nil {
				return big
			}
		}
		s.discard(p)
		return fmt.Errorf("rabbitmq: publish event %s: %w", ev.ID, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		// The confirm, or a return, may still come on this channel; it must
		// not be taken for the next publish's, so the channel goes.
		s.discard(p)
		return fmt.Errorf("rabbitmq: publish event %s: %w", ev.ID, context.Cause(ctx))
	}
	if !acked {
		if p.ch.IsClosed() {
			reason := s.closedBy(p)
			if big := tooLarge(ev, reason); big != nil {
				return big
			}
			return fmt.Errorf("rabbitmq: publish event %s: channel closed before the broker confirmed: %w", ev.ID, reason)
		}
		s.release(p)
		return fmt.Errorf("rabbitmq: publish event %s: the broker refused it (nack)", ev.ID)
	}
	// RabbitMQ sends basic.return before the basic.ack of the same publish,
	// and the library hands both over in order, so a return for this
	// publish is already waiting if there is one.
	select {
	case ret, ok := <-p.returns:
		if ok {
			s.release(p)
			s.markStale()
			return fmt.Errorf("rabbitmq: publish event %s: unroutable, returned by the broker: %d %s", ev.ID, ret.ReplyCode, ret.ReplyText)
		}
	default:
	}
	s.release(p)
	return nil
}

// tooLarge returns the refusal of ev when reason, why the channel of its
// publish closed, is the broker's refusal of a message larger than its
// max_message_size, and nil otherwise. That refusal is the same at every
// attempt, so it wraps lapse.ErrRefused: the delivery dies at once, its
// order in review with the reason, instead of being retried until its
// schedule runs out.
func tooLarge(ev *lapse.OutboxEvent, reason error) error {
	var ae *amqp.Error
	if !errors.As(reason, &ae) || !ae.Server || ae.Code != amqp.PreconditionFailed ||
		!strings.Contains(ae.Reason, "larger than configured max size") {
		return nil
	}
	return fmt.Errorf("rabbitmq: publish event %s: its %d bytes are more than the broker's max_message_size takes (%s): %w",
		ev.ID, len(ev.Payload), ae.Reason, lapse.ErrRefused)
}

// Close closes the connection and waits for the sink's background work to
// end. Deliver fails afterwards.
func (s *Sink) Close() error {
	s.mu.Lock()
	s.closed = true
	l := s.cur
	s.cur = nil
	s.mu.Unlock()
	var err error
	if l != nil {
		err = l.close()
	}
	s.bg.Wait()
	return err
}

// Errors of a Deliver that is given up.
var (
	errNoConfirm = errors.New("no answer from the broker within the confirm timeout")
	errClosed    = errors.New("rabbitmq: sink closed")
)

func (s *Sink) markStale() {
	s.mu.Lock()
	s.stale = true
	s.mu.Unlock()
}
