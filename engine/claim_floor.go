package engine

import (
	"sync"
	"time"
)

// claimFloor is where the claims of one burn start in the due index.
//
// A claim reads the due index in deadline order. The orders a burn closes
// leave their index entries behind until vacuum removes them, and a
// transaction held open anywhere on the database (a report, a backup, a
// forgotten psql session) keeps vacuum, and the scans themselves, from
// removing any: each claim of a backlog would step again over the entry of
// every order the burn has closed so far, and the burn would slow as it
// went (PostgreSQL; InnoDB's purge waits the same way). So each claim of a
// burn reads from the deadline of the latest order claimed before it, and
// only now and then from the start again, for the due orders that reading
// from there would pass over: those another claimer held when a scan went by
// (its transaction may roll back), those a claim returned but did not close,
// and those given an earlier deadline since the burn began. Nothing is lost
// either way: the next burn, and every sweep pass, begins at the start.
//
// A claim reads from the start once every MaxSleep, the bound the precise
// path keeps for deadlines other processes set, or, when such a claim takes
// more than a twentieth of that (the index full of entries nothing may
// remove yet), once every twenty times as long as it took, so that those
// claims cost the burn about 5 % at most.
type claimFloor struct {
	every time.Duration // MaxSleep

	mu   sync.Mutex
	at   time.Time     // the deadline of the latest order claimed; zero: no claim yet
	full time.Time     // when the latest claim from the start began (the machine's clock)
	cost time.Duration // how long it took
}

// next returns where the next claim starts (zero: at the start) and, for a
// claim from the start, when it began.
func (f *claimFloor) next() (from, began time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() || time.Since(f.full) >= max(f.every, 20*f.cost) {
		f.full = time.Now() // one claim from the start at a time
		return time.Time{}, f.full
	}
	return f.at, time.Time{}
}

// claimed records a claim that began at began (zero: not from the start)
// and whose latest order's deadline is last, as soon as the claim returned
// and before its transaction ends, so that claims beside it do not step over
// the orders it holds: a claim from the start walks on from its own latest
// order, any other from the latest of all.
func (f *claimFloor) claimed(began, last time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !began.IsZero() {
		f.cost = time.Since(began)
		f.at = last
		return
	}
	if last.After(f.at) {
		f.at = last
	}
}

// restart makes the next claim read from the start: a claim recorded by
// claimed has rolled back, and the orders it held are due again behind the
// floor.
func (f *claimFloor) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = time.Time{}
}
