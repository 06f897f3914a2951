package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
)

// ClaimerConfig configures a Claimer. Zero values take the defaults noted.
type ClaimerConfig struct {
	// Batch is how many due orders one transaction claims and fires. Default 500.
	Batch int
	// Workers is how many transactions burn down a backlog in parallel once a
	// batch comes back full. Default 2.
	Workers int
	// MaxSleep bounds how long the precise path goes without a look at the
	// database's next deadline, its own or the sweep's (a look the sweep
	// took since counts as one of its own); deadlines created by other
	// processes are seen within it. Default 1s.
	MaxSleep time.Duration
	// Gather is the least time from the start of a claim of the precise
	// path that fired orders to the start of its next, so that deadlines
	// coming due close together are fired in one transaction rather than
	// one each: at 2,000 deadlines a second, a claim every 5 ms fires about
	// 10, for half the CPU a close. It adds at most Gather to the close lag
	// of a deadline that comes due within it of the last claim; a lone
	// deadline is fired at its time, a claim that took longer than Gather
	// is followed at once, and a backlog (a claim that comes back full) is
	// burned down without a pause. Default 5ms; a negative value turns it
	// off.
	Gather time.Duration
	// SweepInterval is the beat of the safety-net sweep. Default 10s.
	SweepInterval time.Duration
	// SweepGrace is how overdue an order must be before the sweep fires it:
	// until then it is the precise path's to fire. Default 1s.
	SweepGrace time.Duration
	// SweepBatch is the sweep's batch size. Default 500.
	SweepBatch int
	// SweepMaxRun bounds one sweep pass; the rest waits for the next beat.
	// Default 5s.
	SweepMaxRun time.Duration
	// StopTimeout is how long Stop lets an in-flight batch finish before it
	// cancels it; a cancelled batch rolls back and its claims return to the
	// database. Default 10s.
	StopTimeout time.Duration
	// ErrorBackoff is the first pause after a failed pass; it doubles up to
	// MaxSleep while failures last. Default 50ms.
	ErrorBackoff time.Duration
	// DegradedSweep is the sweep's faster beat while a shared trigger
	// (Redis) is configured but not in charge; MaxSleep is bounded by it
	// too. Default 1s.
	DegradedSweep time.Duration
	// TriggerLease is how long a member claimed from the shared trigger
	// stays with this process before another takes it. Default 10s.
	TriggerLease time.Duration
}

func (c *ClaimerConfig) withDefaults() ClaimerConfig {
	out := *c
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&out.Batch, 500)
	def(&out.Workers, 2)
	def(&out.SweepBatch, 500)
	dur(&out.MaxSleep, time.Second)
	dur(&out.SweepInterval, 10*time.Second)
	dur(&out.SweepGrace, time.Second)
	dur(&out.SweepMaxRun, 5*time.Second)
	dur(&out.StopTimeout, 10*time.Second)
	dur(&out.ErrorBackoff, 50*time.Millisecond)
	dur(&out.DegradedSweep, time.Second)
	dur(&out.TriggerLease, 10*time.Second)
	if out.Gather == 0 {
		out.Gather = 5 * time.Millisecond
	}
	return out
}

// Claimer is the deadline engine: it fires the deadline event of every order
// whose deadline has passed, through two paths that share one claim query.
//
// The precise path sleeps until the next deadline it knows of (asking the
// database's deadline index, at least every MaxSleep) and is woken at once by
// deadlines created in this process. The sweep runs every SweepInterval and
// fires what the precise path left overdue by more than SweepGrace. Each
// firing records its path in the transition log and on the order.
//
// Claims are transactions: due rows are locked (SKIP LOCKED on PostgreSQL),
// fired through the flow with a guarded update, and committed with their log
// and outbox rows. Any number of Claimers on one database fire each due order
// exactly once; a process that dies mid-batch leaves its rows to the others.
type Claimer struct {
	e     *Engine
	cfg   atomic.Pointer[ClaimerConfig]
	beat  chan struct{} // the sweep's beat changed
	poke  chan struct{} // the shared trigger stopped or started being in charge
	actor string

	// Orders whose customer started paying are settled by asking their
	// provider, outside the claim transaction; asking holds the ids of those
	// in flight in this process, so that a pass does not ask twice.
	asking sync.Map
	asks   sync.WaitGroup
	askSem chan struct{}

	// The background sweep's last look at the next deadline, which the
	// precise path takes instead of looking again when it is as good as a
	// new look (sweepLook).
	lookMu sync.Mutex
	look   dueLook

	// The members the shared trigger gave up on (retryMembers), to add
	// back at their orders' deadlines once the database answers
	// (readdGivenUp).
	givenUp givenUp

	mu         sync.Mutex
	running    bool
	loopCancel context.CancelFunc
	workCancel context.CancelFunc
	done       chan struct{}
}

