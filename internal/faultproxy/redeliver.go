package faultproxy

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// Redeliverer plays Lapse's delivery workers in tests that break the network
// under a sink: a few workers deliver every submitted event and put each
// failed one back with a growing wait, until it is delivered. Its record of
// attempts lets a test check what the sink did while the network was broken.
type Redeliverer struct {
	h        lapse.Handler
	base     time.Duration
	maxWait  time.Duration
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	wake     chan struct{}
	mu       sync.Mutex
	due      dueHeap
	attempts Attempts
	pending  int
	progress chan struct{} // closed and replaced on every delivery
	done     int
}

// Attempt is one call of Deliver.
type Attempt struct {
	EventID    string
	Start, End time.Time
	Err        error
}

// Attempts is a record of attempts, in the order they ended.
type Attempts []Attempt

// Failed returns how many attempts failed.
func (as Attempts) Failed() int {
	n := 0
	for _, a := range as {
		if a.Err != nil {
			n++
		}
	}
	return n
}

// FirstErr returns the first failed attempt's error, or nil.
func (as Attempts) FirstErr() error {
	for _, a := range as {
		if a.Err != nil {
			return a.Err
		}
	}
	return nil
}

// Within returns the attempts that started after from and ended before to.
func (as Attempts) Within(from, to time.Time) Attempts {
	var out Attempts
	for _, a := range as {
		if a.Start.After(from) && a.End.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// Slowest returns the longest attempt.
func (as Attempts) Slowest() Attempt {
	var slow Attempt
	for _, a := range as {
		if a.End.Sub(a.Start) > slow.End.Sub(slow.Start) {
			slow = a
		}
	}
	return slow
}

// FirstSuccessAfter returns how long after t an attempt that started after t
// first succeeded, or -1 if none did.
func (as Attempts) FirstSuccessAfter(t time.Time) time.Duration {
	first := time.Duration(-1)
	for _, a := range as {
		if a.Err == nil && a.Start.After(t) && (first < 0 || a.End.Sub(t) < first) {
			first = a.End.Sub(t)
		}
	}
	return first
}

// NewRedeliverer starts workers that deliver through h, waiting base after an
// event's first failure and twice as long after each next one, up to maxWait.
// Stop ends them.
func NewRedeliverer(h lapse.Handler, workers int, base, maxWait time.Duration) *Redeliverer {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Redeliverer{h: h, base: base, maxWait: maxWait, cancel: cancel,
		wake: make(chan struct{}, 1), progress: make(chan struct{})}
	for range workers {
		r.wg.Go(func() { r.work(ctx) })
	}
	return r
}

// Submit queues d for delivery now.
func (r *Redeliverer) Submit(d *lapse.Delivery) {
	r.mu.Lock()
	r.pending++
	heap.Push(&r.due, &queued{d: d, at: time.Now()})
	r.mu.Unlock()
	r.poke()
}

// WaitDelivered blocks until at least n events have been delivered, or ctx
// ends.
func (r *Redeliverer) WaitDelivered(ctx context.Context, n int) error {
	for {
		r.mu.Lock()
		done, progress := r.done, r.progress
		r.mu.Unlock()
		if done >= n {
			return nil
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitIdle blocks until every submitted event has been delivered, or ctx ends.
func (r *Redeliverer) WaitIdle(ctx context.Context) error {
	for {
		r.mu.Lock()
		pending, progress := r.pending, r.progress
		r.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Attempts returns every attempt so far.
func (r *Redeliverer) Attempts() Attempts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(Attempts(nil), r.attempts...)
}

// Delivered returns how many events have been delivered.
func (r *Redeliverer) Delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// SubmitEvery submits next(0), next(1), … one every interval, as orders
// closing at a steady rate would, until the returned stop is called; stop
// returns every delivery submitted.
func (r *Redeliverer) SubmitEvery(interval time.Duration, next func(n int) *lapse.Delivery) (stop func() []*lapse.Delivery) {
	quit, done := make(chan struct{}), make(chan struct{})
	var sent []*lapse.Delivery
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for n := 0; ; n++ {
			d := next(n)
			sent = append(sent, d)
			r.Submit(d)
			select {
			case <-t.C:
			case <-quit:
				return
			}
		}
	}()
	return func() []*lapse.Delivery {
		close(quit)
		<-done
		return sent
	}
}

// Stop ends the workers after their current attempts; undelivered events
// are dropped.
func (r *Redeliverer) Stop() {
	r.cancel()
	r.wg.Wait()
}

func (r *Redeliverer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Redeliverer) work(ctx context.Context) {
	for {
		q := r.next(ctx)
		if q == nil {
			return
		}
		start := time.Now()
		err := r.h.Deliver(ctx, q.d)
		end := time.Now()
		r.mu.Lock()
		r.attempts = append(r.attempts, Attempt{EventID: q.d.Event.ID, Start: start, End: end, Err: err})
		if err == nil {
			r.pending--
			r.done++
			close(r.progress)
			r.progress = make(chan struct{})
		} else {
			q.failures++
			wait := r.base << min(q.failures-1, 20)
			q.at = end.Add(min(wait, r.maxWait))
			heap.Push(&r.due, q)
		}
		r.mu.Unlock()
		if err != nil {
			r.poke()
		}
	}
}

// next returns the earliest event that is due, waiting for one, or nil when
// ctx ends.
func (r *Redeliverer) next(ctx context.Context) *queued {
	const idle = 50 * time.Millisecond // bounds a wait that missed a wake-up
	for {
		wait := idle
		r.mu.Lock()
		if len(r.due) > 0 {
			if d := time.Until(r.due[0].at); d <= 0 {
				q := heap.Pop(&r.due).(*queued)
				more := len(r.due) > 0
				r.mu.Unlock()
				if more {
					r.poke() // another worker may take the next one
				}
				return q
			} else if d < wait {
				wait = d
			}
		}
		r.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

type queued struct {
	d        *lapse.Delivery
	at       time.Time
	failures int
}

// dueHeap orders queued events by when they are due.
type dueHeap []*queued

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*queued)) }
func (h *dueHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	*h = old[:len(old)-1]
	return q
}
