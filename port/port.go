// Package port calls a merchant's own service over HTTP (stock, coupons,
// notifications) as a subscriber of Lapse's events. A Port is a
// lapse.QueryHandler: when an attempt's outcome is unknown, Lapse asks the
// service whether it applied the event before it sends the event again, so
// the effect happens once even when answers are lost.
//
// # The protocol
//
// This is what a merchant's service implements. Every event arrives as
//
//	POST <URL>
//	Content-Type: application/json
//	Idempotency-Key: 0193a5c2-7e41-7c3a-9d1e-4b6f0a2c8e11
//	Lapse-Event-Type: order.closed
//	Lapse-Order-No: A-1001
//
//	{"id": "0193a5c2-…", "type": "order.closed", "occurred_at": "…",
//	 "order": {"order_no": "A-1001", "state": "CLOSED",
//	           "items": [{"sku": "TEA-250G", "qty": 2}], …}}
//
// The body is the event exactly as Lapse wrote it to its outbox; order events
// carry the order as it stands after the change. Idempotency-Key is the event
// id (a UUIDv7), the same on every attempt: the service applies each key at
// most once and remembers the keys it applied. It answers:
//
//	2xx                   applied now
//	409 Conflict          applied before: the key is already known
//	408, 425, 429, 5xx    not applied this time; Lapse retries on its schedule
//	                      with the same key, so a 5xx sent after applying is
//	                      harmless: the retry is answered 409. A 429 or 503
//	                      with Retry-After (seconds, or an HTTP date) puts
//	                      the next attempt off that long when the schedule
//	                      would come sooner, up to the schedule's longest wait
//	any other 4xx         refused for good: the delivery dies and its order
//	                      goes to manual review
//
// When no answer comes after the request was written (a timeout, a dropped
// connection, an answer whose headers run past 64 KiB), Lapse records the outcome as unknown and, before any new
// attempt, asks
//
//	GET <URL>/<Idempotency-Key>
//
//	200                   the key was applied: the delivery is done and the
//	                      event is not sent again
//	404                   the key is unknown: the event is sent again
//	anything else         no answer: the question is asked again later
//	                      (a 429 or 503 with Retry-After: no sooner than
//	                      that, up to the schedule's longest wait)
//
// Redirects are not followed; a 3xx is a retryable failure to fix in the
// configuration.
//
// # Failure handling
//
// Each Port has its own timeouts, connect and read apart; a bulkhead that
// bounds its calls in flight, so that one slow service cannot hold every
// delivery worker; and a circuit breaker that stops calling a failing service
// for a cooldown. A call stopped by either is not sent and is safe to retry.
package port

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/httpcall"
)

// Headers of the protocol.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderEventType      = "Lapse-Event-Type"
	HeaderOrderNo        = "Lapse-Order-No"
)

const userAgent = "lapse-port/1"

// ErrBulkheadFull is in the chain of an error when every slot stayed busy
// until the caller's context ended: nothing was sent.
var ErrBulkheadFull = errors.New("port: no free slot before the context ended")

// Config configures a Port. Only URL is required; zero values take the
// documented defaults and negative ones are rejected.
type Config struct {
	// URL receives the events (POST); queries go to URL/<event id> (GET). An
	// absolute http or https URL.
	URL string
	// ConnectTimeout bounds making a connection: the dial and the TLS
	// handshake. A call that fails here was not sent. Default: 2s.
	ConnectTimeout time.Duration
	// ReadTimeout bounds the rest, from the moment a connection is held:
	// writing the request, waiting for the answer and reading it. A request
	// written in full and then timed out has an unknown outcome. Default: 10s.
	ReadTimeout time.Duration
	// MaxConcurrent bounds the calls in flight (a bulkhead). Excess callers
	// wait for a slot until their context ends, then fail without sending.
	// Default: 16.
	MaxConcurrent int
	// Breaker configures the circuit breaker.
	Breaker BreakerConfig
	// Clock times the breaker's cooldown and reads a Retry-After given as
	// a date. Default: lapse.SystemClock.
	Clock lapse.Clock
	// HTTPClient replaces the client built from ConnectTimeout, for tests.
	// ReadTimeout and the detection of unknown outcomes still apply as long
	// as its transport reports httptrace events, as net/http's does.
	HTTPClient *http.Client
}

