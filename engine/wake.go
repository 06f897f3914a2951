package engine

import (
	"sync"
	"time"
)

// waker is the in-process precise trigger: it wakes the claimer when a
// deadline earlier than the one it sleeps towards is created in this process.
// It remembers one time, not every deadline, so memory stays flat however many
// orders are pending; the database index holds the rest.
type waker struct {
	mu     sync.Mutex
	target time.Time // when the claimer will wake on its own; zero while it works
	gen    uint64    // deadlines told so far, whether they woke the claimer or not
	ch     chan struct{}
	floors map[*claimFloor]struct{} // moved back to each deadline told (watch)
}

func newWaker() *waker { return &waker{ch: make(chan struct{}, 1)} }

// notify tells the claimer about a deadline at t.
func (w *waker) notify(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	for f := range w.floors {
		f.lower(t)
	}
	if w.target.IsZero() || t.Before(w.target) {
		w.target = t
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// watch has every deadline told from now on move f back (claimFloor.lower)
// until the returned function is called.
func (w *waker) watch(f *claimFloor) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.floors == nil {
		w.floors = map[*claimFloor]struct{}{}
	}
	w.floors[f] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.floors, f)
	}
}

// told returns how many deadlines the waker has been told of: a look at the
// database that began at generation g knows every deadline of this process
// as long as told still returns g.
func (w *waker) told() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// sleeping records that the claimer sleeps until t.
func (w *waker) sleeping(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.target = t
}

// working records that the claimer is awake; any notification wakes it again
// after its current pass.
func (w *waker) working() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.target = time.Time{}
}

// broadcast wakes every waiter at once: the delivery loops of all
// subscribers when this process writes events.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel that is closed at the next signal.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
