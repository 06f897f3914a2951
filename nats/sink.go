// Package nats delivers Lapse outbox events to a NATS JetStream stream.
//
// Every event becomes one message on subject <prefix>.<event type> (for
// example lapse.order.closed) whose body is the event's JSON payload and whose
// Nats-Msg-Id header is the event id. JetStream drops a message whose id it
// has already stored within the stream's duplicate window, so the at-least-
// once retries of the delivery workers leave one message per event in the
// stream, and consumers that also remember Nats-Msg-Id (or the payload's
// "id") are safe beyond the window.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
)

// Message headers set on every event besides Nats-Msg-Id, named as the
// webhook sink names its own, so that a consumer reads every sink alike.
const (
	HeaderEventID   = "Lapse-Event-Id"
	HeaderEventType = "Lapse-Event-Type"
	HeaderOrderNo   = "Lapse-Order-No"
)

// Connection behaviour. The reconnect buffer is disabled (-1) so that a
// publish made while the connection is down fails at once instead of waiting
// in a client-side buffer that a crash would lose and that no PubAck will
// ever confirm: the event stays pending in the outbox, which is durable. The
// ping settings notice a silently dead link (no FIN, no RST) in about 30 s
// rather than the library's default of several minutes.
const (
	reconnectWait   = time.Second
	reconnectJitter = 500 * time.Millisecond
	dialTimeout     = 2 * time.Second
	pingInterval    = 10 * time.Second
	maxPingsOut     = 3
)

// DefaultDuplicateWindow is Config.DuplicateWindow's default.
const DefaultDuplicateWindow = 2 * time.Hour

// WindowFor returns the duplicate window that a subscription needs whose
// retry schedule waits at most longest between two attempts, each bounded
// by timeout: no less than DefaultDuplicateWindow, and longer than a retry
// can come after the copy that the stream stored, with a minute to spare
// for recording the attempt and for a lease taken over.
func WindowFor(longest, timeout time.Duration) time.Duration {
	return max(DefaultDuplicateWindow, longest+timeout+time.Minute)
}

// Config configures a Sink. Only URL is required.
type Config struct {
	// URL is the NATS server, e.g. nats://127.0.0.1:4222; several may be given
	// separated by commas. Credentials may be in the URL.
	URL string
	// Stream is the JetStream stream the sink creates or updates. Default: LAPSE.
	Stream string
	// Subject is the subject prefix: an event of type order.closed is
	// published on <Subject>.order.closed, and the stream captures
	// <Subject>.>. Default: lapse.
	Subject string
	// DuplicateWindow is how long the stream remembers message ids to drop
	// duplicates. A retry is deduplicated only if it reaches the stream within
	// this window of the copy that was stored; when a publish is stored but
	// its acknowledgement is lost, the delivery is retried after its next
	// retry gap, so the window must exceed the longest gap of the
	// subscription's retry schedule, jitter included (lapse.Schedule's
	// Longest), plus the attempt timeout: see WindowFor. The default
	// schedule waits up to 1 h ± 10 %, hence the default:
	// DefaultDuplicateWindow. The server keeps every id of the window in
	// memory.
	DuplicateWindow time.Duration
	// PublishTimeout bounds one Deliver: setting up the stream when it must,
	// publishing, and waiting for the PubAck. Default: 5 s.
	PublishTimeout time.Duration
	// Logger receives connection changes. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.URL == "" {
		return fmt.Errorf("nats: a server URL is required")
	}
	if c.Stream == "" {
		c.Stream = "LAPSE"
	}
	if strings.ContainsAny(c.Stream, ">*. /\\\t\r\n") {
		return fmt.Errorf("nats: stream name %q: no dots, wildcards, slashes or spaces", c.Stream)
	}
	if c.Subject == "" {
		c.Subject = "lapse"
	}
	if !validSubject(c.Subject) {
		return fmt.Errorf("nats: subject prefix %q: dot-separated tokens without wildcards or spaces", c.Subject)
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.DuplicateWindow < 0 {
		return fmt.Errorf("nats: negative duplicate window")
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 5 * time.Second
	}
	if c.PublishTimeout < 0 {
		return fmt.Errorf("nats: negative publish timeout")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Sink publishes outbox events to a JetStream stream. It implements
// lapse.Handler and lapse.BatchHandler and is safe for concurrent use.
//
// It keeps one connection that reconnects by itself, forever, after the
// server goes away; Deliver fails fast while it is away and succeeds again
// once it is back.
type Sink struct {
	cfg Config
	log *slog.Logger
	nc  *natsgo.Conn
	js  jetstream.JetStream

	// setupLock serializes stream setup; a channel rather than a mutex so
	// that a Deliver waiting behind a slow setup still keeps its deadline.
	setupLock chan struct{}
	ready     atomic.Bool // the stream is set up; cleared when it stops answering

	linkMu     sync.Mutex
	linkCtx    context.Context // cancelled when the current connection is lost
	linkCancel context.CancelFunc
}

// New connects to NATS and creates the stream, or updates its subjects and
// duplicate window (never narrowed) when it exists (its other settings, such as replicas or
// limits an operator chose, are kept). An error means the configuration is
// invalid, the server refused the connection (credentials, TLS), or the
// stream cannot be set up as configured.
//
// When no server can be reached at all, New still returns a Sink, which keeps
// connecting in the background and sets the stream up before its first
// publish. That is safe because Deliver reports success only on a PubAck from
// the stream, which cannot exist before the setup: until then every Deliver
// fails and its event waits in the outbox. A service can therefore start
// while its broker is down, like the outbox it drains.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, log: cfg.Logger.With("sink", "nats", "stream", cfg.Stream), setupLock: make(chan struct{}, 1)}
	s.linkCtx, s.linkCancel = context.WithCancel(context.Background())
	opts := []natsgo.Option{
		natsgo.Name("lapse"),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(reconnectWait),
		natsgo.ReconnectJitter(reconnectJitter, reconnectJitter),
		natsgo.ReconnectBufSize(-1),
		natsgo.Timeout(dialTimeout),
		// A write the server does not take within a publish's time means
		// the link is dead: drop it and reconnect rather than block.
		natsgo.FlusherTimeout(cfg.PublishTimeout),
		natsgo.PingInterval(pingInterval),
		natsgo.MaxPingsOutstanding(maxPingsOut),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			s.linkLost()
			s.log.Warn("nats: disconnected; events wait in the outbox until it is back", "err", err)
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			s.log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			s.log.Warn("nats: asynchronous error", "err", err)
		}),
	}
	nc, err := natsgo.Connect(cfg.URL, opts...)
	if err != nil && unreachable(err) {
		s.log.Warn("nats: no server reachable; connecting in the background", "err", err)
		nc, err = natsgo.Connect(cfg.URL, append(opts, natsgo.RetryOnFailedConnect(true))...)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	s.nc = nc
	// An asynchronous publish (DeliverMany) whose caller stopped waiting is
	// forgotten after the publish timeout rather than kept pending.
	if s.js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	if nc.IsConnected() {
		if err := s.setup(ctx); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return s, nil
}

var _ lapse.BatchHandler = (*Sink)(nil)

// unreachable reports whether a failed first connect found no server at all,
// as opposed to a server that refused us.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, natsgo.ErrNoServers) || errors.As(err, &ne)
}

