package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// attemptMany makes one attempt of each of ds, deliveries of s leased
// together, in one call of s's BatchHandler, and records their outcomes:
// the delivered ones in one store call (DeliveryDoneMany), each failed one
// as attempt records it. The call has one context, so a lease that the
// heartbeat cuts short cuts the whole call short, as if each attempt had
// been; what was delivered before that stays delivered. A delivery whose
// last outcome is unknown, when the handler can be asked about it, goes
// through attempt instead, which asks before it sends. It calls answered
// once the handler has answered for all of ds, before it records their
// outcomes, unless it returns before then.
func (d *Deliverer) attemptMany(ctx context.Context, s *Subscription, h lapse.BatchHandler, ds []*lapse.Delivery, answered func()) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if _, asks := h.(lapse.QueryHandler); asks {
		var rest []*lapse.Delivery
		for _, dl := range ds {
			if dl.Unknown {
				wg.Go(func() { d.attempt(ctx, s, dl) })
			} else {
				rest = append(rest, dl)
			}
		}
		ds = rest
	}

	start := d.e.clock.Now()
	wall := time.Now()
	tctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	actx, cut := context.WithCancelCause(tctx)
	defer cut(nil)
	defer func() {
		for _, dl := range ds {
			d.leases.release(dl)
		}
	}()
	sending := make([]*lapse.Delivery, 0, len(ds))
	for _, dl := range ds {
		if ctx.Err() != nil || !d.leases.start(dl, cut) {
			continue // its lease expires, and the delivery is taken over
		}
		if overrun(s, dl) {
			rec := lapse.DeliveryAttempt{DeliveryID: dl.ID, Attempt: dl.Attempts, Worker: d.cfg.Owner, StartedAt: start}
			d.abandon(s, dl, &rec, wall, d.finisher(ctx, dl, &rec, wall))
			continue
		}
		_, more := s.retries().Next(dl.Failures(), 0)
		dl.Final = !more
		sending = append(sending, dl)
	}
	if len(sending) == 0 {
		return
	}

	errs := d.deliverMany(actx, s, h, sending)
	wg.Wait()
	answered()
	if len(errs) != len(sending) {
		err := fmt.Errorf("engine: subscriber %s answered %d deliveries with %d results", s.Name, len(sending), len(errs))
		errs = make([]error, len(sending))
		for i := range errs {
			errs[i] = err
		}
	}
	recs := make([]lapse.DeliveryAttempt, len(sending))
	var done []*lapse.Delivery
	var doneRecs []lapse.DeliveryAttempt
	for i, dl := range sending {
		recs[i] = lapse.DeliveryAttempt{DeliveryID: dl.ID, Attempt: dl.Attempts, Worker: d.cfg.Owner, StartedAt: start}
		if errs[i] == nil {
			recs[i].Outcome = lapse.OutcomeOK
			done = append(done, dl)
			doneRecs = append(doneRecs, recs[i])
		}
	}
	d.doneMany(ctx, s, done, doneRecs, wall)
	for i, dl := range sending {
		if errs[i] != nil {
			d.failed(ctx, actx, s, dl, &recs[i], errs[i], wall, d.finisher(ctx, dl, &recs[i], wall))
			d.leases.release(dl) // finished: the heartbeat has nothing more to renew
		}
	}
}

// doneMany records the delivered attempts recs of ds in one store call.
// When that call fails twice for another reason than a store that cannot
// be reached, it records each on its own, so that one row the store
// refuses does not cost the others their record.
func (d *Deliverer) doneMany(ctx context.Context, s *Subscription, ds []*lapse.Delivery, recs []lapse.DeliveryAttempt, wall time.Time) {
	if len(ds) == 0 {
		return
	}
	for i := range recs {
		recs[i].Duration = time.Since(wall)
	}
	// Their attempts are over: the heartbeat stops renewing their leases
	// now, so that a renewal does not wait on the rows this finish locks
	// and then report as lost the leases it finished. A finish that takes
	// longer than what is left of a lease may find a delivery taken over,
	// and reports it lost, as it should.
	for _, dl := range ds {
		d.leases.release(dl)
	}
	p := &lapse.DeliveryDoneManyParams{Owner: d.cfg.Owner, At: d.e.clock.Now(), Attempts: recs}
	lost, err := d.e.work.DeliveryDoneMany(context.WithoutCancel(ctx), p)
	if err != nil && (!errors.Is(err, lapse.ErrStoreUnavailable) || errors.Is(err, lapse.ErrStoreBusy)) {
		lost, err = d.e.work.DeliveryDoneMany(context.WithoutCancel(ctx), p) // once more: a server may have picked it to break a deadlock
	}
	switch {
	case errors.Is(err, lapse.ErrStoreUnavailable) && !errors.Is(err, lapse.ErrStoreBusy):
		d.e.log.Error("deliverer: cannot record delivered attempts; their leases will expire and the deliveries be retried",
			"subscriber", s.Name, "deliveries", len(ds), "err", err)
		for range ds {
			d.counted(s, lapse.OutcomeOK, wall)
		}
	case err != nil:
		d.e.log.Warn("deliverer: cannot record delivered attempts together; recording each", "subscriber", s.Name, "deliveries", len(ds), "err", err)
		for i, dl := range ds {
			d.settled(s, dl, d.finisher(ctx, dl, &recs[i], wall)(d.e.work, &lapse.DeliveryFinishParams{Status: lapse.DeliveryDone}), lapse.OutcomeOK, wall, "")
		}
	default:
		gone := make(map[int64]bool, len(lost))
		for _, id := range lost {
			gone[id] = true
		}
		for _, dl := range ds {
			var finishErr error
			if gone[dl.ID] {
				finishErr = lapse.ErrLeaseLost
			}
			d.settled(s, dl, finishErr, lapse.OutcomeOK, wall, "")
		}
	}
}
