package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// DelivererConfig configures a Deliverer. Zero values take the defaults noted.
type DelivererConfig struct {
	// Batch bounds how many deliveries of one subscriber RunOnce claims.
	// (The running loops claim as many as they have free slots.) Default:
	// 4 × the subscription's Concurrency.
	Batch int
	// Lease is how long a claimed delivery stays with its worker before
	// another may take it over, unless the worker renews it: while an
	// attempt runs, its lease is renewed every RenewInterval, so an attempt
	// may run as long as its subscription's Timeout, however short the
	// lease. A delivery whose worker died is taken over within a Lease. The
	// nodes' clocks must agree to well within Lease/2 − RenewInterval (NTP
	// does). Default 10s.
	Lease time.Duration
	// RenewInterval is how often the worker renews the leases of its
	// attempts in flight, in one statement. An outside attempt whose lease
	// could not be renewed for half a Lease is cut short (see
	// Deliverer.Renew), so renewals may fail or hang for about
	// Lease/2 − RenewInterval before anything is cut. Default and most:
	// Lease/5 (2s); a longer one is shortened to it.
	RenewInterval time.Duration
	// Poll bounds how long a subscriber's loop sleeps before looking for due
	// deliveries (retries come due while it sleeps; deliveries written by this
	// process wake it at once). Default 1s.
	Poll time.Duration
	// Owner names this worker on its leases and attempt rows. Default: the
	// engine's node.
	Owner string
	// CloseHold bounds how long the subscriptions that yield to closes
	// (Subscription.YieldsToCloses) claim nothing while this process's
	// Claimer burns down a backlog, counted from the start of the burn
	// (close_hold.go). Default 1m; negative: they never wait.
	CloseHold time.Duration
	// RelayWatch is how often a process looks for the relay cursors of the
	// subscriptions it does not relay and found no cursor of when it
	// started: another process that relays one may start later, write
	// events for its relay and stop for good, and its events must not wait
	// for a restart here (relay.go). Default 1m.
	RelayWatch time.Duration
}

// Deliverer hands every pending delivery to its subscriber, retrying on the
// subscriber's schedule until it is done or dead. Each subscriber has its own
// loop and bulkhead (Concurrency attempts in flight), so a slow one delays
// only itself. Deliverers on many processes share the work through short
// leases that a heartbeat renews while the attempts run: a delivery whose
// worker died is taken over when its lease ends, within a Lease, and its
// attempt count is kept; an attempt whose lease is lost, or could not be
// renewed in time, is cut short before another worker may take over.
//
// Guarantees: a local effect commits with its dedup row and the delivery's
// completion, so it happens once; an outside delivery happens at least once,
// with the event id as its idempotency key, and an attempt whose outcome is
// unknown is resolved by asking the subscriber before it is sent again. A
// delivery that runs out of schedule is dead: its order goes to manual
// review and a delivery.dead event is written.
type Deliverer struct {
	e    *Engine
	cfg  DelivererConfig
	subs map[string]*Subscription

	leases leases // of the attempts in flight

	mu      sync.Mutex
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewDeliverer returns a Deliverer for the engine's subscriptions.
func NewDeliverer(e *Engine, cfg DelivererConfig) *Deliverer {
	d := &Deliverer{e: e, cfg: cfg, subs: map[string]*Subscription{}}
	for _, s := range e.subs {
		d.subs[s.Name] = s
	}
	if d.cfg.Lease <= 0 {
		d.cfg.Lease = defaultLease
	}
	if most := d.cfg.Lease / renewsPerLease; d.cfg.RenewInterval <= 0 || d.cfg.RenewInterval > most {
		d.cfg.RenewInterval = most
	}
	if d.cfg.Poll <= 0 {
		d.cfg.Poll = time.Second
	}
	if d.cfg.Owner == "" {
		d.cfg.Owner = e.node
	}
	if d.cfg.CloseHold == 0 {
		d.cfg.CloseHold = defaultCloseHold
	}
	if d.cfg.RelayWatch <= 0 {
		d.cfg.RelayWatch = time.Minute
	}
	return d
}

// Start runs one loop per subscriber, and the heartbeat that renews the
// leases of their attempts, until Stop or until ctx ends. It makes the
// cursors of the relayed subscriptions before it returns (relayMakeAll):
// start it before anything in this process writes events.
func (d *Deliverer) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		return
	}
	// The heartbeat outlives the loops: it renews until every attempt has
	// returned.
	beat, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	ctx, cancel := context.WithCancel(ctx)
	d.running, d.cancel, d.done = true, cancel, make(chan struct{})
	var loops, heart sync.WaitGroup
	heart.Go(func() { d.heartbeat(beat) })
	d.relayMakeAll(ctx)
	relaying := d.relaying(ctx)
	watched := map[*Subscription]bool{}
	for _, s := range d.e.subs {
		loops.Go(func() { d.loop(ctx, s) })
		switch relayed, could := relaying[s]; {
		case relayed:
			loops.Go(func() { d.relayLoop(ctx, s) })
		case could:
			watched[s] = true
		}
	}
	if len(watched) > 0 {
		loops.Go(func() { d.relayWatch(ctx, &loops, watched) })
	}
	loops.Go(func() { d.warnUnserved(ctx) })
	go func() {
		loops.Wait()
		stopBeat()
		heart.Wait()
		close(d.done)
	}()
}