// NewClaimer returns a Claimer for the engine's flows.
func NewClaimer(e *Engine, cfg ClaimerConfig) *Claimer {
	c := &Claimer{e: e, actor: "engine " + e.node, askSem: make(chan struct{}, maxAsks), beat: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
	c.SetConfig(cfg)
	return c
}

// SetConfig changes the claimer's settings at run time (a configuration
// reload): batches, sleeps and beats take the new values from their next
// pass on.
func (c *Claimer) SetConfig(cfg ClaimerConfig) {
	d := cfg.withDefaults()
	c.cfg.Store(&d)
	select {
	case c.beat <- struct{}{}:
	default:
	}
}

// Config returns the claimer's settings.
func (c *Claimer) Config() ClaimerConfig { return *c.cfg.Load() }

func (c *Claimer) conf() *ClaimerConfig { return c.cfg.Load() }

// maxSleep and sweepEvery are MaxSleep and SweepInterval, or the faster
// beat while the shared trigger is not in charge.
func (c *Claimer) maxSleep() time.Duration {
	cfg := c.conf()
	if c.e.fastBeat() {
		return min(cfg.MaxSleep, cfg.DegradedSweep)
	}
	return cfg.MaxSleep
}

func (c *Claimer) sweepEvery() time.Duration {
	cfg := c.conf()
	if c.e.fastBeat() {
		return min(cfg.SweepInterval, cfg.DegradedSweep)
	}
	return cfg.SweepInterval
}

// Start runs the precise path and the sweep in the background until Stop or
// until ctx ends. Start on a running Claimer does nothing.
func (c *Claimer) Start(ctx context.Context) { c.start(ctx, false) }

// StartFeed runs, in a process that fires no deadlines (lapse serve
// --deadlines=false), only the part of the shared trigger's path that hands
// the deadlines this process sets to the shared trigger, seeding it again
// from the database after a failure as Start does. Without it those
// deadlines would wait in this process's queue for good, and the processes
// that fire deadlines, whose precise paths stand back while the trigger is
// in charge, would find them only at their sweep. It claims nothing and
// fires nothing. Stop stops it; without a shared trigger it does nothing.
func (c *Claimer) StartFeed(ctx context.Context) {
	if c.e.trig != nil {
		c.start(ctx, true)
	}
}

func (c *Claimer) start(ctx context.Context, feed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return
	}
	loopCtx, loopCancel := context.WithCancel(ctx)
	// Batches run on their own context so that Stop lets them commit.
	workCtx, workCancel := context.WithCancel(context.WithoutCancel(ctx))
	c.running, c.loopCancel, c.workCancel, c.done = true, loopCancel, workCancel, make(chan struct{})
	var wg sync.WaitGroup
	if !feed {
		wg.Go(func() { c.precise(loopCtx, workCtx) })
		wg.Go(func() { c.sweeper(loopCtx, workCtx) })
	}
	if c.e.trig != nil {
		wg.Go(func() { c.shared(loopCtx, workCtx, feed) })
	}
	go func() {
		wg.Wait()
		workCancel()
		close(c.done)
	}()
}

// Stop stops both paths and waits for them. A batch in flight may finish for
// up to StopTimeout; after that it is cancelled and rolled back. Either way
// no claim outlives Stop. The deadlines this process set since the shared
// trigger's path last handed them over, such as those of the requests that
// a server shutting down finished after ctx ended, are handed to the
// trigger before Stop returns.
func (c *Claimer) Stop() {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return
	}
	c.running = false
	loopCancel, workCancel, done := c.loopCancel, c.workCancel, c.done
	c.mu.Unlock()

	loopCancel()
	select {
	case <-done:
	case <-time.After(c.conf().StopTimeout):
		workCancel()
		<-done
	}
	c.asks.Wait() // each bounded by askTimeout
	c.flushLeft()
}

