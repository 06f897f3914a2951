package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// The built-in ledgers, stockLedger (stock.go) and couponLedger
// (coupon.go), serve the flows whose orders hold (lapse.Flow.Holds): an
// order reserves its items and locks its coupon when it is created, and
// the events its flow names in ReleaseOn and ConsumeOn give them back or
// use them up, through a local subscription of each ledger.

// A ledger switched off takes no new holds, but never forgets those taken
// while it was on: New asks the store whether orders still hold any
// (stillHeld), and if they do the ledger keeps its subscription (it winds
// down, feature.go), which gives back or uses up exactly what each order
// holds, as it would have. With nothing held, as for those who never used
// the ledger, there is no subscription and no delivery per order.

// Names of the built-in ledger subscriptions.
const (
	StockSubscriber  = "stock"
	CouponSubscriber = "coupon"
)

// Local effects fail only when the database does; the ledgers retry them
// briskly. They contend for the same ledger rows, so a few at a time is
// enough.
var ledgerSchedule = lapse.Schedule{Base: time.Second, Cap: time.Minute, MaxAttempts: 20, Jitter: 0.2}

const ledgerConcurrency = 4

// holdingEvents returns the events that release or use up what the orders
// of flows hold.
func holdingEvents(flows []*lapse.Flow) []string {
	var types []string
	for _, f := range flows {
		addNew(&types, f.ReleaseOn...)
		addNew(&types, f.ConsumeOn...)
	}
	return types
}

type holdingMoveKind int

const (
	releaseMove holdingMoveKind = iota
	consumeMove
)

// holdingMove says what the event of d does to what its order holds.
func holdingMove(fs *flowSet, d *lapse.Delivery) (holdingMoveKind, bool) {
	flow := fs.ofEvent(d)
	if flow == nil || !flow.Holds {
		return 0, false
	}
	switch {
	case slices.Contains(flow.ReleaseOn, d.EventType):
		return releaseMove, true
	case slices.Contains(flow.ConsumeOn, d.EventType):
		return consumeMove, true
	}
	return 0, false
}

// stranded reports whether d, an event holdingMove found no move for, is
// of an order that ended under a flow that, changed since the event was
// written, no longer gives back or uses up what the order holds: the flow
// is no longer run or no longer holds, or no delivery of the order to d's
// subscriber after d is of an event the flow releases or consumes on (its
// release_on or emits were renamed). Whatever the order still holds would
// then be kept for good, unseen: its delivery is refused (strandedError),
// dead, for an operator (S4). It reads the order's deliveries only for an
// order that ended.
func stranded(ctx context.Context, fs *flowSet, tx lapse.Store, d *lapse.Delivery) (bool, error) {
	if d.Event == nil {
		return false, nil
	}
	o, err := lapse.EventOrder(d.Event)
	if err != nil || o.ClosedAt == nil {
		return false, nil
	}
	f := fs.get(o.Flow)
	if f == nil || !f.Holds {
		return true, nil
	}
	ds, err := tx.DeliveryList(ctx, d.OrderID)
	if err != nil {
		return false, err
	}
	for _, l := range ds {
		if l.ID > d.ID && l.Subscriber == d.Subscriber && l.Status == lapse.DeliveryPending &&
			(slices.Contains(f.ReleaseOn, l.EventType) || slices.Contains(f.ConsumeOn, l.EventType)) {
			return false, nil // that one settles what the order holds
		}
	}
	return true, nil
}

// strandedError is the refusal of a stranded delivery (stranded) whose
// order still holds what, in words.
func strandedError(d *lapse.Delivery, what string) error {
	return fmt.Errorf("%w: order %s ended holding %s, and its flow as it runs now no longer says whether %s gives that back or uses it up "+
		"(the flow was changed after the event was written): an operator decides", lapse.ErrRefused, d.OrderNo, what, d.EventType)
}

// heldCheckTimeout bounds how long New waits for the store to say whether
// orders still hold what a ledger that is off gave them.
const heldCheckTimeout = 30 * time.Second

// holding reports whether the orders of f hold what the ledgers give.
func holding(f *lapse.Flow) bool { return f.Holds }

// stillHeld reports whether orders still hold what the built-in ledger
// called name, now off, gave them while it was on: count returns how many
// things they hold (SKUs with stock reserved, coupons locked), which the
// warning logged when they do names attr and explains with says. When the
// store cannot say, the answer is yes: a delivery that finds nothing to give
// back costs a row, a hold never given back breaks S4.
func stillHeld(e *Engine, name string, count func(context.Context) (int64, error), attr, says string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), heldCheckTimeout)
	defer cancel()
	n, err := count(ctx)
	switch {
	case err != nil:
		e.log.Warn("engine: the "+name+" ledger is off, and whether orders still hold what it gave them could not be read: "+
			"its subscription stays, so that whatever they hold is given back or used up as they end", "err", err)
		return true
	case n == 0:
		return false
	}
	e.log.Warn("engine: the "+name+" ledger is off, but "+says, attr, n)
	return true
}
