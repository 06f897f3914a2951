package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Connection behaviour. Heartbeats every 5 s make a silently dead link (no
// FIN, no RST) close within 15 s. After a failed dial, Deliver calls fail at
// once with the same error for redialBackoff, so that a burst of deliveries
// during an outage costs one dial, not one each.
const (
	heartbeat     = 5 * time.Second
	redialBackoff = time.Second
	closeTimeout  = time.Second
)

// link is one AMQP connection and its idle confirm-mode channels.
type link struct {
	conn *amqp.Connection
	tcp  net.Conn // the socket under conn, closed to break a stuck call

	mu   sync.Mutex
	idle []*publisher
}

// publisher is a confirm-mode channel used by one Deliver at a time, so that
// at most one publish is unconfirmed on it and every confirm and return on
// it belongs to that publish.
type publisher struct {
	link    *link
	ch      *amqp.Channel
	returns chan amqp.Return // one slot: one publish at a time
	closes  chan *amqp.Error
}

// closeReason returns why the channel closed, once it has.
func (p *publisher) closeReason() error {
	select {
	case e, ok := <-p.closes:
		if ok && e != nil {
			return e
		}
	default:
	}
	return amqp.ErrClosed
}

// link returns the live connection, dialing and declaring the topology when
// there is none, and declaring it again when a publish found it missing.
func (s *Sink) link(ctx context.Context) (*link, error) {
	s.mu.Lock()
	l, stale, closed := s.cur, s.stale, s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if l != nil && !l.conn.IsClosed() && !stale {
		return l, nil
	}

	select {
	case s.dialLock <- struct{}{}:
		defer func() { <-s.dialLock }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the connection: %w", context.Cause(ctx))
	}
	s.mu.Lock()
	l, stale = s.cur, s.stale
	failed, failErr := s.failed, s.failErr
	s.mu.Unlock()

	if l == nil || l.conn.IsClosed() {
		if time.Since(failed) < redialBackoff {
			return nil, failErr
		}
		if l != nil && failErr == nil {
			s.log.Warn("rabbitmq: connection lost; events wait in the outbox until it is back")
		}
		nl, err := s.dial(ctx)
		if err == nil {
			err = nl.declare(ctx, s.cfg)
			if err != nil {
				_ = nl.close()
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.failed, s.failErr = time.Now(), err
			return nil, err
		}
		if s.closed {
			_ = nl.close()
			return nil, errClosed
		}
		if l != nil {
			s.log.Info("rabbitmq: connected again after the connection was lost")
		}
		s.cur, s.stale, s.failErr = nl, false, nil
		return nl, nil
	}
	if stale {
		if err := l.declare(ctx, s.cfg); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.stale = false
		s.mu.Unlock()
	}
	return l, nil
}

// dial opens a connection whose dial and handshake end by ctx's deadline.
func (s *Sink) dial(ctx context.Context) (*link, error) {
	var tcp net.Conn
	conn, err := amqp.DialConfig(s.cfg.URL, amqp.Config{
		Heartbeat:  heartbeat,
		Properties: amqp.Table{"connection_name": "lapse"},
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The library clears this deadline once the handshake is done.
			if deadline, ok := ctx.Deadline(); ok {
				_ = c.SetDeadline(deadline)
			}
			tcp = c
			return &writeDeadlineConn{Conn: c, timeout: s.cfg.ConfirmTimeout}, nil
		},
	})
	if err != nil {
		if tcp != nil {
			_ = tcp.Close()
		}
		return nil, fmt.Errorf("rabbitmq: connect: %w", err)
	}
	return &link{conn: conn, tcp: tcp}, nil
}

// declare declares the exchange, the queue and the binding. Declaring is
// idempotent, so it is done on every new connection: that recreates what an
// operator deleted while the sink was away.
func (l *link) declare(ctx context.Context, cfg Config) error {
	err := l.do(ctx, func() error {
		ch, err := l.conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		if err := ch.ExchangeDeclare(cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", cfg.Exchange, err)
		}
		if _, err := ch.QueueDeclare(cfg.Queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
			return fmt.Errorf("declare queue %s: %w", cfg.Queue, err)
		}
		if err := ch.QueueBind(cfg.Queue, "#", cfg.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s: %w", cfg.Queue, cfg.Exchange, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return nil
}

// do runs f, a call that waits for the broker, and gives up when ctx ends.
// The library's calls take no context, so giving up means breaking the
// connection, which also ends f: a broker that does not answer within a
// delivery's time is treated as gone, and the next Deliver dials again.
func (l *link) do(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = l.tcp.Close()
		<-done
		return context.Cause(ctx)
	}
}

// close closes the connection politely, then the socket in any case.
func (l *link) close() error {
	err := l.conn.CloseDeadline(time.Now().Add(closeTimeout))
	_ = l.tcp.Close()
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}

// publisher returns an idle confirm-mode channel, or opens one.
func (s *Sink) publisher(ctx context.Context) (*publisher, error) {
	l, err := s.link(ctx)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for len(l.idle) > 0 {
		p := l.idle[len(l.idle)-1]
		l.idle = l.idle[:len(l.idle)-1]
		if !p.ch.IsClosed() {
			l.mu.Unlock()
			return p, nil
		}
	}
	l.mu.Unlock()

	p := &publisher{link: l, returns: make(chan amqp.Return, 1), closes: make(chan *amqp.Error, 1)}
	err = l.do(ctx, func() error {
		ch, err := l.conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return err
		}
		p.ch = ch
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open a channel: %w", err)
	}
	p.ch.NotifyReturn(p.returns)
	p.ch.NotifyClose(p.closes)
	return p, nil
}

// release gives p back after a publish whose outcome is settled.
func (s *Sink) release(p *publisher) {
	select {
	case <-p.returns: // a return is read by the Deliver it belongs to; this is a leftover
	default:
	}
	if p.ch.IsClosed() {
		s.closedBy(p)
		return
	}
	l := p.link
	l.mu.Lock()
	keep := len(l.idle) < s.maxIdle
	if keep {
		l.idle = append(l.idle, p)
	}
	l.mu.Unlock()
	if !keep {
		s.discard(p)
	}
}

// closedBy returns why p's channel closed, and has the topology declared
// again when the broker closed it: a channel error such as a missing
// exchange (404) is fixed by declaring, a dropped connection is not.
func (s *Sink) closedBy(p *publisher) error {
	err := p.closeReason()
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server {
		s.markStale()
	}
	return err
}

// discard closes p in the background: a close waits for the broker's
// answer, which a stalled link delays until heartbeats or Close end it.
// Once the sink is closed the connection's close takes p with it.
func (s *Sink) discard(p *publisher) {
	if p.ch.IsClosed() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.bg.Go(func() { _ = p.ch.Close() })
}

// writeDeadlineConn fails a write that the broker does not take within
// timeout, which closes the connection instead of blocking a publish for as
// long as the kernel keeps retrying. The price: under a memory alarm RabbitMQ
// stops reading from publishers, and then the connection is dropped and
// dialed again rather than held; no publish could be confirmed meanwhile
// anyway.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