// RunOnce fires, through the precise path, every order that is due now,
// batch after batch, and returns how many it fired.
// Orders whose customer started paying are settled by asking their provider
// first; RunOnce waits for those answers too.
// A failed pass is counted in lapse_claimer_errors_total.
func (c *Claimer) RunOnce(ctx context.Context) (int, error) {
	n, err := c.burn(ctx, ctx, lapse.FiredByTimer, 0, c.conf().Batch, 0, nil)
	c.asks.Wait()
	c.counted(ctx, lapse.FiredByTimer, err)
	return n, err
}

// Sweep runs one pass of the safety net: it fires orders overdue by more
// than SweepGrace, for at most SweepMaxRun, and returns how many it fired.
// Like RunOnce, it waits for the answers of the providers it asked about
// orders whose customer started paying. A failed pass is counted in
// lapse_claimer_errors_total.
func (c *Claimer) Sweep(ctx context.Context) (int, error) {
	n, err := c.burn(ctx, ctx, lapse.FiredBySweep, c.conf().SweepGrace, c.conf().SweepBatch, c.conf().SweepMaxRun, nil)
	c.asks.Wait()
	c.counted(ctx, lapse.FiredBySweep, err)
	return n, err
}

// counted counts a pass of path that failed with err in
// lapse_claimer_errors_total, unless err is nil or ctx ended (a stop is not
// a failure), and reports whether it did. RunOnce and Sweep return the error
// to their caller, who logs it.
func (c *Claimer) counted(ctx context.Context, path lapse.FiredBy, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	c.e.metrics.errors.WithLabelValues(string(path)).Inc()
	return true
}

// failed counts and logs a failed pass of the loop of path.
func (c *Claimer) failed(ctx context.Context, path lapse.FiredBy, err error) {
	if c.counted(ctx, path, err) {
		c.e.log.Error("deadline claimer: pass failed", "path", path, "err", err)
	}
}

func (c *Claimer) precise(loopCtx, workCtx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	backoff := time.Duration(0)
	var asked time.Time // when this path's last look at the deadline index began
	// The looks and burns of this path read the due index on from the
	// latest order closed (claimFloor); this process's deadlines move that
	// floor back as they are set.
	floor := &claimFloor{}
	defer c.e.wake.watch(floor)()
	for loopCtx.Err() == nil {
		floor.setEvery(c.maxSleep())
		if c.e.trig != nil && c.e.trig.using() {
			// The shared trigger is in charge of punctual firing (the sweep
			// stays the safety net): stand back until it is not, looking
			// again every MaxSleep without asking the database. The
			// deadlines told to the trigger meanwhile did not move the
			// floor: the first look after it starts at the start.
			floor.restart()
			timer.Reset(c.maxSleep())
			select {
			case <-loopCtx.Done():
				return
			case <-c.poke:
				timer.Stop()
			case <-timer.C:
			}
			continue
		}
		c.e.wake.working()
		var next time.Time
		var ok bool
		var err error
		wait := c.maxSleep()
		look, fresh := c.sweepLook(asked, wait)
		switch {
		case fresh:
			next, ok, asked = look.next, look.ok, look.at
			if ok {
				floor.lower(next) // the sweep's look read from the start
			}
		case len(c.e.flows.timed) > 0: // no flow has deadlines: nothing is ever due
			own := dueLook{at: c.e.clock.Now(), told: c.e.wake.told()}
			asked = own.at
			turn := floor.next()
			next, ok, err = c.e.work.OrderNextDeadline(workCtx, c.e.flows.timed, turn.from.at)
			if err == nil {
				floor.looked(turn, own.at, next, ok)
				if turn.from.isZero() {
					// Only a look from the start is one the sweep may take:
					// it is what tells the sweep whether anything is overdue.
					own.next, own.ok = next, ok
					c.keepLook(own)
				}
			}
		}
		now := c.e.clock.Now()
		if fresh {
			wait -= now.Sub(look.at) // the next look is due MaxSleep after the sweep's
		}
		if err == nil && ok && !next.After(now) {
			var fired int
			began := time.Now()
			fired, err = c.burn(loopCtx, workCtx, lapse.FiredByTimer, 0, c.conf().Batch, 0, floor)
			if err == nil && fired > 0 {
				backoff = 0
				c.gather(loopCtx, began)
				continue
			}
			// Due, yet nothing moved: the due orders wait on a provider's
			// answer. Look again shortly rather than spin.
			ok, wait = false, min(wait, askPause)
		}
		if err != nil {
			c.failed(loopCtx, lapse.FiredByTimer, err)
			backoff = min(max(backoff*2, c.conf().ErrorBackoff), c.maxSleep())
			wait = backoff
		} else {
			backoff = 0
			if ok && next.Sub(now) < wait {
				wait = next.Sub(now)
			}
			c.e.wake.sleeping(now.Add(wait))
		}
		timer.Reset(wait)
		select {
		case <-loopCtx.Done():
			return
		case <-timer.C:
		case <-c.e.wake.ch:
			timer.Stop() // since Go 1.23 a stopped timer delivers nothing stale
		}
	}
}

