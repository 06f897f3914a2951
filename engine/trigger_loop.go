package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// Bounds of the shared trigger's loop.
const (
	triggerPoll    = 50 * time.Millisecond // longest sleep between claims while in charge
	triggerProbe   = time.Second           // between pings while degraded
	triggerTimeout = time.Second           // bounds one call, beyond the trigger's own timeout
	triggerSeed    = 1000                  // deadlines read and added per seeding step
	triggerAddMax  = 1000                  // deadlines added per call
)

// shared runs the shared trigger's path: it hands the deadlines this
// process sets to the trigger, claims the members that come due and has
// this claimer fire what is due in the database at once (path redis). A
// pass that fails retries its members on the trigger's schedule. Any error
// of the trigger degrades it (in auto mode): the sweep takes over on its
// faster beat, and this loop probes the trigger until it answers, seeds it
// again from the database, and hands the work back to it.
//
// With feed set (StartFeed) it only hands over the deadlines, seeding the
// trigger again after a failure: it claims and fires nothing.
func (c *Claimer) shared(loopCtx, workCtx context.Context, feed bool) {
	tr := c.e.trig
	wait := time.Duration(0)
	using := tr.using()
	floor := &claimFloor{} // kept across steps, as the precise path keeps its own
	for {
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-loopCtx.Done():
				timer.Stop()
				return
			case <-timer.C:
			case <-tr.kick:
				timer.Stop()
			}
		}
		if loopCtx.Err() != nil {
			return
		}
		began := time.Now()
		var fired int
		fired, wait, _ = c.sharedStep(loopCtx, workCtx, floor, feed)
		if fired > 0 && wait == 0 {
			c.gather(loopCtx, began)
		}
		using = c.handOver(using)
	}
}

// triggerRounds bounds the rounds of one RunTriggerOnce.
const triggerRounds = 100

// RunTriggerOnce runs the shared trigger's path (path redis) synchronously,
// the way RunOnce runs the precise path: round after round of what the
// background loop does, without sleeping, until a round finds nothing more
// to do now (at most 100 rounds). A round seeds the trigger from the
// database when it reports that it lost its data (or probes it first while
// it is degraded), adds the deadlines this engine set, claims the members
// that are due, fires what the database has due through the claimer's
// batches, and is done with the members, or retries them on the trigger's
// schedule if the pass failed. It returns how many orders it fired, and
// waits, like RunOnce, for the answers of the providers it asked.
//
// The error is the first that ended a round: a failure of the trigger,
// which has then degraded it in auto mode (the sweep's faster beat takes
// over until the trigger answers again), or of a pass, whose members are
// then retried. Without a shared trigger, or forced to the database, it
// fires nothing and returns nil. Tests and the simulator call it; a running
// Claimer (Start) runs the same rounds in its background loop.
func (c *Claimer) RunTriggerOnce(ctx context.Context) (int, error) {
	tr := c.e.trig
	if tr == nil {
		return 0, nil
	}
	defer c.asks.Wait()
	using := tr.using()
	total := 0
	floor := &claimFloor{}
	for range triggerRounds {
		n, wait, err := c.sharedStep(ctx, ctx, floor, false)
		total += n
		using = c.handOver(using)
		if err != nil || wait > 0 || ctx.Err() != nil {
			return total, err
		}
	}
	return total, nil
}

// handOver publishes a change of who is in charge, from using (whether the
// shared trigger was) to now: the gauge, the sweep's beat and the precise
// path, which stands back while the trigger is in charge. It returns whether
// the trigger is in charge now.
func (c *Claimer) handOver(using bool) bool {
	tr := c.e.trig
	now := tr.using()
	if now == using {
		return now
	}
	tr.update()
	for _, ch := range []chan struct{}{c.beat, c.poke} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return now
}

