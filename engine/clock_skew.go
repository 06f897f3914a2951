package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// MaxClockSkew is how far a process's clock may be from its database's
// before CheckClock refuses it. Every guard of a deadline compares with the
// clock of the process that runs it: a node whose clock is ahead closes
// orders before their deadline by the others' clocks (a payment made in
// time is then refunded as late), one behind takes payments and deadline
// moves the others refuse, and a delivery's lease is taken from the worker
// that holds it sooner by as much (a worker gives an outside call up with
// about 3 s of its lease left). The database's clock is the one that every
// node reaches, so each checks its own against it.
const MaxClockSkew = time.Second

// ErrClockSkew: the process's clock is further from the database's than
// MaxClockSkew.
var ErrClockSkew = &lapse.Error{Code: lapse.EUNAVAILABLE, Message: "engine: the process's clock is not the database's"}

// ClockSkew is one comparison of the engine's clock with its database's.
type ClockSkew struct {
	// Offset is the engine's clock minus the database's: positive when
	// the engine's runs ahead.
	Offset time.Duration
	// Error bounds how far Offset may be off: half the time the reading
	// took by the engine's clock, and the precision the database gives.
	Error time.Duration
}

// Beyond reports whether the clocks differ by more than max for certain,
// however the reading's Error falls.
func (s ClockSkew) Beyond(max time.Duration) bool { return s.Offset.Abs()-s.Error > max }

// serverTimeStep is the coarsest precision of a store's ServerTime
// (SQLite's milliseconds).
const serverTimeStep = time.Millisecond

// ClockSkew reads the database's clock (lapse.Store.ServerTime) between two
// reads of the engine's, and returns how far apart they are: the database's
// time is taken as read halfway. Errors: the store's.
func (e *Engine) ClockSkew(ctx context.Context) (ClockSkew, error) {
	return clockSkew(ctx, e.store, e.clock)
}

func clockSkew(ctx context.Context, s lapse.Store, clock lapse.Clock) (ClockSkew, error) {
	before := clock.Now()
	db, err := s.ServerTime(ctx)
	after := clock.Now()
	if err != nil {
		return ClockSkew{}, err
	}
	half := after.Sub(before) / 2
	return ClockSkew{Offset: before.Add(half).Sub(db), Error: half.Abs() + serverTimeStep}, nil
}

// CheckClock compares the engine's clock with its database's (ClockSkew)
// and returns ErrClockSkew, naming both times and how far apart they are,
// when they differ by more than MaxClockSkew: what a process checks before
// it fires a deadline or takes a payment (lapse serve does, at start). A
// reading that took longer than the bound itself is taken again, up to
// three times, so that a slow answer is not taken for a clock that is off.
// Errors: ErrClockSkew; the store's.
func (e *Engine) CheckClock(ctx context.Context) error {
	var s ClockSkew
	for range 3 {
		var err error
		if s, err = e.ClockSkew(ctx); err != nil {
			return fmt.Errorf("engine: reading the database's clock: %w", err)
		}
		if s.Error < MaxClockSkew {
			break
		}
	}
	if !s.Beyond(MaxClockSkew) {
		return nil
	}
	way := "ahead of"
	if s.Offset < 0 {
		way = "behind"
	}
	now := e.clock.Now()
	return lapse.Refine(ErrClockSkew, "this process's clock (%s) is %s %s the database's (%s), more than the %s that deadlines, payments and leases allow: "+
		"set both machines' clocks by NTP",
		now.Format(time.RFC3339Nano), s.Offset.Abs().Round(time.Millisecond), way, now.Add(-s.Offset).Format(time.RFC3339Nano), MaxClockSkew)
}