// gather waits until Gather has passed since began, when a claim that
// fired orders began, so that the deadlines coming due meanwhile are
// claimed together (ClaimerConfig.Gather); a claim that took longer waits
// for nothing. Nothing cuts it short but loopCtx: a deadline this process
// sets meanwhile is at most Gather late, as any other.
func (c *Claimer) gather(loopCtx context.Context, began time.Time) {
	d := c.conf().Gather - time.Since(began)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-loopCtx.Done():
	case <-t.C:
	}
}

// dueLook is what one look at the deadline index found.
type dueLook struct {
	at   time.Time // the engine's clock when the look began
	told uint64    // the deadlines this process had set by then (waker.told)
	next time.Time // the earliest deadline, if ok
	ok   bool
}

// sweepLook returns the background sweep's last look at the deadline index,
// and whether the precise path may take it instead of a look of its own: if
// it began after the precise path's own last look (asked), less than
// maxSleep ago, and this process has set no deadline since it began, it
// knows every deadline a new look would, but for those other processes
// committed since it began, which the precise path is bound to see within
// MaxSleep of that look, not of its own. With a shared trigger the precise
// path always looks for itself: deadlines this process hands to the
// trigger do not wake it, and it may take over from the trigger at any
// time.
func (c *Claimer) sweepLook(asked time.Time, maxSleep time.Duration) (dueLook, bool) {
	if c.e.trig != nil {
		return dueLook{}, false
	}
	c.lookMu.Lock()
	look := c.look
	c.lookMu.Unlock()
	fresh := look.at.After(asked) && c.e.clock.Now().Sub(look.at) < maxSleep && look.told == c.e.wake.told()
	return look, fresh
}

// keepLook keeps look as the last look at the deadline index, for the other
// path (sweepLook, sweepPass).
func (c *Claimer) keepLook(look dueLook) {
	c.lookMu.Lock()
	if look.at.After(c.look.at) {
		c.look = look
	}
	c.lookMu.Unlock()
}

// sweepPass is one pass of the background sweep. It looks at the deadline
// index first, and claims only when the earliest deadline is overdue by
// SweepGrace or more: a claim finds nothing otherwise, and is a
// transaction where the look is one statement. A look that fails leaves the
// pass to the claim. The look is kept for the precise path (sweepLook).
//
// A look the precise path began less than MaxSleep ago, with no deadline
// set in this process since, serves the pass instead of a look of its own:
// it is as good as a new one but for deadlines other processes committed
// since, which the next pass sees. So an idle Claimer sends one statement
// every MaxSleep, not one more every SweepInterval.
func (c *Claimer) sweepPass(loopCtx, workCtx context.Context, cfg *ClaimerConfig) (int, error) {
	if timed := c.e.flows.timed; len(timed) > 0 {
		c.lookMu.Lock()
		look := c.look
		c.lookMu.Unlock()
		var err error
		if c.e.clock.Now().Sub(look.at) >= c.maxSleep() || look.told != c.e.wake.told() {
			// Both read before the look, so that it knows at least what
			// they say: a deadline is told after its commit.
			look = dueLook{at: c.e.clock.Now(), told: c.e.wake.told()}
			look.next, look.ok, err = c.e.work.OrderNextDeadline(workCtx, timed, time.Time{})
			if err == nil {
				c.keepLook(look)
			}
		}
		if err == nil && (!look.ok || look.next.After(c.e.clock.Now().Add(-cfg.SweepGrace))) {
			return 0, nil
		}
	}
	return c.burn(loopCtx, workCtx, lapse.FiredBySweep, cfg.SweepGrace, cfg.SweepBatch, cfg.SweepMaxRun, nil)
}