// sharedStep does one round of the shared path. It returns how many orders
// it fired, how long to wait before the next round (0: at once), and the
// error that ended the round, which it has acted on already (the trigger
// degraded, the members retried). Its burns read the due index from floor,
// moved back first to the earliest deadline of the members claimed
// (membersFloor). With feed set it stops once the deadlines are handed
// over, and waits for the next (deadlineSet kicks it).
func (c *Claimer) sharedStep(loopCtx, workCtx context.Context, floor *claimFloor, feed bool) (fired int, wait time.Duration, err error) {
	tr := c.e.trig
	floor.setEvery(c.maxSleep())
	mode := *tr.mode.Load()
	if mode == TriggerDatabase {
		tr.drain()
		return 0, time.Hour, nil // until the mode changes (SetTriggerMode kicks)
	}
	if tr.degraded.Load() && mode == TriggerAuto {
		if err := c.callTrigger(workCtx, tr.t.Ping); err != nil {
			tr.drain()
			return 0, triggerProbe, err
		}
		tr.stale.Store(true)
	}
	if tr.stale.Load() {
		floor.restart() // the trigger may have missed deadlines: read from the start
		if err := c.seed(loopCtx, workCtx); err != nil {
			c.degrade(err)
			return 0, triggerProbe, err
		}
		if tr.degraded.Swap(false) {
			c.e.log.Warn("shared trigger is back: it fires deadlines again; the sweep returns to its usual beat")
		}
	}
	if err := c.flushPending(workCtx); err != nil {
		c.degrade(err)
		return 0, triggerProbe, err
	}
	if feed {
		return 0, time.Hour, nil
	}
	if err := c.readdGivenUp(workCtx); err != nil {
		c.degrade(err)
		return 0, triggerProbe, err
	}
	cfg := c.conf()
	var (
		members []string
		seeded  bool
	)
	claimed := c.e.clock.Now()
	err = c.callTrigger(workCtx, func(ctx context.Context) error {
		var err error
		members, seeded, err = tr.t.Claim(ctx, claimed, cfg.TriggerLease, cfg.Batch)
		return err
	})
	if err != nil {
		c.degrade(err)
		return 0, triggerProbe, err
	}
	if !seeded {
		// Its data is gone, or it never had any: seed it before trusting
		// it. Claimed members are harmless. Data gone while this process
		// used the trigger (a flush, a restart without persistence) is
		// worth a warning; a trigger that has none at this process's start
		// is most likely new (a first start, a new prefix).
		if tr.known.Load() {
			c.e.log.Warn("shared trigger lost its data (a flush, or a restart without persistence): seeding it again from the database")
		} else {
			c.e.log.Info("shared trigger holds no deadlines yet (a first start, or it lost them before this process started): seeding it from the database")
		}
		tr.stale.Store(true)
		return 0, 0, nil
	}
	tr.known.Store(true)
	if len(members) > 0 {
		if ahead := c.membersFloor(workCtx, floor, members); ahead {
			// Every member's order is due later than the trigger said:
			// its deadline was extended, and Add kept the earlier time
			// (or a member claimed meanwhile was due again at its lease
			// expiry). Done, the order would be left to a sweep: each
			// goes back at its order's deadline.
			if err := c.requeueMembers(workCtx, members, time.Time{}); err != nil {
				c.degrade(err)
				return 0, triggerProbe, err
			}
			return 0, 0, nil
		}
		fired, err := c.burn(loopCtx, workCtx, lapse.FiredByRedis, 0, cfg.Batch, 0, floor)
		if loopCtx.Err() != nil {
			// Stopped part way: the burn may have left the orders of
			// these members due. Released, any process claims them at
			// once; done, they would wait for a sweep, and left leased,
			// for their lease to end.
			c.releaseMembers(workCtx, members)
			return fired, 0, err
		}
		if err != nil {
			c.failed(loopCtx, lapse.FiredByRedis, err)
			if rerr := c.retryMembers(workCtx, members); rerr != nil {
				c.degrade(rerr) // the leases expire and the members are claimed again
			}
			return fired, c.conf().ErrorBackoff, err
		}
		// The claim may have mixed members of orders not due yet with
		// the due ones (Redis held an earlier time for them: a deadline
		// extended, Add keeping the earlier time). Done, they would be
		// left to a sweep: each goes back at its order's deadline. A
		// member whose order was due and is still (another claimer held
		// it, and its transaction rolled back) is retried soon.
		if err := c.requeueMembers(workCtx, members, claimed); err != nil {
			c.degrade(err)
			return fired, triggerProbe, err
		}
		return fired, 0, nil
	}
	var (
		next time.Time
		ok   bool
	)
	if err := c.callTrigger(workCtx, func(ctx context.Context) error {
		var err error
		next, ok, err = tr.t.Next(ctx)
		return err
	}); err != nil {
		c.degrade(err)
		return 0, triggerProbe, err
	}
	wait = triggerPoll
	if ok {
		wait = min(max(next.Sub(c.e.clock.Now()), 0), triggerPoll)
	}
	return 0, wait, nil
}

