package http

import "sync/atomic"

// inFlight counts the API requests being served against two limits: payment
// callbacks may take every slot, other requests all but the reserve.
type inFlight struct {
	n      atomic.Int64
	max    int64 // the limit of callbacks
	others int64 // the limit of every other request
}

// newInFlight returns the limits of Config.MaxInFlight max (> 0) and
// Config.CallbackReserve reserve.
func newInFlight(max, reserve int) *inFlight {
	switch {
	case reserve == 0:
		reserve = (max + 3) / 4
	case reserve < 0:
		reserve = 0
	}
	reserve = min(reserve, max-1)
	return &inFlight{max: int64(max), others: int64(max - reserve)}
}

// acquire takes a slot, unless the limit of its kind of request is reached.
// It never counts past a limit, even for a moment, so that a request that is
// refused cannot make a callback be refused too.
func (l *inFlight) acquire(callback bool) bool {
	limit := l.others
	if callback {
		limit = l.max
	}
	for {
		n := l.n.Load()
		if n >= limit {
			return false
		}
		if l.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back a slot that acquire took.
func (l *inFlight) release() { l.n.Add(-1) }