// BreakerConfig configures a Port's circuit breaker. A failure is an answer
// of 408, 425, 429, 3xx or 5xx, a timeout or a connection that failed;
// any other answer, a refusal included, shows the service is up.
type BreakerConfig struct {
	// Failures is how many failures among the last Window calls open the
	// breaker. Default: 30 of 50, so that a service failing a share of its
	// calls at random (30 %, say) keeps receiving them and the deliveries'
	// retries get through, while an outage opens it within 30 calls. Set
	// Window equal to Failures to open on that many consecutive failures.
	Failures int
	// Window is how many of the latest calls are remembered. Default: 50,
	// or Failures when that is larger.
	Window int
	// Cooldown is how long the breaker stays open before it lets one probe
	// through. Default: 10s.
	Cooldown time.Duration
}

// Port delivers events to one merchant service and answers Lapse's
// query-backs. It is safe for concurrent use.
type Port struct {
	name     string
	url      *url.URL
	client   *http.Client
	timeouts *httpcall.Timeouts
	slots    chan struct{}
	breaker  *breaker
	clock    lapse.Clock
}

// New returns a Port named name (used in its errors) that calls cfg.URL.
func New(name string, cfg Config) (*Port, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("port %q: %s", name, fmt.Sprintf(format, args...))
	}
	if name == "" {
		return nil, errors.New("port: a port needs a name")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		return nil, bad("URL %q is not an absolute http or https URL without a fragment", httpcall.RedactURL(cfg.URL))
	}
	if cfg.ConnectTimeout < 0 || cfg.ReadTimeout < 0 || cfg.MaxConcurrent < 0 ||
		cfg.Breaker.Failures < 0 || cfg.Breaker.Window < 0 || cfg.Breaker.Cooldown < 0 {
		return nil, bad("timeouts, MaxConcurrent and breaker settings must not be negative")
	}
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 2*time.Second)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, 10*time.Second)
	cfg.MaxConcurrent = cmp.Or(cfg.MaxConcurrent, 16)
	cfg.Breaker.Failures = cmp.Or(cfg.Breaker.Failures, 30)
	cfg.Breaker.Window = max(cmp.Or(cfg.Breaker.Window, 50), cfg.Breaker.Failures)
	cfg.Breaker.Cooldown = cmp.Or(cfg.Breaker.Cooldown, 10*time.Second)
	if cfg.Clock == nil {
		cfg.Clock = lapse.SystemClock{}
	}
	timeouts := httpcall.NewTimeouts(cfg.ConnectTimeout, cfg.ReadTimeout)
	client := cfg.HTTPClient
	if client == nil {
		client = httpcall.NewClient(timeouts, cfg.MaxConcurrent, true)
	}
	return &Port{
		name:     name,
		url:      u,
		client:   client,
		timeouts: timeouts,
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		breaker:  &breaker{clock: cfg.Clock, limit: cfg.Breaker.Failures, cooldown: cfg.Breaker.Cooldown, window: make([]bool, cfg.Breaker.Window)},
		clock:    cfg.Clock,
	}, nil
}

// SetTimeouts changes the connect and read timeouts of the calls made from
// now on (a configuration reload); a zero leaves that one as it is.
func (p *Port) SetTimeouts(connect, read time.Duration) { p.timeouts.Set(connect, read) }

// Name returns the port's name.
func (p *Port) Name() string { return p.name }

// State returns where the circuit breaker stands now; BreakerHalfOpen once
// the cooldown is over, even before a call has probed.
func (p *Port) State() BreakerState { return p.breaker.state() }