// Stop stops the loops, cancels the attempts in flight and waits for them,
// renewing their leases meanwhile. An attempt cut short is recorded as one
// the heartbeat cut short: due again at once, asked about first when its
// subscriber can be asked, and never the death of its delivery (a store
// that is gone leaves its lease to expire, and the delivery is taken over),
// unless that delivery has been claimed more than a few times past its
// schedule (unfinished.go).
// Ending the context given to Start does the same. A delivery claimed but not yet
// started is not started: its lease expires within a Lease and another
// worker takes it, its attempt count kept.
func (d *Deliverer) Stop() {
	d.mu.Lock()
	if !d.running {
		d.mu.Unlock()
		return
	}
	d.running = false
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	cancel()
	<-done
}

// RunOnce runs one pass for every subscriber: it relays the events of a
// relayed one that are there to be read, and claims the deliveries due
// now and attempts each once. It returns how many it relayed and claimed. It does not
// renew their leases: a caller whose attempts may outlast Lease calls Renew
// beside it, as the running Deliverer does.
func (d *Deliverer) RunOnce(ctx context.Context) (int, error) {
	total := 0
	var errs []error
	relaying := d.relaying(ctx)
	for _, s := range d.e.subs {
		if relaying[s] {
			n, err := d.relayAll(ctx, s)
			total += n
			errs = append(errs, err)
		}
		n, err := d.pass(ctx, s)
		total += n
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

// batchFinishes bounds the batches of one subscriber whose outcomes are
// being recorded at once, beside the batches in its handler.
const batchFinishes = 2

// loop keeps up to s.Concurrency attempts of s in flight: whenever a slot is
// free it claims as many due deliveries as there are free slots, so that no
// lease waits behind a slow attempt and one slow call does not hold the
// others back.
func (d *Deliverer) loop(ctx context.Context, s *Subscription) {
	timer := time.NewTimer(d.cfg.Poll)
	defer timer.Stop()
	slots := make(chan struct{}, s.Concurrency)
	freed := make(chan struct{}, 1)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	release := func(n int) {
		for range n {
			<-slots
		}
		select {
		case freed <- struct{}{}:
		default:
		}
	}
	batch, _ := s.Handler.(lapse.BatchHandler)
	// A batch's slots are freed once its handler has answered, while its
	// outcomes are still being recorded, so that the next claim and call
	// run beside that finish rather than after it. finishing bounds the
	// batches being recorded: a store slower than the handler keeps the
	// slots of the batches behind them taken.
	finishing := make(chan struct{}, batchFinishes)
	backoff := time.Duration(0)
	heldAt := new(time.Time) // when the loop last looked while held for closes
	if s.relayed {
		heldAt = nil // the relay's loop counts the time held
	}
	for ctx.Err() == nil {
		if d.yieldToCloses(ctx, s, heldAt) {
			continue
		}
		kicked := s.kick.wait()
		free := s.Concurrency - len(slots)
		wait := d.cfg.Poll
		claimed := false
		// A batch subscription claims once a quarter of its slots are free
		// (or all are), so that each claim, call and finish carries many
		// deliveries.
		if free > 0 && (batch == nil || free >= max(1, s.Concurrency/4) || free == s.Concurrency) {
			claimed = true
			ds, err := d.claim(ctx, s, free)
			switch {
			case err != nil && ctx.Err() == nil:
				d.e.log.Error("deliverer: claim failed", "subscriber", s.Name, "err", err)
				backoff = min(max(2*backoff, 50*time.Millisecond), d.cfg.Poll)
				wait = backoff
			case err == nil:
				backoff = 0
			}
			if batch != nil && len(ds) > 0 {
				for range ds {
					slots <- struct{}{}
				}
				inflight.Go(func() {
					answered := sync.OnceFunc(func() {
						finishing <- struct{}{}
						release(len(ds))
					})
					defer func() {
						answered()
						<-finishing
					}()
					d.attemptMany(ctx, s, batch, ds, answered)
				})
			} else {
				for _, dl := range ds {
					slots <- struct{}{}
					inflight.Go(func() {
						defer release(1)
						d.attempt(ctx, s, dl)
					})
				}
			}
			if err == nil && len(ds) == free {
				continue // every slot taken and maybe more due: claim again once one frees
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-kicked:
			timer.Stop()
		case <-freed:
			timer.Stop()
			if claimed {
				// A slot freed while nothing else was due: wait for new work
				// rather than claim again at once.
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				case <-kicked:
					timer.Stop()
				}
			}
		}
	}
}

// yieldToCloses waits a moment and reports true while s yields to closes
// (Subscription.YieldsToCloses) and this process's Claimer burns down a
// backlog. When heldAt is not nil it counts the time held in
// lapse_delivery_held_seconds_total, from *heldAt, the time it last
// looked while held (zero: it was not).
func (d *Deliverer) yieldToCloses(ctx context.Context, s *Subscription, heldAt *time.Time) bool {
	if !s.YieldsToCloses {
		return false
	}
	now := d.e.clock.Now()
	holds := d.e.burns.holds(now, d.cfg.CloseHold)
	if heldAt != nil {
		if !heldAt.IsZero() {
			d.e.metrics.deliveryHeld.WithLabelValues(s.Name).Add(max(0, now.Sub(*heldAt).Seconds()))
			*heldAt = time.Time{}
		}
		if holds {
			*heldAt = now
		}
	}
	if !holds {
		return false
	}
	select {
	case <-ctx.Done():
	case <-time.After(closeHoldPoll):
	}
	return true
}

// claim leases up to limit due deliveries of s, for the heartbeat to renew
// until their attempts end.
func (d *Deliverer) claim(ctx context.Context, s *Subscription, limit int) ([]*lapse.Delivery, error) {
	now := d.e.clock.Now()
	ds, err := d.e.work.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{
		Now: now, Owner: d.cfg.Owner, LeaseUntil: now.Add(d.cfg.Lease), Subscribers: []string{s.Name}, Limit: limit,
	})
	d.leases.hold(s, ds)
	return ds, err
}

func (d *Deliverer) batch(s *Subscription) int {
	if d.cfg.Batch > 0 {
		return d.cfg.Batch
	}
	return 4 * s.Concurrency
}

// pass claims due deliveries of s and attempts them, at most s.Concurrency at
// a time.
func (d *Deliverer) pass(ctx context.Context, s *Subscription) (int, error) {
	ds, err := d.claim(ctx, s, d.batch(s))
	if err != nil || len(ds) == 0 {
		return 0, err
	}
	if batch, ok := s.Handler.(lapse.BatchHandler); ok {
		for part := range slices.Chunk(ds, s.Concurrency) {
			d.attemptMany(ctx, s, batch, part, func() {})
		}
		return len(ds), nil
	}
	slots := make(chan struct{}, s.Concurrency)
	var wg sync.WaitGroup
	for _, dl := range ds {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			d.attempt(ctx, s, dl)
		})
	}
	wg.Wait()
	return len(ds), nil
}

