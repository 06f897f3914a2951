package burndown

import (
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
)

// runClock is the engine's clock in a run: the wall clock, shifted so that
// the run starts at the instant its deadlines were laid out for, however
// long loading took. It moves as the wall clock does.
type runClock struct {
	shift atomic.Int64 // nanoseconds added to the wall clock
}

// Now returns the shifted wall clock, as lapse.SystemClock does the wall
// clock.
func (c *runClock) Now() time.Time {
	return lapse.Truncate(time.Now().Add(time.Duration(c.shift.Load())))
}

// startAt makes Now return t now.
func (c *runClock) startAt(t time.Time) {
	c.shift.Store(int64(time.Until(t)))
}
