package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// The relay hands a subscription's events to its handler without a
// delivery row per event (Subscription.Relay, lapse.Relayer): the events
// name it when they are written, and its relay reads them from the outbox
// in the order their transactions committed, batches in a transaction that
// holds the subscriber's cursor, so that relays on many processes never
// read the same events at once. In that transaction it hands the batch to
// the handler (and reads the next while the handler has it, relayBatches
// at most), writes a delivery row for each event the handler did not
// take, and moves the cursor past the batches. The rows are delivered from
// then on as any delivery is, by the subscription's loop: retried on its
// schedule, or dead and reviewed.
//
// Guarantees, as a delivery row's: every event is handed over at least
// once (a relay that dies, or whose transaction fails, leaves the cursor
// where it was, and the batch is handed over again, with the same event
// ids), or gets a delivery row; and an order's events reach the subscriber
// in order: an event is handed over only once the order's events before it
// were, and one whose order has a delivery to the subscriber still pending
// waits behind it as a row of its own.

// relayPoll bounds how long a relay sleeps when it finds nothing; events
// written by this process wake it at once.
const relayPoll = time.Second

// relaying returns the subscriptions whose events this process relays:
// those relayed, and those it does not relay itself whose subscriber has
// a cursor (another process relays them, or this one did before it was
// told not to), so that the events written for a relay are relayed
// whichever processes still relay: none waits for a process that no
// longer runs one. The subscriptions it could relay but found no cursor of
// are looked at again every RelayWatch (relayWatch).
func (d *Deliverer) relaying(ctx context.Context) map[*Subscription]bool {
	out := map[*Subscription]bool{}
	var cursors []*lapse.RelayCursor
	looked := false
	for _, s := range d.e.subs {
		if s.relayed {
			out[s] = true
			continue
		}
		r := relayerOf(d.e.work)
		if _, batch := s.Handler.(lapse.BatchHandler); r == nil || !batch {
			continue
		}
		if !looked {
			var err error
			if cursors, err = r.RelayList(ctx); err != nil {
				d.e.log.Error("deliverer: cannot list relays; events relayed by other processes are left to them", "err", err)
			}
			looked = true
		}
		out[s] = slices.ContainsFunc(cursors, func(c *lapse.RelayCursor) bool { return c.Subscriber == s.Name })
	}
	return out
}

// relayWatch looks for the cursors of the subscriptions in watched every
// RelayWatch, and starts the relay of each, in loops, once it has one.
func (d *Deliverer) relayWatch(ctx context.Context, loops *sync.WaitGroup, watched map[*Subscription]bool) {
	t := time.NewTicker(d.cfg.RelayWatch)
	defer t.Stop()
	for len(watched) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for s, found := range d.relaying(ctx) {
			if found && watched[s] {
				delete(watched, s)
				loops.Go(func() { d.relayLoop(ctx, s) })
			}
		}
	}
}

// relayLoop relays s's events until ctx ends.
func (d *Deliverer) relayLoop(ctx context.Context, s *Subscription) {
	var heldAt *time.Time // the subscription's loop counts the time held, unless it is relayed
	if s.relayed {
		heldAt = new(time.Time)
	}
	made := s.cursor.Load() // Start made it
	for ctx.Err() == nil {
		if !made {
			// The cursor is made in a transaction of its own, so that a
			// relay that finds it being made waits for no batch.
			made = d.relayMake(ctx, s) == nil
		}
		if d.yieldToCloses(ctx, s, heldAt) {
			continue
		}
		kicked := s.relayKick.wait()
		_, more, err := d.relayOnce(ctx, s)
		wait := relayPoll
		switch {
		case err != nil && ctx.Err() == nil:
			d.e.log.Error("deliverer: relay failed; its batch will be handed over again", "subscriber", s.Name, "err", err)
			wait = d.cfg.Poll
		case err == nil && more:
			continue // a full batch: there may be more
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-kicked:
		}
		t.Stop()
	}
}

// relayMakeAll makes the cursors of the relayed subscriptions, each
// within relayMakeTimeout; a relay whose cursor could not be made makes it
// when its loop starts. A relayed event is found by the processes that
// look for relays through its subscriber's cursor (relaying, relayWatch):
// made before this process writes any, its events are relayed even if this
// process stops for good before it reads them.
func (d *Deliverer) relayMakeAll(ctx context.Context) {
	for _, s := range d.e.subs {
		if !s.relayed {
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, relayMakeTimeout)
		if err := d.relayMake(mctx, s); err != nil && ctx.Err() == nil {
			d.e.log.Warn("deliverer: cannot make the relay's cursor yet; its relay will try again", "subscriber", s.Name, "err", err)
		}
		cancel()
	}
}

