package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// Default lease timing of a Deliverer. The lease is short so that a
// delivery whose worker died is taken over within about ten seconds; it is
// renewed five times a lease, so that a live worker keeps it through a GC
// pause, a slow statement or one or two failed renewals.
const (
	defaultLease   = 10 * time.Second
	renewsPerLease = 5
)

// Causes with which the heartbeat cuts an attempt short, and the one
// recorded for an attempt cut short because its worker stops.
var (
	errLeaseLost   = fmt.Errorf("cut short: %w", lapse.ErrLeaseLost)
	errLeaseUnsure = errors.New("cut short: its lease could not be renewed, and another worker may take the delivery over before long")
	errStopped     = errors.New("cut short: its worker stopped")
)

// leases are the leases a Deliverer holds, from the claim to the end of each
// attempt, which its heartbeat renews.
type leases struct {
	mu sync.Mutex
	m  map[int64]*heldLease // by delivery id
}

// heldLease is the lease of one attempt, from its claim to its end.
type heldLease struct {
	attempt int                     // the lease token
	until   time.Time               // the end of the lease as the store last confirmed it
	outside bool                    // the attempt calls out of the database
	cancel  context.CancelCauseFunc // nil until the attempt starts
	cut     bool                    // the attempt must stop, or not start
}

// hold registers the leases of claimed deliveries of s, so that they are
// renewed from the claim on, also while they wait for a slot.
func (l *leases) hold(s *Subscription, ds []*lapse.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[int64]*heldLease{}
	}
	for _, dl := range ds {
		if old := l.m[dl.ID]; old != nil {
			old.stop(errLeaseLost) // an earlier attempt of ours, whose lease ran out: it must not go on beside this one
		}
		h := &heldLease{attempt: dl.Attempts, outside: s.Local == nil}
		if dl.LeaseUntil != nil {
			h.until = *dl.LeaseUntil
		}
		l.m[dl.ID] = h
	}
}

// start hands the lease of dl's attempt the cancel that cuts it short, and
// reports false when the attempt must not start: its lease was lost, or an
// outside attempt's could not be renewed in time.
func (l *leases) start(dl *lapse.Delivery, cancel context.CancelCauseFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.m[dl.ID]
	if h == nil || h.attempt != dl.Attempts || h.cut {
		return false
	}
	h.cancel = cancel
	return true
}

// stop marks h cut with cause, cancelling its attempt if it has started. It
// reports whether h was not cut before. The caller holds l.mu.
func (h *heldLease) stop(cause error) bool {
	if h.cut {
		return false
	}
	h.cut = true
	if h.cancel != nil {
		h.cancel(cause)
	}
	return true
}

// release forgets the lease of the attempt of dl once it has ended. A later
// attempt of the same delivery (this worker took it over again after losing
// the lease) keeps its own.
func (l *leases) release(dl *lapse.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.m[dl.ID]; h != nil && h.attempt == dl.Attempts {
		delete(l.m, dl.ID)
	}
}

// held returns the leases in flight, by delivery id.
func (l *leases) held() []lapse.DeliveryLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]lapse.DeliveryLease, 0, len(l.m))
	for id, h := range l.m {
		out = append(out, lapse.DeliveryLease{ID: id, Attempt: h.attempt})
	}
	slices.SortFunc(out, func(a, b lapse.DeliveryLease) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Renew extends the leases of the attempts this Deliverer has in flight, all
// in one statement, and cuts short the attempts that must not go on: at
// once every attempt whose lease the store reports lost (another attempt
// has the delivery), and every outside attempt (one that calls out of the
// database) whose lease, as last confirmed, has half a Lease or less left,
// because renewals failed or hung. An outside attempt thus stops before
// another worker can take its delivery over, so that two workers never call
// out for one delivery at once, provided its handler returns when its
// context ends. A local attempt is not cut short for a failed renewal: its
// effect commits only with its finish, which fails once the lease is lost.
//
// The running Deliverer renews every RenewInterval, beside its loops; RunOnce
// does not, so a test calls Renew beside it. Renew returns the store's
// error, after it has cut short what it must.
func (d *Deliverer) Renew(ctx context.Context) error {
	ls := d.leases.held()
	var err error
	if len(ls) > 0 {
		until := d.e.clock.Now().Add(d.cfg.Lease)
		rctx, cancel := context.WithTimeout(ctx, d.cfg.Lease/2) // past that, renewing is too late to keep them
		var lost []int64
		lost, err = d.e.work.DeliveryRenew(rctx, &lapse.DeliveryRenewParams{Owner: d.cfg.Owner, Leases: ls, LeaseUntil: until})
		cancel()
		if err == nil {
			d.renewed(ls, lost, until)
		} else {
			err = fmt.Errorf("deliverer: renewing %d leases: %w", len(ls), err)
		}
	}
	d.guard(d.e.clock.Now())
	return err
}

// renewed records the outcome of a renewal of ls: the leases not in lost
// last until until; those in lost are gone, and their attempts are cut
// short.
func (d *Deliverer) renewed(ls []lapse.DeliveryLease, lost []int64, until time.Time) {
	l := &d.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ls {
		h := l.m[r.ID]
		if h == nil || h.attempt != r.Attempt {
			continue // ended meanwhile
		}
		if !slices.Contains(lost, r.ID) {
			if until.After(h.until) {
				h.until = until
			}
			continue
		}
		if h.stop(errLeaseLost) {
			d.e.log.Warn("deliverer: lease lost while its attempt ran; the attempt is cut short", "delivery", r.ID, "attempt", r.Attempt)
		}
	}
}

// guard cuts short the outside attempts whose leases, as last confirmed,
// end within half a Lease of now. Between two guards there is at most one
// RenewInterval, so a lease the heartbeat can no longer renew is given up
// with at least Lease/2 − RenewInterval left for the attempt to stop.
func (d *Deliverer) guard(now time.Time) {
	l := &d.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, h := range l.m {
		if h.outside && h.until.Sub(now) <= d.cfg.Lease/2 && h.stop(errLeaseUnsure) {
			d.e.log.Warn("deliverer: lease not renewed in time; the attempt is cut short before another worker can take it over",
				"delivery", id, "attempt", h.attempt, "lease_until", h.until)
		}
	}
}

// heartbeat renews the leases in flight every RenewInterval until ctx ends.
// A renewal runs beside the beat, so that a statement that hangs does not
// hold back the guard, which runs on every beat; a beat that finds the last
// renewal still running skips its own.
func (d *Deliverer) heartbeat(ctx context.Context) {
	tick := time.NewTicker(d.cfg.RenewInterval)
	defer tick.Stop()
	var running chan struct{} // closed when the renewal in flight ends; nil when none is
	for {
		select {
		case <-ctx.Done():
			if running != nil {
				<-running
			}
			return
		case <-tick.C:
		}
		d.guard(d.e.clock.Now())
		if running != nil {
			select {
			case <-running:
			default:
				continue
			}
		}
		done := make(chan struct{})
		running = done
		go func() {
			defer close(done)
			if err := d.Renew(ctx); err != nil && ctx.Err() == nil {
				d.e.log.Error("deliverer: cannot renew leases; outside attempts are cut short if this lasts", "err", err)
			}
		}()
	}
}