// Deliver POSTs d's event to the service with its id as the Idempotency-Key.
// It returns nil when the service applied the event now or before (2xx,
// 409); an error wrapping lapse.ErrRefused for any other 4xx except 408, 425
// and 429; an error wrapping lapse.ErrUnknownOutcome when the request was
// written in full but no answer came; and any other error, retryable, when
// the service failed or the request was never sent (connection refused or
// timed out, ErrBreakerOpen, ErrBulkheadFull). A *StatusError in the chain
// holds the status and the start of the body, and, for a 429 or 503, the
// wait its Retry-After asked for (lapse.RetryAfter), as a webhook's does.
func (p *Port) Deliver(ctx context.Context, d *lapse.Delivery) error {
	if d.Event == nil {
		return fmt.Errorf("port %q: delivery %d carries no event", p.name, d.ID)
	}
	key := eventID(d)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url.String(), bytes.NewReader(d.Event.Payload))
	if err != nil {
		return fmt.Errorf("port %q: deliver %s: %w", p.name, key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderIdempotencyKey, key)
	req.Header.Set(HeaderEventType, cmp.Or(d.Event.Type, d.EventType))
	req.Header.Set(HeaderOrderNo, cmp.Or(d.OrderNo, d.Event.OrderNo))
	a, written, err := p.send(ctx, req)
	switch {
	case err != nil && written:
		return fmt.Errorf("port %q: deliver %s: %w: %w", p.name, key, lapse.ErrUnknownOutcome, err)
	case err != nil:
		return fmt.Errorf("port %q: deliver %s: not sent: %w", p.name, key, err)
	case a.Status/100 == 2 || a.Status == http.StatusConflict:
		return nil
	}
	return fmt.Errorf("port %q: deliver %s: %w", p.name, key, p.statusError(a, a.Status/100 == 4 && !retryable(a.Status)))
}

// Query asks the service whether it applied d's event: GET URL/<event id>
// answered 200 means applied, 404 not applied. Any other answer, a timeout,
// an open breaker or a full bulkhead is an error: the outcome stays unknown,
// and a 429 or 503 with Retry-After puts the next question off as Deliver's
// does. A Query error never wraps lapse.ErrRefused.
func (p *Port) Query(ctx context.Context, d *lapse.Delivery) (applied bool, err error) {
	key := eventID(d)
	if key == "" {
		return false, fmt.Errorf("port %q: query: delivery %d has no event id", p.name, d.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url.JoinPath(key).String(), nil)
	if err != nil {
		return false, fmt.Errorf("port %q: query %s: %w", p.name, key, err)
	}
	req.Header.Set("User-Agent", userAgent)
	a, _, err := p.send(ctx, req)
	switch {
	case err != nil:
		return false, fmt.Errorf("port %q: query %s: %w", p.name, key, err)
	case a.Status == http.StatusOK:
		return true, nil
	case a.Status == http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("port %q: query %s: %w", p.name, key, p.statusError(a, false))
}

// statusError is the error of answer a, which was not a success; refused
// says whether it refuses for good. A 429 or 503 carries the wait its
// Retry-After asked for (lapse.RetryAfter).
func (p *Port) statusError(a httpcall.Answer, refused bool) *StatusError {
	se := &StatusError{StatusCode: a.Status, Body: a.Body, Refused: refused}
	if a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable {
		se.Wait = httpcall.ParseRetryAfter(a.RetryAfter, p.clock.Now())
	}
	return se
}

// send passes req through the breaker and the bulkhead and makes the round
// trip; the answer, or the failure, is the breaker's verdict.
func (p *Port) send(ctx context.Context, req *http.Request) (httpcall.Answer, bool, error) {
	// Checked before queueing too: callers waiting for a slot of a broken
	// service would only wait to be stopped.
	if p.breaker.state() == BreakerOpen {
		return httpcall.Answer{}, false, ErrBreakerOpen
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return httpcall.Answer{}, false, fmt.Errorf("%w: %w", ErrBulkheadFull, context.Cause(ctx))
	}
	defer func() { <-p.slots }()
	probe, err := p.breaker.allow()
	if err != nil {
		return httpcall.Answer{}, false, err
	}
	a, written, err := p.roundTrip(ctx, req)
	v := failed
	switch {
	case err == nil && !retryable(a.Status) && a.Status/100 != 3:
		v = healthy
	case err != nil && ctx.Err() != nil:
		v = neutral // the caller gave up first
	}
	p.breaker.done(probe, v)
	return a, written, err
}

// retryable reports whether status says the service could not take the
// request now, without judging the request itself.
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return status >= 500
}

// eventID is the idempotency key of d: its event's id.
func eventID(d *lapse.Delivery) string {
	if d.EventID != "" || d.Event == nil {
		return d.EventID
	}
	return d.Event.ID
}

// StatusError is an answer of the service that was not a success. It wraps
// lapse.ErrRefused when the service refused the event for good.
type StatusError = httpcall.StatusError
