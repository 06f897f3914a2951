// Package webhook delivers Lapse's events to an HTTP endpoint as signed POSTs,
// and verifies those signatures on the receiving side.
//
// # What a receiver gets
//
//	POST <URL>
//	Content-Type: application/json
//	Lapse-Event-Id: 0193a5c2-7e41-7c3a-9d1e-4b6f0a2c8e11
//	Lapse-Event-Type: order.closed
//	Lapse-Signature: t=1764417600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//
//	{"id": "0193a5c2-…", "type": "order.closed", "occurred_at": "…", "order": {…}}
//
// The body is the event exactly as Lapse wrote it to its outbox. Delivery is
// at least once: a retry carries the same Lapse-Event-Id (with a fresh
// signature), so receivers deduplicate on it. The Lapse-Event-* headers repeat
// the body's "id" and "type" for routing; only the body is signed, so trust
// the body once it is verified.
//
// # The signature
//
// Lapse-Signature is a list of key=value items separated by commas:
//
//	t    the Unix time, in seconds, at which Lapse signed the request; once
//	v1   the lower-case hex HMAC-SHA256 of the signed payload under one
//	     secret; one v1 per signing secret, so during a secret rotation the
//	     header carries a v1 for the old secret and one for the new
//
// Other keys may be added later: ignore them. To verify a request:
//
//  1. Take t and every v1 from the header.
//  2. Build the signed payload: the value of t exactly as written, a full
//     stop, and the raw request body byte for byte, before any JSON parsing:
//     "1764417600.{\"id\":…}".
//  3. Compute HMAC-SHA256 of the signed payload with your secret (its bytes
//     as configured) as the key, and hex-encode it.
//  4. Accept the request if that equals any v1, compared in constant time,
//     and t is within your tolerance (five minutes is usual) of your clock,
//     in either direction. Reject it otherwise.
//
// A test vector: with the secret 0123456789abcdef, t=1764417600 and the body
// {"a":1}, the signed payload is 1764417600.{"a":1} and v1 is
// e7306e2a2f361e3e38138bff3cd5c14d21f4860a5a09cd2c559432c35d50d962.
//
// Verify does exactly this, for receivers written in Go.
//
// To rotate a secret, put the new one in Config.Secrets beside Config.Secret,
// give it to the receiver, then make it Config.Secret and drop the old one.
//
// # What Lapse makes of the answer
//
//	2xx, 409             delivered (409: the receiver had it already)
//	408, 425, 429        not taken now; retried on the schedule
//	410, any other 4xx   refused for good: the delivery dies and its order
//	                     goes to manual review
//	anything else        retried: 5xx, 3xx (redirects are not followed),
//	                     no answer at all, and an answer whose headers run
//	                     past 64 KiB
//
// A 429 or 503 with a Retry-After header (seconds, or an HTTP date) puts
// the next attempt off by that much when the schedule would come sooner,
// up to the schedule's longest wait; the attempt counts all the same.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/httpcall"
)

// Headers of a webhook request.
const (
	HeaderEventID   = "Lapse-Event-Id"
	HeaderEventType = "Lapse-Event-Type"
	HeaderSignature = "Lapse-Signature"
)

// MinSecretLen is the shortest secret New accepts: an HMAC key shorter than
// this is within reach of guessing.
const MinSecretLen = 16

const userAgent = "lapse-webhook/1"

// Config configures a Sink. URL and a secret are required; zero values take
// the documented defaults and negative ones are rejected.
type Config struct {
	// URL receives the events: an absolute http or https URL (https unless
	// the receiver is on a network you trust).
	URL string
	// Secret signs every request; at least MinSecretLen bytes.
	Secret string
	// Secrets are more signing secrets, for rotation: the request carries a
	// v1 signature for Secret and for each of these, in that order. Each is
	// at least MinSecretLen bytes.
	Secrets []string
	// ConnectTimeout bounds making a connection: the dial and the TLS
	// handshake. Default: 2s.
	ConnectTimeout time.Duration
	// ReadTimeout bounds the rest, from the moment a connection is held:
	// writing the request, waiting for the answer and reading it.
	// Default: 10s.
	ReadTimeout time.Duration
	// Clock gives the signature's timestamp. Default: lapse.SystemClock.
	Clock lapse.Clock
	// HTTPClient replaces the client built from ConnectTimeout, for tests.
	// ReadTimeout still applies as long as its transport reports httptrace
	// events, as net/http's does.
	HTTPClient *http.Client
}

