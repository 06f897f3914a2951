package http

import (
	"context"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// readyFor is how long /readyz answers from one readiness check. Anyone may
// ask /readyz, as often as they like, outside the in-flight limit, and the
// default check takes one of the API's database connections (a ping): a
// flood of them queued the API's requests behind pings. A load balancer
// asks every few seconds; an answer a second old tells it nothing wrong.
const readyFor = time.Second

// readiness runs Config.Ready at most once per readyFor: the /readyz
// requests that come while a check runs wait for its answer, and those that
// come within readyFor of its end take it too.
type readiness struct {
	check func(context.Context) error
	clock lapse.Clock

	mu  sync.Mutex
	at  time.Time // when the last check ended; zero: none yet
	err error
}

// ready returns the answer of a check that ended less than readyFor ago,
// or of one it runs. The check runs without the caller's cancellation, so
// that a client that goes away does not leave its cancellation as the
// answer for the others; Config.Ready bounds its own time (StoreReady: 2 s).
func (c *readiness) ready(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.clock.Now(); !c.at.IsZero() && !now.Before(c.at) && now.Sub(c.at) < readyFor {
		return c.err
	}
	c.err = c.check(context.WithoutCancel(ctx))
	c.at = c.clock.Now()
	return c.err
}
