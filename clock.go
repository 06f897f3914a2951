package lapse

import (
	"sync"
	"time"
)

// Clock tells Lapse the time. Every component takes one; business logic never
// calls time.Now. Logic reads the clock once per transaction.
//
// Times are UTC, truncated to microseconds: that is what both stores keep, so a
// time read back from the database equals the time that was written.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns the current UTC time truncated to microseconds.
func (SystemClock) Now() time.Time { return Truncate(time.Now()) }

// Truncate normalises t to the precision and zone Lapse stores: UTC microseconds.
func Truncate(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Ceil is t in UTC rounded up to the microsecond: the earliest time Lapse
// stores that is not before t. A bound compared with stored times is kept
// so, never truncated: a stored time is at or after t exactly when it is at
// or after Ceil(t), and before t exactly when it is before Ceil(t), where
// Truncate would take in, or leave out, the microsecond below t.
func Ceil(t time.Time) time.Time {
	u := Truncate(t)
	if u.Before(t) {
		u = u.Add(time.Microsecond)
	}
	return u
}

// ManualClock is a Clock that moves only when told to. Safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: Truncate(t)} }

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = Truncate(t)
}

// Advance moves the clock forward by d and returns the new time.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = Truncate(c.now.Add(d))
	return c.now
}
