package engine

import (
	"sync"
	"time"
)

// claimFloor is where the claims of a burn, and the precise path's looks
// at the next deadline, start in the due index.
//
// A claim or a look reads the due index in (deadline, id) order. The orders
// closed leave their index entries behind until vacuum removes them, and
// vacuum waits: for a fifth of the table by default (2,000,000 entries at
// 10,000,000 pending), and for any transaction held open anywhere on the
// database (a report, a backup, a forgotten psql session), which also
// keeps the scans from marking the entries dead as they pass. A claim or a
// look that read from the start would step again over the entry of every
// order closed since the last vacuum: a backlog's burn would slow as it
// went, and deadlines coming due at a steady rate would cost their claimer
// more with every order it closed (PostgreSQL; InnoDB's purge waits the
// same way). So each reads from the deadline and id of the latest order
// claimed (a look, from its deadline), and only now and then from the start
// again, for the due orders that
// reading from there would pass over: those another claimer held when a
// scan went by (its transaction may roll back), those a claim returned but
// did not close, and those given a deadline before the floor by another
// process. This process's own deadlines move the floor back at once
// (lower): the waker tells it of each, as it tells the precise path.
// Nothing is lost either way: every sweep pass begins at the start.
//
// A burn of RunOnce or of the sweep has a floor of its own, which begins at
// the start; the precise path keeps one for as long as it runs, so that its
// looks and burns at a steady rate read on from the latest order closed.
//
// A claim or look reads from the start once every MaxSleep, the bound the
// precise path keeps for deadlines other processes set, or, when such a
// read takes more than a twentieth of that (the index full of entries
// nothing may remove yet), once every twenty times as long as it took, so
// that those reads cost about 5 % at most.
type claimFloor struct {
	every time.Duration // MaxSleep

	mu   sync.Mutex
	at   floorKey      // the floor; zero: none, read from the start
	full time.Time     // when the latest read from the start began (the machine's clock)
	cost time.Duration // how long it took
	// gen counts the times the floor was moved back (lower, restart): a
	// claim or look that began before such a move may not move it on,
	// since it did not read the deadlines the move was for.
	gen uint64
	// low is the earliest deadline lowered to while there was no floor
	// (zero: none): the floor, once set, is no later.
	low time.Time
}

// floorKey is a place in the due index: a deadline and, among the orders
// due then, an id; the orders at or before it are passed over. id 0 passes
// over none of those due at the deadline.
type floorKey struct {
	at time.Time
	id int64
}

func (k floorKey) isZero() bool { return k.at.IsZero() && k.id == 0 }

// before reports whether k comes before o in (deadline, id) order.
func (k floorKey) before(o floorKey) bool {
	return k.at.Before(o.at) || k.at.Equal(o.at) && k.id < o.id
}

// floorTurn is where one claim or look starts: from (zero: at the start),
// and for a read from the start, when it began.
type floorTurn struct {
	from  floorKey
	began time.Time
	gen   uint64
}

// next returns where the next claim or look starts.
func (f *claimFloor) next() floorTurn {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.isZero() || time.Since(f.full) >= max(f.every, 20*f.cost) {
		f.full = time.Now() // one read from the start at a time
		return floorTurn{began: f.full, gen: f.gen}
	}
	return floorTurn{from: f.at, gen: f.gen}
}

// setEvery sets the interval of reads from the start (MaxSleep, which a
// reload may change).
func (f *claimFloor) setEvery(every time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.every = every
}

// claimed records a claim that started at t and whose latest order is last
// (its deadline and id), as soon as the claim returned and before its
// transaction ends, so that claims beside it do not step over the orders it
// holds: a claim from the start walks on from its own latest order, any
// other from the latest of all. A claim that began before the floor was
// moved back may only move it back further.
func (f *claimFloor) claimed(t floorTurn, last floorKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !t.began.IsZero() {
		f.cost = time.Since(t.began)
	}
	switch {
	case t.gen != f.gen:
		if !f.at.isZero() && last.before(f.at) {
			f.at = last
		}
	case !t.began.IsZero(), f.at.before(last):
		f.set(last)
	}
}

// set sets the floor at k, or at low if that is earlier.
func (f *claimFloor) set(k floorKey) {
	if !f.low.IsZero() && f.low.Before(k.at) {
		k = floorKey{at: f.low}
	}
	f.at, f.low = k, time.Time{}
}

// looked records a look that started at t, began at the engine's time now
// and found next (if ok). A look from the start knows that nothing waited
// before next, nor before now: the floor moves back to the earlier of the
// two, or is set there if it had none. It is never moved on by a look; the
// claims do that.
func (f *claimFloor) looked(t floorTurn, now, next time.Time, ok bool) {
	if t.began.IsZero() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cost = time.Since(t.began)
	v := floorKey{at: now}
	if ok && next.Before(now) {
		v.at = next
	}
	if f.at.isZero() && t.gen == f.gen || !f.at.isZero() && v.before(f.at) {
		f.set(v)
	}
}

// lower moves the floor back to t, a deadline this process set or a look of
// the sweep found, if it is before it; with no floor, it keeps the floor
// that a read from the start will set from being past t.
func (f *claimFloor) lower(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch k := (floorKey{at: t}); {
	case f.at.isZero():
		if f.low.IsZero() || t.Before(f.low) {
			f.low = t
		}
	case k.before(f.at):
		f.at = k
		f.gen++
	}
}

// restart makes the next claim or look read from the start: a claim
// recorded by claimed has rolled back, and the orders it held are due again
// behind the floor, or the precise path was not in charge for a while.
func (f *claimFloor) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.low = floorKey{}, time.Time{}
	f.gen++
}