// attempt makes one attempt of dl and records its outcome. The heartbeat
// renews its lease while it runs, and cancels actx with the reason when the
// attempt must stop (see Renew). An attempt is not started once ctx has
// ended, or once its lease is lost or in doubt.
func (d *Deliverer) attempt(ctx context.Context, s *Subscription, dl *lapse.Delivery) {
	start := d.e.clock.Now()
	wall := time.Now()
	tctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	actx, cut := context.WithCancelCause(tctx)
	defer cut(nil)
	defer d.leases.release(dl)
	if ctx.Err() != nil || !d.leases.start(dl, cut) {
		return // its lease expires, and the delivery is taken over
	}

	rec := lapse.DeliveryAttempt{DeliveryID: dl.ID, Attempt: dl.Attempts, Worker: d.cfg.Owner, StartedAt: start}
	_, more := s.retries().Next(dl.Failures(), 0)
	dl.Final = !more
	finish := d.finisher(ctx, dl, &rec, wall)
	if overrun(s, dl) {
		d.abandon(s, dl, &rec, wall, finish)
		return
	}

	var err error
	switch {
	case s.Local != nil:
		err = d.e.work.Tx(actx, func(tx lapse.Store) error {
			if err := d.callHandler(s, "Apply", func() error { return s.Local.Apply(actx, tx, dl) }); err != nil {
				return err
			}
			rec.Outcome = lapse.OutcomeOK
			return finish(tx, &lapse.DeliveryFinishParams{Status: lapse.DeliveryDone})
		})
		if err == nil || errors.Is(err, lapse.ErrLeaseLost) {
			d.settled(s, dl, err, rec.Outcome, wall, "")
			return
		}
		rec.Outcome = "" // rolled back: nothing was applied
	default:
		err = d.send(actx, s, dl, &rec)
		if err == nil {
			d.settled(s, dl, finish(d.e.work, &lapse.DeliveryFinishParams{Status: lapse.DeliveryDone}), rec.Outcome, wall, "")
			return
		}
	}

	d.failed(ctx, actx, s, dl, &rec, err, wall, finish)
}