// Sink delivers events to one webhook endpoint. It is a lapse.Handler; it
// is safe for concurrent use.
type Sink struct {
	url      string
	secrets  []string
	client   *http.Client
	timeouts *httpcall.Timeouts
	clock    lapse.Clock
}

// New returns a Sink that posts to cfg.URL, signed with cfg.Secret and
// cfg.Secrets.
func New(cfg Config) (*Sink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		return nil, fmt.Errorf("webhook: URL %q is not an absolute http or https URL without a fragment", httpcall.RedactURL(cfg.URL))
	}
	if cfg.Secret == "" {
		return nil, errors.New("webhook: a signing secret is required")
	}
	secrets := append([]string{cfg.Secret}, cfg.Secrets...)
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("webhook: signing secret %d is %d bytes; at least %d are required", i+1, len(s), MinSecretLen)
		}
		if slices.Contains(secrets[:i], s) {
			return nil, fmt.Errorf("webhook: signing secret %d is given twice", i+1)
		}
	}
	if cfg.ConnectTimeout < 0 || cfg.ReadTimeout < 0 {
		return nil, errors.New("webhook: timeouts must not be negative")
	}
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 2*time.Second)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, 10*time.Second)
	var clock lapse.Clock = lapse.SystemClock{}
	if cfg.Clock != nil {
		clock = cfg.Clock
	}
	timeouts := httpcall.NewTimeouts(cfg.ConnectTimeout, cfg.ReadTimeout)
	client := cfg.HTTPClient
	if client == nil {
		client = httpcall.NewClient(timeouts, 16, false)
	}
	return &Sink{url: u.String(), secrets: secrets, client: client, timeouts: timeouts, clock: clock}, nil
}

// Deliver posts d's event, signed. It returns nil when the receiver has the
// event (2xx, 409); an error wrapping lapse.ErrRefused for 410 and any other
// 4xx except 408, 425 and 429; an error wrapping lapse.ErrUnknownOutcome
// when the request was written in full but no answer came (a Sink cannot be
// asked, so Lapse retries and the receiver deduplicates); and any other
// error, retryable, otherwise. A *StatusError in the chain holds the status
// and the start of the body, and, for a 429 or 503, the wait its
// Retry-After asked for (lapse.RetryAfter).
func (s *Sink) Deliver(ctx context.Context, d *lapse.Delivery) error {
	if d.Event == nil {
		return fmt.Errorf("webhook: delivery %d carries no event", d.ID)
	}
	id := cmp.Or(d.EventID, d.Event.ID)
	body := d.Event.Payload
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook: deliver %s: %w", id, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderEventID, id)
	req.Header.Set(HeaderEventType, cmp.Or(d.Event.Type, d.EventType))
	req.Header.Set(HeaderSignature, Sign(s.clock.Now(), body, s.secrets...))
	a, written, err := s.roundTrip(ctx, req)
	switch {
	case err != nil && written:
		return fmt.Errorf("webhook: deliver %s: %w: %w", id, lapse.ErrUnknownOutcome, err)
	case err != nil:
		return fmt.Errorf("webhook: deliver %s: not sent: %w", id, err)
	case a.Status/100 == 2 || a.Status == http.StatusConflict:
		return nil
	}
	se := &StatusError{StatusCode: a.Status, Body: a.Body, Refused: refused(a.Status)}
	if a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable {
		se.Wait = httpcall.ParseRetryAfter(a.RetryAfter, s.clock.Now())
	}
	return fmt.Errorf("webhook: deliver %s: %w", id, se)
}

// SetTimeouts changes the connect and read timeouts of the calls made from
// now on (a configuration reload); a zero leaves that one as it is.
func (s *Sink) SetTimeouts(connect, read time.Duration) { s.timeouts.Set(connect, read) }

// refused reports whether status is the receiver refusing an event for good.
func refused(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status/100 == 4
}

// StatusError is an answer of the receiver that was not a success. It wraps
// lapse.ErrRefused when the receiver refused the event for good.
type StatusError = httpcall.StatusError