// callTrigger runs one call of the shared trigger under a bound, so that a
// trigger that hangs degrades instead of stopping the loop.
func (c *Claimer) callTrigger(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, triggerTimeout)
	defer cancel()
	return fn(ctx)
}

// degrade records a failure of the shared trigger: in auto mode it stops
// being in charge until it answers again.
func (c *Claimer) degrade(err error) {
	tr := c.e.trig
	tr.errors.Inc()
	msg := err.Error()
	tr.reason.Store(&msg)
	tr.stale.Store(true)
	if *tr.mode.Load() != TriggerAuto {
		c.e.log.Error("shared trigger failed; forced to it, the engine keeps using it", "err", err)
		return
	}
	if !tr.degraded.Swap(true) {
		c.e.log.Error("shared trigger degraded: the database sweep fires deadlines on its faster beat until it answers again",
			"err", err, "sweep_every", c.conf().DegradedSweep)
	}
}

// retryMembers reschedules members on the trigger's schedule: those of a
// pass that failed, and those whose orders a pass left due. A member that
// runs out of it goes to the to-notify set (the sweep still fires its order
// once the database answers), and is remembered, so that it is added back
// at its order's deadline if that is still ahead once the database answers
// (readdGivenUp): a member claimed before its order was due (Redis held an
// earlier time) is not left to the sweep. Its error is the trigger's, on
// which it stops: the leases of the members left expire, and they are
// claimed again.
func (c *Claimer) retryMembers(ctx context.Context, members []string) error {
	tr := c.e.trig
	for _, m := range members {
		var (
			attempt  int
			notified bool
		)
		err := c.callTrigger(ctx, func(ctx context.Context) error {
			var err error
			attempt, notified, err = tr.t.Retry(ctx, m, c.e.clock.Now(), tr.delays)
			return err
		})
		if err != nil {
			return err
		}
		if notified {
			// The member names the order in the trigger's own encoding,
			// which may not be text: quoted, it reads in any log.
			c.e.log.Error("shared trigger gave up on an order after its retries; it is on the to-notify list and the sweep fires it",
				"member", fmt.Sprintf("%q", m), "attempts", attempt)
			if id, ok := tr.t.OrderID(m); ok {
				c.givenUp.add(id)
			}
		}
	}
	return nil
}

// Bounds of the members given up on that are added back.
const (
	givenUpMax  = 1 << 16 // remembered; past it the trigger is seeded again instead
	givenUpRead = 1000    // deadlines read per step
)

// givenUp holds the ids of the orders whose members the shared trigger gave
// up on, until the database answers.
type givenUp struct {
	mu   sync.Mutex
	ids  map[int64]struct{}
	over bool      // more were given up on than it holds
	next time.Time // no read before (wall time): the last one failed
}

func (g *givenUp) add(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil {
		g.ids = make(map[int64]struct{})
	}
	if _, ok := g.ids[id]; !ok && len(g.ids) >= givenUpMax {
		g.over = true
		return
	}
	g.ids[id] = struct{}{}
}

