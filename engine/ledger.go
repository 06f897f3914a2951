package engine

import (
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// The built-in ledgers, stockLedger (stock.go) and couponLedger
// (coupon.go), serve the flows whose orders hold (lapse.Flow.Holds): an
// order reserves its items and locks its coupon when it is created, and
// the events its flow names in ReleaseOn and ConsumeOn give them back or
// use them up, through a local subscription of each ledger.

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
