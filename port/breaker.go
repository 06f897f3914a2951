package port

import (
	"errors"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// ErrBreakerOpen is in the chain of an error when the circuit breaker
// stopped a call: nothing was sent, so retrying later is safe.
var ErrBreakerOpen = errors.New("port: circuit breaker open")

// BreakerState is where a port's circuit breaker stands.
type BreakerState string

// Breaker states. The port's own calls move the breaker; nothing else does.
const (
	// BreakerClosed: calls go out; the verdicts of the last
	// BreakerConfig.Window calls are kept, and BreakerConfig.Failures
	// failures among them open the breaker.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: calls fail fast with ErrBreakerOpen, without sending,
	// until BreakerConfig.Cooldown has passed since the breaker opened.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: the cooldown is over. One call goes out as a probe
	// while the others keep failing fast; a healthy answer closes the
	// breaker, a failure opens it for another cooldown.
	BreakerHalfOpen BreakerState = "half-open"
)

// verdict is what one call says about the port's health.
type verdict int

const (
	healthy verdict = iota // the port answered deliberately, whatever it answered
	failed                 // the port failed, timed out or was unreachable
	neutral                // the caller gave up first: nothing learned
)

// breaker keeps the verdicts of the last calls and stops calls when too many
// of them failed: a service that fails now and then keeps getting calls (the
// deliveries retry), one that is down stops being hammered. It reads the
// clock only to time the cooldown, so a test can move it.
type breaker struct {
	clock    lapse.Clock
	limit    int // failures in the window that open the breaker
	cooldown time.Duration

	mu       sync.Mutex
	window   []bool    // ring of the last verdicts while closed; true: failed
	next     int       // where the next verdict goes
	seen     int       // verdicts in the ring, up to len(window)
	failures int       // failed verdicts in the ring
	open     bool      // open or half-open, told apart by openedAt
	openedAt time.Time // when the breaker last opened
	probing  bool      // the half-open probe is out
}

func (b *breaker) state() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateLocked(b.clock.Now())
}

func (b *breaker) stateLocked(now time.Time) BreakerState {
	switch {
	case !b.open:
		return BreakerClosed
	case now.Before(b.openedAt.Add(b.cooldown)):
		return BreakerOpen
	default:
		return BreakerHalfOpen
	}
}

// allow admits a call, or returns ErrBreakerOpen. probe reports that the
// call is the half-open probe, whose verdict must be passed to done.
func (b *breaker) allow() (probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(b.clock.Now()) {
	case BreakerClosed:
		return false, nil
	case BreakerHalfOpen:
		if !b.probing {
			b.probing = true
			return true, nil
		}
	}
	return false, ErrBreakerOpen
}

// done records a call's verdict. While the breaker is open only the probe
// counts: calls that went out before it opened say nothing about now.
func (b *breaker) done(probe bool, v verdict) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		switch v {
		case healthy:
			b.open = false
			b.reset()
		case failed:
			b.openedAt = b.clock.Now()
		}
		// neutral: still half-open; the next caller probes.
		return
	}
	if b.open {
		return
	}
	if v == neutral {
		return
	}
	if b.seen == len(b.window) && b.window[b.next] {
		b.failures-- // the oldest verdict leaves the window
	}
	b.window[b.next] = v == failed
	b.next = (b.next + 1) % len(b.window)
	b.seen = min(b.seen+1, len(b.window))
	if v == failed {
		b.failures++
		if b.failures >= b.limit {
			b.open, b.openedAt = true, b.clock.Now()
		}
	}
}

// reset forgets the window: after a successful probe the service starts
// with a clean record.
func (b *breaker) reset() {
	clear(b.window)
	b.next, b.seen, b.failures = 0, 0, 0
}