// readdGivenUp adds back to the trigger the members it gave up on whose
// orders still have a deadline ahead, at that deadline, up to givenUpRead a
// step, once the database answers: otherwise only the sweep would fire
// them, after their deadline. Those whose orders are due already, or have
// no deadline any more, stay with the sweep (retried again, a member that
// keeps failing would never rest). When more were given up on than it
// holds, the trigger is seeded again from the database instead, once. A
// database that does not answer is asked again a probe later; the error is
// the trigger's.
func (c *Claimer) readdGivenUp(ctx context.Context) error {
	g := &c.givenUp
	g.mu.Lock()
	if len(g.ids) == 0 || time.Now().Before(g.next) {
		g.mu.Unlock()
		return nil
	}
	ids := make([]int64, 0, min(len(g.ids), givenUpRead))
	for id := range g.ids {
		if len(ids) == givenUpRead {
			break
		}
		ids = append(ids, id)
	}
	over := g.over
	g.mu.Unlock()
	var due []TriggerDue
	now := c.e.clock.Now()
	for _, id := range ids {
		at, ok, err := c.e.work.OrderDeadlineMin(ctx, []int64{id})
		if err != nil {
			g.mu.Lock()
			g.next = time.Now().Add(triggerProbe)
			g.mu.Unlock()
			return nil
		}
		if ok && at.After(now) {
			due = append(due, TriggerDue{OrderID: id, At: at})
		}
		if over {
			break // the database answers: seeded again, it gets them all
		}
	}
	if over {
		g.mu.Lock()
		g.ids, g.over = nil, false
		g.mu.Unlock()
		c.e.log.Warn("shared trigger gave up on more orders than this process keeps to add back: seeding it again from the database")
		c.e.trig.stale.Store(true)
		return nil
	}
	if err := c.callTrigger(ctx, func(ctx context.Context) error { return c.e.trig.t.Add(ctx, due) }); err != nil {
		return err
	}
	g.mu.Lock()
	for _, id := range ids {
		delete(g.ids, id)
	}
	g.mu.Unlock()
	if len(due) > 0 {
		c.e.log.Info("shared trigger: orders it gave up on while the database did not answer are back at their deadlines", "orders", len(due))
	}
	return nil
}

// releaseMembers hands back the members of a pass that a stop cut short,
// due at once. The stop may have cancelled ctx already: the call has a
// bound of its own.
func (c *Claimer) releaseMembers(ctx context.Context, members []string) {
	tr := c.e.trig
	if err := c.callTrigger(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return tr.t.Release(ctx, members, c.e.clock.Now())
	}); err != nil {
		c.e.log.Warn("stopping: the shared trigger's members of a pass cut short were not handed back; they are claimed again once their lease ends",
			"members", len(members), "err", err)
	}
}