// relayMakeTimeout bounds relayMakeAll's wait for each cursor.
const relayMakeTimeout = 5 * time.Second

// relayMake makes s's cursor unless it exists; from then on this process
// relays s's events (Subscription.cursor).
func (d *Deliverer) relayMake(ctx context.Context, s *Subscription) error {
	err := d.e.work.Tx(ctx, func(tx lapse.Store) error {
		rt := relayerOf(tx)
		if rt == nil {
			return fmt.Errorf("engine: subscription %s is relayed, and the store cannot relay", s.Name)
		}
		_, err := rt.RelayLock(ctx, s.Name, d.e.clock.Now())
		return err
	})
	if err == nil {
		s.cursor.Store(true)
	}
	return err
}

// relayAll relays s's batches until one is not full, and returns how many
// events it read.
func (d *Deliverer) relayAll(ctx context.Context, s *Subscription) (int, error) {
	if err := d.relayMake(ctx, s); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, more, err := d.relayOnce(ctx, s)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// errRelayBusy is relayOnce's error when another relay holds the cursor.
var errRelayBusy = errors.New("engine: another relay holds the cursor")

// relayStopGrace bounds how long a relay's transaction outlives a stop.
const relayStopGrace = 10 * time.Second

// relayBatches bounds the batches relayOnce relays in one transaction.
const relayBatches = 8

// relayOnce relays up to relayBatches batches of up to s.Concurrency events
// of s in one transaction that holds the cursor, and returns how many
// events it read (0 when another relay holds the cursor) and whether its
// last batch was full, so that there may be more. While the handler has a
// batch, the next is read: the handler and the store work side by side
// instead of in turn. Once the handler fails an event, the batch already
// read is the last of the transaction, so that a broker that is down holds
// the cursor for two of its timeouts, not eight. An order whose event was
// not handed over in one batch has none handed over in the next.
func (d *Deliverer) relayOnce(ctx context.Context, s *Subscription) (read int, more bool, err error) {
	var (
		handed int
		failed []relayFailure
	)
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	// The transaction outlives ctx (Stop, lapse serve's SIGTERM), by
	// relayStopGrace at most: the handler's calls are cut short, and what
	// it had taken by then is recorded, the rest written as deliveries, and
	// the cursor moved past the batches, so that a stop hands nothing over
	// twice. ctx stops the reading of further batches. A database that
	// does not answer within the grace rolls it back, and the batches are
	// handed over again, rather than hold the stop.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(relayStopGrace, cancel) })()
	err = d.e.work.Tx(sctx, func(tx lapse.Store) error {
		rt := relayerOf(tx)
		if rt == nil {
			return fmt.Errorf("engine: subscription %s is relayed, and the store cannot relay", s.Name)
		}
		now := d.e.clock.Now()
		c, err := rt.RelayLock(sctx, s.Name, now)
		if err != nil {
			return err
		}
		if c == nil {
			return errRelayBusy
		}
		b, err := rt.RelayRead(sctx, &lapse.RelayReadParams{Subscriber: s.Name, Cursor: c, Limit: s.Concurrency})
		if err != nil {
			return err
		}
		if len(b.Events) == 0 {
			return nil // nothing read: the cursor may stay where it is
		}
		var (
			p        lapse.RelayDeferParams
			deferred []relayFailure // p.Events' errors, and when they were sent
			stopped  = map[int64]bool{}
			next     = b.Next
			failing  bool // the handler failed an event: read no further batch
		)
		for batch := 1; b != nil; batch++ {
			read += len(b.Events)
			more = len(b.Events) == s.Concurrency
			start, wall := d.e.clock.Now(), time.Now()
			sent := make(chan []error, 1)
			go func(b *lapse.RelayBatch) { sent <- d.relaySend(ctx, s, b, stopped) }(b)
			var after *lapse.RelayBatch
			var readErr error
			if more && batch < relayBatches && !failing && ctx.Err() == nil {
				after, readErr = rt.RelayRead(sctx, &lapse.RelayReadParams{Subscriber: s.Name, Cursor: b.Next, Limit: s.Concurrency})
			}
			errs := <-sent
			if readErr != nil {
				return readErr
			}
			for i, dl := range b.Events {
				if errs[i] == nil {
					continue
				}
				attempted := !errors.Is(errs[i], errRelayWaits)
				failing = failing || attempted
				p.Events = append(p.Events, dl)
				p.Attempted = append(p.Attempted, attempted)
				deferred = append(deferred, relayFailure{err: errs[i], start: start, wall: wall})
			}
			next, b = b.Next, nil
			if after != nil && len(after.Events) > 0 {
				b = after
			}
		}
		if len(p.Events) > 0 {
			p.Subscriber, p.Owner, p.At = s.Name, d.cfg.Owner, d.e.clock.Now()
			p.LeaseUntil = p.At.Add(d.cfg.Lease)
			rows, err := rt.RelayDefer(sctx, &p)
			if err != nil {
				return err
			}
			for i, row := range rows {
				if p.Attempted[i] {
					f := deferred[i]
					f.dl = row
					failed = append(failed, f)
				}
			}
		}
		handed = read - len(p.Events)
		next.UpdatedAt = d.e.clock.Now()
		return rt.RelayAdvance(sctx, next, int64(handed))
	})
	switch {
	case errors.Is(err, errRelayBusy):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	d.e.metrics.deliveries.WithLabelValues(s.Name, lapse.OutcomeOK).Add(float64(handed))
	if handed < read {
		s.kick.signal() // the rows written for what it did not hand over
	}
	// The failed attempts were written leased to this worker: record each
	// as any failed attempt, retried on schedule or dead and reviewed.
	for _, f := range failed {
		rec := lapse.DeliveryAttempt{DeliveryID: f.dl.ID, Attempt: f.dl.Attempts, Worker: d.cfg.Owner, StartedAt: f.start}
		_, more := s.retries().Next(f.dl.Failures(), 0)
		f.dl.Final = !more
		d.failed(ctx, ctx, s, f.dl, &rec, f.err, f.wall, d.finisher(ctx, f.dl, &rec, f.wall))
	}
	return read, more, nil
}

// relayFailure is an event the handler failed, written as a delivery leased
// to this worker, whose attempt is recorded once the relay committed.
type relayFailure struct {
	dl    *lapse.Delivery
	err   error
	start time.Time
	wall  time.Time
}

// errRelayWaits marks an event not handed over because an earlier event of
// its order did not go through (or is still pending as a delivery).
var errRelayWaits = errors.New("engine: waits behind an earlier event of its order")

// relaySend hands b's events to s's handler in rounds: each round takes
// the next event of every order whose events before it went through, so
// that an order's events reach the subscriber in order. It returns one
// error per event: nil when the handler took it, errRelayWaits when it was
// not handed over. stopped holds the orders whose next event must wait:
// those of earlier batches of the transaction, to which it adds b's.
func (d *Deliverer) relaySend(ctx context.Context, s *Subscription, b *lapse.RelayBatch, stopped map[int64]bool) []error {
	errs := make([]error, len(b.Events))
	queue := make([]int, 0, len(b.Events))
	for i, dl := range b.Events {
		if b.Blocked[i] {
			stopped[dl.OrderID] = true
		}
		queue = append(queue, i)
	}
	h := s.Handler.(lapse.BatchHandler)
	_, more := s.retries().Next(1, 0) // after attempt 1, as attempt reads Failures
	for len(queue) > 0 {
		var round, rest []int
		in := map[int64]bool{}
		for _, i := range queue {
			o := b.Events[i].OrderID
			switch {
			case stopped[o]:
				errs[i] = errRelayWaits
			case in[o]:
				rest = append(rest, i)
			default:
				in[o] = true
				round = append(round, i)
			}
		}
		if len(round) == 0 {
			break
		}
		ds := make([]*lapse.Delivery, len(round))
		for j, i := range round {
			dl := b.Events[i]
			dl.Attempts, dl.Final = 1, !more
			ds[j] = dl
		}
		tctx, cancel := context.WithTimeout(ctx, s.Timeout)
		got := d.deliverMany(tctx, s, h, ds)
		cancel()
		if len(got) != len(ds) {
			err := fmt.Errorf("engine: subscriber %s answered %d deliveries with %d results", s.Name, len(ds), len(got))
			got = make([]error, len(ds))
			for j := range got {
				got[j] = err
			}
		}
		for j, i := range round {
			if errs[i] = got[j]; errs[i] != nil {
				stopped[b.Events[i].OrderID] = true
			}
		}
		queue = rest
	}
	return errs
}