func (c *Claimer) sweeper(loopCtx, workCtx context.Context) {
	timer := time.NewTimer(c.sweepEvery())
	defer timer.Stop()
	for {
		cfg := c.conf()
		n, err := c.sweepPass(loopCtx, workCtx, cfg)
		switch {
		case err != nil:
			c.failed(loopCtx, lapse.FiredBySweep, err)
		case n > 0:
			c.e.log.Warn("deadline claimer: sweep fired overdue orders the precise path had not", "orders", n)
		}
		timer.Reset(c.sweepEvery())
	wait:
		select {
		case <-loopCtx.Done():
			return
		case <-timer.C:
		case <-c.beat:
			// The beat changed (a reload, the trigger degraded or back):
			// wait the new interval from now.
			timer.Reset(c.sweepEvery())
			goto wait
		}
	}
}

// burn fires batches until one comes back short, loopCtx ends, or maxRun (if
// positive) passes. Once a batch comes back full it runs Workers batches in
// parallel. Its claims read the due index from floor (claimFloor), or, when
// floor is nil, from a floor of its own that begins at the start.
func (c *Claimer) burn(loopCtx, workCtx context.Context, path lapse.FiredBy, grace time.Duration, batch int, maxRun time.Duration, floor *claimFloor) (int, error) {
	if floor == nil {
		floor = &claimFloor{every: c.maxSleep()}
	}
	claimed, fired, err := c.fireBatch(workCtx, path, grace, batch, floor)
	if err != nil || claimed < batch {
		return fired, err
	}
	defer c.e.burns.begin(c.e.clock.Now())() // a backlog: closes first
	var stop time.Time
	if maxRun > 0 {
		stop = c.e.clock.Now().Add(maxRun)
	}
	total := atomic.Int64{}
	total.Add(int64(fired))
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for range c.conf().Workers {
		wg.Go(func() {
			for loopCtx.Err() == nil && (stop.IsZero() || c.e.clock.Now().Before(stop)) {
				claimed, fired, err := c.fireBatch(workCtx, path, grace, batch, floor)
				total.Add(int64(fired))
				if err != nil {
					errMu.Lock()
					first = cmpOr(first, err)
					errMu.Unlock()
					return
				}
				if claimed < batch {
					return
				}
			}
		})
	}
	wg.Wait()
	return int(total.Load()), first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// fireBatch claims up to limit orders due by now-grace in one transaction,
// reading the due index from where floor says, and fires their deadline
// events. It returns how many it claimed and how many moved.
func (c *Claimer) fireBatch(ctx context.Context, path lapse.FiredBy, grace time.Duration, limit int, floor *claimFloor) (claimed, fired int, err error) {
	type firing struct {
		flow     string
		deadline time.Time
		p        *lapse.OrderTransitionParams
	}
	var (
		now     time.Time
		planned map[int64]firing
		applied []int64
		asks    []*lapse.Order
	)
	if len(c.e.flows.timed) == 0 {
		return 0, 0, nil // no flow has deadlines: nothing is ever due
	}
	start := time.Now()
	turn := floor.next()
	var last floorKey // the deadline and id of the latest order claimed
	err = c.e.work.Tx(ctx, func(tx lapse.Store) error {
		if !last.isZero() {
			// Run again (the MySQL store's Tx does, after a deadlock that
			// rolled the claim back): what it held is due again, behind the
			// floor that it moved.
			floor.restart()
			last = floorKey{}
		}
		now = c.e.clock.Now() // read once the transaction holds its claim
		due, err := tx.OrderClaimDue(ctx, &lapse.OrderClaimDueParams{DueBy: now.Add(-grace), Flows: c.e.flows.timed, Limit: limit,
			From: turn.from.at, FromID: turn.from.id})
		if err != nil {
			return err
		}
		claimed = len(due)
		if claimed > 0 && due[claimed-1].DeadlineAt != nil {
			// Claims beside this one read on from here at once, not once
			// this one commits: the orders it holds would only be skipped.
			last = floorKey{at: *due[claimed-1].DeadlineAt, id: due[claimed-1].ID}
			floor.claimed(turn, last)
		}
		planned = make(map[int64]firing, len(due))
		ps := make([]*lapse.OrderTransitionParams, 0, len(due))
		asks = asks[:0]
		for _, o := range due {
			if c.e.feat.payments.asksProvider(o) {
				// Leased, not fired: its provider is asked first, outside
				// this transaction; until then no pass claims it again.
				leased, err := tx.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State,
					FromVersion: o.Version, DeadlineAt: now.Add(askLease), At: now})
				if err != nil {
					return err
				}
				asks = append(asks, leased)
				continue
			}
			p, err := c.plan(o, now, path)
			if err != nil {
				c.e.log.Error("deadline claimer: cannot fire a due order", "order_no", o.OrderNo, "flow", o.Flow, "state", o.State, "err", err)
				continue
			}
			planned[o.ID] = firing{o.Flow, *o.DeadlineAt, p}
			ps = append(ps, p)
		}
		applied, err = tx.OrderTransitionMany(ctx, ps)
		return err
	})
	if err != nil {
		if !last.isZero() {
			floor.restart() // what this claim held is due again, behind the floor
		}
		return 0, 0, err
	}
	c.e.metrics.batch.Observe(time.Since(start).Seconds())
	for _, id := range applied {
		f := planned[id]
		c.e.delivered(f.p.Outbox)
		c.e.metrics.closed(f.flow, now, f.deadline)
		c.e.metrics.transition(f.flow, f.p)
		if f.p.DeadlineAt != nil {
			c.e.deadlineSet(id, *f.p.DeadlineAt)
		}
	}
	c.e.metrics.firings.WithLabelValues(string(path)).Add(float64(len(applied)))
	for _, o := range asks {
		// The lease is a deadline like any other: should the answer not
		// settle the order, it fires when the lease ends, told to the
		// trigger as every deadline is.
		c.e.deadlineSet(o.ID, *o.DeadlineAt)
		c.ask(ctx, o, path)
	}
	return claimed, len(applied), nil
}