// Deliver publishes d's event and returns nil once the stream has
// acknowledged storing it (or acknowledged it as a duplicate of a message it
// stored earlier).
//
// Any failure, including a PubAck that did not arrive within PublishTimeout
// after the message was sent, is returned as a plain error to be retried on
// schedule, not as lapse.ErrUnknownOutcome: a retry cannot duplicate the
// message, because the stream drops a second copy with the same Nats-Msg-Id
// within its DuplicateWindow. An event that cannot be published at all (no
// id, a type that is not a valid subject, or larger than the server's
// max_payload or the stream's MaxMsgSize) wraps lapse.ErrRefused.
func (s *Sink) Deliver(ctx context.Context, d *lapse.Delivery) error {
	msg, err := s.message(d)
	if err != nil {
		return err
	}
	ctx, done, err := s.publishing(ctx)
	defer done()
	if err != nil {
		return fmt.Errorf("nats: event %s: %w", d.Event.ID, err)
	}
	ack, err := s.js.PublishMsg(ctx, msg, s.publishOpts(d)...)
	return s.acked(ctx, d, msg, ack, err)
}

// DeliverMany publishes the events of ds one after another without waiting
// in between, then waits for their PubAcks, all within one PublishTimeout,
// and returns one error per delivery, in order, each as Deliver would: nil
// once the stream has acknowledged storing that event (or a copy it stored
// earlier). It makes Sink a lapse.BatchHandler, for which a publish costs
// no round trip of its own.
func (s *Sink) DeliverMany(ctx context.Context, ds []*lapse.Delivery) []error {
	errs := make([]error, len(ds))
	ctx, done, err := s.publishing(ctx)
	defer done()
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("nats: %d events: %w", len(ds), err)
		}
		return errs
	}
	msgs := make([]*natsgo.Msg, len(ds))
	futures := make([]jetstream.PubAckFuture, len(ds))
	for i, d := range ds {
		if msgs[i], errs[i] = s.message(d); errs[i] != nil {
			continue
		}
		if ctx.Err() != nil {
			errs[i] = s.acked(ctx, d, msgs[i], nil, ctx.Err())
			continue
		}
		if futures[i], err = s.js.PublishMsgAsync(msgs[i], s.publishOpts(d)...); err != nil {
			errs[i] = s.acked(ctx, d, msgs[i], nil, err)
		}
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			errs[i] = s.acked(ctx, ds[i], msgs[i], ack, nil)
		case err := <-f.Err():
			errs[i] = s.acked(ctx, ds[i], msgs[i], nil, err)
		case <-ctx.Done():
			errs[i] = s.acked(ctx, ds[i], msgs[i], nil, ctx.Err())
		}
	}
	return errs
}