// flushPending adds the deadlines set in this process to the trigger.
func (c *Claimer) flushPending(ctx context.Context) error {
	tr := c.e.trig
	for {
		batch := make([]TriggerDue, 0, triggerAddMax)
	fill:
		for len(batch) < triggerAddMax {
			select {
			case d := <-tr.pending:
				batch = append(batch, d)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			return nil
		}
		if err := c.callTrigger(ctx, func(ctx context.Context) error { return tr.t.Add(ctx, batch) }); err != nil {
			return err
		}
	}
}

// flushLeft hands the shared trigger the deadlines queued after its
// path's last step, once the loops have stopped: the requests that a server
// shutting down lets finish set deadlines after the loops saw ctx end, and
// the processes that fire deadlines, their precise paths standing back
// while the trigger is in charge, would otherwise find them only at their
// sweep.
func (c *Claimer) flushLeft() {
	tr := c.e.trig
	if tr == nil || *tr.mode.Load() == TriggerDatabase || len(tr.pending) == 0 {
		return
	}
	if err := c.flushPending(context.Background()); err != nil {
		c.e.log.Warn("stopping: deadlines set since the shared trigger's last step did not reach it; the sweep fires them", "err", err)
	}
}

// drain forgets the queued deadlines: the trigger is not in charge, and it
// is seeded from the database before it is again.
func (tr *trigger) drain() {
	for {
		select {
		case <-tr.pending:
			tr.stale.Store(true)
		default:
			return
		}
	}
}

// seed adds every pending deadline of the database to the trigger, reading
// the deadline index page by page, then marks the trigger seeded.
func (c *Claimer) seed(loopCtx, workCtx context.Context) error {
	tr := c.e.trig
	start := time.Now()
	// Set before the first read and cleared once the trigger is in charge,
	// so that every deadline set in between is queued (deadlineSet).
	tr.seeding.Store(true)
	defer tr.seeding.Store(false)
	drops := tr.drops.Load()
	if err := c.callTrigger(workCtx, tr.t.BeginSeed); err != nil {
		tr.stale.Store(true)
		return err
	}
	var after *lapse.OrderDeadline
	total := 0
	for loopCtx.Err() == nil {
		page, err := c.e.work.OrderDeadlineList(workCtx, &lapse.OrderDeadlineListParams{After: after, Limit: triggerSeed})
		if err != nil {
			tr.stale.Store(true)
			return fmt.Errorf("seeding the shared trigger: reading the database: %w", err)
		}
		if len(page) == 0 {
			break
		}
		due := make([]TriggerDue, len(page))
		for i, d := range page {
			due[i] = TriggerDue{OrderID: d.ID, At: d.DeadlineAt}
		}
		if err := c.callTrigger(workCtx, func(ctx context.Context) error { return tr.t.Add(ctx, due) }); err != nil {
			tr.stale.Store(true)
			return err
		}
		// The deadlines set meanwhile, after the page they update: a
		// queue left to fill for the whole seed of a large database
		// turns deadlines away.
		if err := c.flushPending(workCtx); err != nil {
			tr.stale.Store(true)
			return err
		}
		total += len(page)
		last := page[len(page)-1]
		after = &last
		if len(page) < triggerSeed {
			break
		}
	}
	if err := loopCtx.Err(); err != nil {
		tr.stale.Store(true)
		return err
	}
	if err := c.callTrigger(workCtx, tr.t.MarkSeeded); err != nil {
		tr.stale.Store(true)
		return err
	}
	tr.known.Store(true)
	if n := tr.drops.Load() - drops; n > 0 {
		// A deadline turned away after the seed read past it is in
		// neither: seeded again before the trigger is in charge.
		c.e.log.Warn("shared trigger seeded while its queue turned deadlines away: seeding it again", "turned_away", n)
		return nil
	}
	tr.stale.Store(false) // in charge again: deadlines set from now on are queued
	c.e.log.Info("shared trigger seeded from the database", "deadlines", total, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// membersFloor moves floor back to the earliest deadline of the orders the
// trigger handed over, so that a burn from it reaches each of them, however
// far on the floor had moved. When those cannot be read, or a member names
// no order id, the burn reads from the start. It reports whether some
// member's order has a deadline and every such deadline is still ahead:
// none of the orders is due.
func (c *Claimer) membersFloor(ctx context.Context, floor *claimFloor, members []string) (ahead bool) {
	ids := make([]int64, 0, len(members))
	for _, m := range members {
		id, ok := c.e.trig.t.OrderID(m)
		if !ok {
			floor.restart()
			return false
		}
		ids = append(ids, id)
	}
	at, ok, err := c.e.work.OrderDeadlineMin(ctx, ids)
	switch {
	case err != nil:
		floor.restart()
	case ok:
		floor.lower(at)
		return at.After(c.e.clock.Now())
	}
	return false
}

// requeueMembers puts members back due at their orders' deadlines, read
// from the database, when those are after after (any deadline, when after
// is zero). After a pass that fired what was due by after, a member whose
// order still has a deadline not after it (an order the pass could not
// fire: another claimer held it, and its transaction rolled back) is
// retried on the trigger's schedule, due again soon (retryMembers). It is
// done with the rest: members whose orders no longer have a deadline, and
// members that name no order id. Its error is the trigger's; a member
// whose deadline cannot be read stays leased, and is claimed again once
// its lease ends.
func (c *Claimer) requeueMembers(ctx context.Context, members []string, after time.Time) error {
	tr := c.e.trig
	var (
		due   []TriggerDue
		done  []string
		again []string
	)
	ids := make([]int64, 0, len(members))
	for _, m := range members {
		if id, ok := tr.t.OrderID(m); ok {
			ids = append(ids, id)
		}
	}
	// After a pass, as a rule none of the orders has a deadline any more:
	// one statement says so, rather than one a member.
	if !after.IsZero() {
		if _, ok, err := c.e.work.OrderDeadlineMin(ctx, ids); err == nil && !ok {
			done = members
			members = nil
		}
	}
	for _, m := range members {
		id, ok := tr.t.OrderID(m)
		if !ok {
			done = append(done, m)
			continue
		}
		at, ok, err := c.e.work.OrderDeadlineMin(ctx, []int64{id})
		switch {
		case err != nil:
		case ok && (after.IsZero() || at.After(after)):
			due = append(due, TriggerDue{OrderID: id, At: at})
		case ok:
			again = append(again, m)
		default:
			done = append(done, m)
		}
	}
	if err := c.callTrigger(ctx, func(ctx context.Context) error { return tr.t.Requeue(ctx, due) }); err != nil {
		return err
	}
	if err := c.retryMembers(ctx, again); err != nil {
		return err
	}
	return c.callTrigger(ctx, func(ctx context.Context) error { return tr.t.Done(ctx, done) })
}