// Bounds of the questions to providers about orders whose customer started
// paying.
const (
	maxAsks  = 8                      // in flight per Claimer
	askPause = 100 * time.Millisecond // between passes that found only such orders due
)

// ask settles o by asking its provider, in the background, unless this
// Claimer is asking about o already.
func (c *Claimer) ask(ctx context.Context, o *lapse.Order, path lapse.FiredBy) {
	if _, busy := c.asking.LoadOrStore(o.ID, struct{}{}); busy {
		return
	}
	c.asks.Go(func() {
		defer c.asking.Delete(o.ID)
		select {
		case c.askSem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-c.askSem }()
		c.e.feat.payments.settleIntent(ctx, o, path)
	})
}

var errNoDeadline = errors.New("the order's state has no deadline in its flow")

func (c *Claimer) plan(o *lapse.Order, now time.Time, path lapse.FiredBy) (*lapse.OrderTransitionParams, error) {
	flow, err := c.e.flows.of(o)
	if err != nil {
		return nil, err
	}
	st := flow.State(o.State)
	if st == nil || st.Deadline == nil || o.DeadlineAt == nil {
		return nil, errNoDeadline
	}
	p, err := flow.Plan(o, lapse.Firing{Event: st.Deadline.Event, Now: now, FiredBy: path, Actor: c.actor, Reason: "deadline passed", Deadline: true})
	if err != nil {
		return nil, err
	}
	c.e.fanOut(o, p.Outbox)
	return p, nil
}