// message returns the message of d's event, or an error wrapping
// lapse.ErrRefused for an event that cannot be published.
func (s *Sink) message(d *lapse.Delivery) (*natsgo.Msg, error) {
	ev := d.Event
	if ev == nil || ev.ID == "" {
		return nil, fmt.Errorf("nats: delivery %d carries no event: %w", d.ID, lapse.ErrRefused)
	}
	if !validSubject(ev.Type) {
		return nil, fmt.Errorf("nats: event %s: type %q is not a subject: %w", ev.ID, ev.Type, lapse.ErrRefused)
	}
	return &natsgo.Msg{
		Subject: s.cfg.Subject + "." + ev.Type,
		Data:    ev.Payload,
		Header:  natsgo.Header{HeaderEventID: {ev.ID}, HeaderEventType: {ev.Type}, HeaderOrderNo: {ev.OrderNo}},
	}, nil
}

// publishOpts are the options of d's publish: its id, which the stream
// deduplicates on, and the stream that must store it.
func (s *Sink) publishOpts(d *lapse.Delivery) []jetstream.PublishOpt {
	return []jetstream.PublishOpt{jetstream.WithMsgID(d.Event.ID), jetstream.WithExpectStream(s.cfg.Stream)}
}

// publishing returns the context of a publish: it ends after PublishTimeout,
// and as soon as the connection is lost, since a PubAck can only come back
// on the connection that carried the publish. It sets the stream up first
// when it must. The caller calls done when the publish is over.
func (s *Sink) publishing(ctx context.Context) (_ context.Context, done func(), err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.PublishTimeout, errNoAck)
	if !s.ready.Load() {
		if err := s.setup(ctx); err != nil {
			return ctx, cancel, err
		}
	}
	ctx, lost := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.link(), func() { lost(errDisconnected) })
	return ctx, func() { stop(); lost(nil); cancel() }, nil
}

// acked returns the outcome of the publish of msg, d's event: nil for a
// PubAck, else the error, with the cause of ctx when ctx ended it.
func (s *Sink) acked(ctx context.Context, d *lapse.Delivery, msg *natsgo.Msg, ack *jetstream.PubAck, err error) error {
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			// Nothing answers for the subject: the stream may have been
			// deleted. Setting it up again before the next publish is
			// harmless if not.
			s.ready.Store(false)
		}
		if tooLarge(err) {
			// It will never fit: retried, it would only hold its order's
			// later events back for the whole schedule before it dies.
			return fmt.Errorf("nats: publish event %s to %s: %w: %w", d.Event.ID, msg.Subject, err, lapse.ErrRefused)
		}
		return fmt.Errorf("nats: publish event %s to %s: %w", d.Event.ID, msg.Subject, err)
	}
	if ack.Duplicate {
		s.log.Debug("nats: the stream already had the event", "event_id", d.Event.ID, "seq", ack.Sequence)
	}
	return nil
}

// tooLarge reports whether err refuses a message for its size: larger than
// the server's max_payload, or than the stream's MaxMsgSize.
func tooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, natsgo.ErrMaxPayload) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// Close closes the connection. Deliver fails afterwards.
func (s *Sink) Close() error {
	s.nc.Close()
	s.linkLost()
	return nil
}

// Errors that end a publish without a PubAck. Both are retried: the message
// may have been stored, and the stream drops the copy the retry sends.
var (
	errNoAck        = errors.New("no PubAck within the publish timeout")
	errDisconnected = errors.New("connection lost before the PubAck")
)

// link returns a context that is cancelled when the current connection to
// the server is lost.
func (s *Sink) link() context.Context {
	s.linkMu.Lock()
	defer s.linkMu.Unlock()
	return s.linkCtx
}

// linkLost cancels the contexts handed out by link and starts a fresh one
// for the next connection. The library reports a disconnect asynchronously,
// so a publish made just after a quick reconnect may be cancelled too; it
// fails and is retried like any other.
func (s *Sink) linkLost() {
	s.linkMu.Lock()
	defer s.linkMu.Unlock()
	s.linkCancel()
	s.linkCtx, s.linkCancel = context.WithCancel(context.Background())
}

// setup creates or updates the stream, once until it stops answering.
func (s *Sink) setup(ctx context.Context) error {
	select {
	case s.setupLock <- struct{}{}:
		defer func() { <-s.setupLock }()
	case <-ctx.Done():
		return fmt.Errorf("nats: set up stream %s: %w", s.cfg.Stream, ctx.Err())
	}
	if s.ready.Load() {
		return nil
	}
	if err := ensureStream(ctx, s.js, s.cfg); err != nil {
		return err
	}
	s.ready.Store(true)
	return nil
}

// validSubject reports whether subj is a literal NATS subject: non-empty
// dot-separated tokens with no wildcard or whitespace.
func validSubject(subj string) bool {
	for tok := range strings.SplitSeq(subj, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return false
		}
	}
	return true
}