// finisher returns the function that records the end of the attempt of dl
// described by rec, through the store it is given.
func (d *Deliverer) finisher(ctx context.Context, dl *lapse.Delivery, rec *lapse.DeliveryAttempt, wall time.Time) func(lapse.Store, *lapse.DeliveryFinishParams) error {
	return func(tx lapse.Store, p *lapse.DeliveryFinishParams) error {
		p.ID, p.Owner, p.Attempt, p.At = dl.ID, d.cfg.Owner, dl.Attempts, d.e.clock.Now()
		rec.Duration = time.Since(wall)
		p.Record = *rec
		_, err := tx.DeliveryFinish(context.WithoutCancel(ctx), p)
		return err
	}
}

// failed records an attempt of dl that failed with err (its context actx,
// made from ctx, the context of the loop or RunOnce that runs it): it is
// retried on schedule, or dies.
func (d *Deliverer) failed(ctx, actx context.Context, s *Subscription, dl *lapse.Delivery, rec *lapse.DeliveryAttempt, err error, wall time.Time,
	finish func(lapse.Store, *lapse.DeliveryFinishParams) error) {
	// One the heartbeat cut short failed for want of its lease, and one
	// cut short because this worker stops (Stop, lapse serve's SIGTERM)
	// failed for want of a worker; neither failed through its subscriber:
	// it is due again at once, may have applied (so it is asked about
	// first), and never dies of it.
	cause := context.Cause(actx)
	cutShort := cause != nil && (errors.Is(cause, errLeaseLost) || errors.Is(cause, errLeaseUnsure))
	if !cutShort && ctx.Err() != nil {
		cause, cutShort = errStopped, true
	}
	if cutShort {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	unknown := cutShort || errors.Is(err, lapse.ErrUnknownOutcome)
	if _, ok := s.Handler.(lapse.QueryHandler); !ok {
		unknown = false // nothing to ask: the subscriber deduplicates on the event id
	}
	rec.Error = lapse.Reason(err)
	switch {
	case rec.Outcome != "":
	case errors.Is(err, lapse.ErrRefused):
		rec.Outcome = lapse.OutcomeRefused
	case unknown:
		rec.Outcome = lapse.OutcomeUnknown
	default:
		rec.Outcome = lapse.OutcomeError
	}
	p := &lapse.DeliveryFinishParams{Status: lapse.DeliveryPending, Unknown: unknown, Error: rec.Error, CutShort: cutShort}
	wait, more := s.retries().Next(dl.Failures(), rand.Float64())
	switch {
	case errors.Is(err, lapse.ErrRefused):
		d.die(s, dl, p, true)
	case cutShort:
		p.NextAttemptAt = d.e.clock.Now()
	case !more:
		d.die(s, dl, p, false)
	default:
		p.NextAttemptAt = d.e.clock.Now().Add(asked(s, err, wait))
	}
	var od *onDeath
	if p.Status == lapse.DeliveryDead && errors.As(err, &od) {
		d.settled(s, dl, d.fireOnDeath(actx, dl, od, p, finish), rec.Outcome, wall, rec.Error)
	} else {
		d.settled(s, dl, finish(d.e.work, p), rec.Outcome, wall, rec.Error)
	}
	if p.Status == lapse.DeliveryDead {
		d.e.log.Error("deliverer: delivery died; its order is in manual review", "delivery", dl.ID,
			"subscriber", s.Name, "order_no", dl.OrderNo, "event", dl.EventType, "attempts", dl.Attempts, "err", p.Error)
	}
}

// asked returns the wait before the next attempt after err: the schedule's
// wait, or longer when the subscriber asked for a longer one
// (lapse.RetryAfter), up to the schedule's longest wait.
func asked(s *Subscription, err error, wait time.Duration) time.Duration {
	var ra lapse.RetryAfter
	if !errors.As(err, &ra) {
		return wait
	}
	return max(wait, min(ra.RetryAfter(), s.retries().Longest()))
}

// onDeath is the error of a handler whose delivery, should it die of err,
// fires an event on its order (a flow's give-up into manual review): the
// deliverer fires it in the transaction that records the death and its
// review, so that the order never waits for an operator without its review,
// nor the other way round, whatever fails between the two.
type onDeath struct {
	err  error
	fire Fire
}

func (o *onDeath) Error() string { return o.err.Error() }
func (o *onDeath) Unwrap() error { return o.err }

// fireOnDeath records the death p of dl through finish in the transaction
// that fires od's event on its order: one of the engine's store, as every
// transition's, not of the work store (the same database). When the order
// has moved where that event does not apply (a refund overtook it), the
// death is recorded alone, through the work store.
func (d *Deliverer) fireOnDeath(ctx context.Context, dl *lapse.Delivery, od *onDeath, p *lapse.DeliveryFinishParams,
	finish func(lapse.Store, *lapse.DeliveryFinishParams) error) error {
	_, err := d.e.fire(context.WithoutCancel(ctx), dl.OrderNo, od.fire, func(tx lapse.Store, tp *lapse.OrderTransitionParams) error {
		if p.Review != nil {
			p.Review.CreatedAt = tp.At // opened with the hand-over, not before it
		}
		return finish(tx, p)
	})
	if err != nil && !errors.Is(err, lapse.ErrLeaseLost) && lapse.ErrorCode(err) == lapse.ECONFLICT {
		return finish(d.e.work, p)
	}
	return err
}

// send delivers dl to an outside subscriber. When the last attempt's outcome
// is unknown it asks first, and sends again only if the subscriber says the
// effect was not applied.
func (d *Deliverer) send(ctx context.Context, s *Subscription, dl *lapse.Delivery, rec *lapse.DeliveryAttempt) error {
	if q, ok := s.Handler.(lapse.QueryHandler); ok && dl.Unknown {
		var applied bool
		err := d.callHandler(s, "Query", func() (err error) { applied, err = q.Query(ctx, dl); return err })
		if err != nil {
			rec.Outcome = lapse.OutcomeUnknown
			return fmt.Errorf("query-back after an unknown outcome: %w: %w", err, lapse.ErrUnknownOutcome)
		}
		if applied {
			rec.Outcome = lapse.OutcomeApplied
			return nil
		}
	}
	if err := d.callHandler(s, "Deliver", func() error { return s.Handler.Deliver(ctx, dl) }); err != nil {
		return err
	}
	rec.Outcome = lapse.OutcomeOK
	return nil
}

// die turns a failed attempt's finish into a death, of a refusal (the
// subscriber will never take it) or of the last retry: the order goes to
// manual review and a delivery.dead event is written, except for the death
// of a delivery.dead event itself, which would otherwise chain. The review's
// reason says which (the console reads it back: console/category.go).
func (d *Deliverer) die(s *Subscription, dl *lapse.Delivery, p *lapse.DeliveryFinishParams, refused bool) {
	now := d.e.clock.Now()
	p.Status = lapse.DeliveryDead
	why := fmt.Sprintf("ran out of retries after %d attempts", dl.Attempts)
	switch {
	case refused:
		why = fmt.Sprintf("was refused at attempt %d", dl.Attempts)
	case p.Unknown:
		why = fmt.Sprintf("ran out of retries with its last outcome unknown after %d attempts", dl.Attempts)
	}
	p.Review = &lapse.Review{OrderID: dl.OrderID, OrderNo: dl.OrderNo, DeliveryID: dl.ID, CreatedAt: now,
		Reason: lapse.CleanReason(fmt.Sprintf("delivery %d of %s to %s %s: %s", dl.ID, dl.EventType, s.Name, why, p.Error))}
	if dl.EventType == lapse.EventDeliveryDead {
		return
	}
	ev := lapse.NewDeliveryDeadEvent(dl, p.Error, now)
	o, err := lapse.EventOrder(dl.Event)
	if err != nil {
		o = &lapse.Order{OrderNo: dl.OrderNo} // not an order event: no flow to match on
	}
	d.e.route(o, &ev, s.Name)
	p.Outbox = []lapse.OutboxEvent{ev}
}

// counted counts the end of an attempt.
func (d *Deliverer) counted(s *Subscription, outcome string, wall time.Time) {
	d.e.metrics.deliveries.WithLabelValues(s.Name, outcome).Inc()
	d.e.metrics.deliverySeconds.WithLabelValues(s.Name).Observe(time.Since(wall).Seconds())
}

// settled logs and counts the end of an attempt.
func (d *Deliverer) settled(s *Subscription, dl *lapse.Delivery, finishErr error, outcome string, wall time.Time, attemptErr string) {
	d.counted(s, outcome, wall)
	switch {
	case errors.Is(finishErr, lapse.ErrLeaseLost):
		d.e.log.Warn("deliverer: lease lost before the attempt finished; another worker has the delivery",
			"delivery", dl.ID, "subscriber", s.Name, "attempt", dl.Attempts)
	case finishErr != nil:
		d.e.log.Error("deliverer: cannot record an attempt; the lease will expire and the delivery be retried",
			"delivery", dl.ID, "subscriber", s.Name, "err", finishErr)
	case outcome == lapse.OutcomeRefused || outcome == lapse.OutcomeError || outcome == lapse.OutcomeUnknown:
		d.e.log.Info("deliverer: attempt failed", "delivery", dl.ID, "subscriber", s.Name, "attempt", dl.Attempts, "outcome", outcome, "err", attemptErr)
	}
}
