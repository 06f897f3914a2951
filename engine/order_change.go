package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lapsehq/lapse"
)

// maxStaleRetries bounds how often a change is re-planned when the order moved
// between reading and writing it.
const maxStaleRetries = 8

// contendedRetries bounds the rounds of a contended change (see
// orderChange.contended): many callers change such an order at once, and
// each loser must be able to try again.
const contendedRetries = 64

// orderChange says which order a change reads and how it retries.
type orderChange struct {
	orderNo string
	// stale names the change in the error that ends it when the order
	// kept moving. Default: "order <orderNo>".
	stale string
	// missing, when set, is the error for an order that does not exist, in
	// place of the store's lapse.ErrOrderNotFound.
	missing func() error
	// contended is for an order that many callers change at once (a group
	// buy's joins): each round locks and reads the order (OrderLock), plans
	// and writes in one transaction, so that rounds take turns rather than
	// lose to one another, up to contendedRetries rounds, with a short
	// random pause before each round after the first, so that losers do not
	// retry in step. The lock matters on MySQL, whose store locks the order
	// for the insert of a row that references it (a member): a loser holding
	// that lock while it failed would make a queue of losers that could
	// starve a change of its rounds.
	contended bool
	// locked is for a change planned from more than the order's row (its
	// refunds, say) that other changes move without moving the order: each
	// round locks and reads the order (OrderLock), plans and writes in one
	// transaction, so that two such changes, each planned before it saw the
	// other's write, cannot both decide that there is nothing to do. It
	// retries as an ordinary change does.
	locked bool
}

// changeOrder runs the read–plan–write loop of a change to one order: it
// reads the order and its flow, and step plans the change with the flow and
// writes it through s, guarded by the state and version it read. When step
// fails with lapse.ErrStale (the order moved between the read and the
// write), changeOrder reads the order again and runs step again, up to
// maxStaleRetries times; after that it fails with an error that wraps
// lapse.ErrStale and names the change. Any other error of step, and any
// error reading the order or finding its flow, ends the loop and is
// returned as it is.
//
// s is the engine's store, or, for a contended or locked change, the
// round's transaction; step must write through s. Work that must wait for
// the commit (counting the transition, waking the deliveries) belongs in
// step unless the change is contended or locked, in which case the caller
// does it once changeOrder has returned.
func changeOrder[T any](ctx context.Context, e *Engine, c orderChange, step func(s lapse.Store, o *lapse.Order, flow *lapse.Flow) (T, error)) (T, error) {
	round := func(s lapse.Store) (T, error) {
		var zero T
		read := s.OrderGet
		if c.contended || c.locked {
			read = s.OrderLock
		}
		o, err := read(ctx, c.orderNo)
		if c.missing != nil && errors.Is(err, lapse.ErrOrderNotFound) {
			return zero, c.missing()
		}
		if err != nil {
			return zero, err
		}
		flow, err := e.flows.of(o)
		if err != nil {
			return zero, err
		}
		return step(s, o, flow)
	}
	tries := maxStaleRetries
	if c.contended {
		tries = contendedRetries
	}
	for try := range tries {
		var got T
		var err error
		if c.contended || c.locked {
			if try > 0 && c.contended {
				time.Sleep(time.Duration(rand.IntN(2000)+500) * time.Microsecond)
			}
			err = e.store.Tx(ctx, func(tx lapse.Store) error {
				var err error
				got, err = round(tx)
				return err
			})
		} else {
			got, err = round(e.store)
		}
		if errors.Is(err, lapse.ErrStale) {
			continue
		}
		return got, err
	}
	var zero T
	what := c.stale
	if what == "" {
		what = "order " + c.orderNo
	}
	return zero, fmt.Errorf("%s: %w", what, lapse.ErrStale)
}

// transition writes p, planned from o, through s: the order's guarded
// transition with its log and outbox rows, the events' subscribers named
// first. It returns the order as moved, or lapse.ErrStale when it had moved
// on.
func (e *Engine) transition(ctx context.Context, s lapse.Store, o *lapse.Order, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	e.fanOut(o, p.Outbox)
	return s.OrderTransition(ctx, p)
}

// committed counts a transition of flow once it has committed and wakes the
// deliveries of its events.
func (e *Engine) committed(flow string, p *lapse.OrderTransitionParams) {
	e.metrics.transition(flow, p)
	e.delivered(p.Outbox)
}
