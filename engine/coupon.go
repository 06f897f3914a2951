package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// couponLedger is the built-in coupon ledger, on with Config.CouponLedger:
// the orders of flows that hold lock their coupon when they are created (or
// are refused), and its local subscription, CouponSubscriber, unlocks it or
// uses it up as the flow says. Its API works whether it is on or not. Off,
// it locks nothing, and winds down the coupons that orders locked while it
// was on (held).
type couponLedger struct {
	e  *Engine
	on bool
	// held is set when the ledger is off and orders still hold coupons it
	// locked (or the store could not say): its subscription stays, to
	// unlock or use them as those orders end (S4).
	held bool
}

func newCouponLedger(e *Engine, cfg Config, flows []*lapse.Flow) *couponLedger {
	l := &couponLedger{e: e, on: cfg.CouponLedger}
	if !l.on && slices.ContainsFunc(flows, holding) {
		l.held = stillHeld(e, "coupon", e.store.CouponCountLocked, "coupons_locked",
			"orders still hold coupons locked while it was on: new orders lock none, and the coupons these orders hold are given back or used up as they end")
	}
	return l
}

func (l *couponLedger) serves(f *lapse.Flow) bool { return l.on && f.Holds }

func (l *couponLedger) windsDown(f *lapse.Flow) bool { return l.held && f.Holds }

func (l *couponLedger) subscriptions(flows []*lapse.Flow) []Subscription {
	return []Subscription{{Name: CouponSubscriber, Events: holdingEvents(flows), Flows: flowNames(flows), Local: couponEffect{l.e},
		Schedule: ledgerSchedule, Concurrency: ledgerConcurrency, Filter: l.holds}}
}

func (l *couponLedger) holds(o *lapse.Order) bool { return o.Coupon != "" }

// hold locks the coupon of a new order.
func (l *couponLedger) hold(ctx context.Context, tx lapse.Store, o *lapse.Order, now time.Time) error {
	_, err := tx.CouponMove(ctx, &lapse.CouponMoveParams{Code: o.Coupon, OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponLock, At: now})
	if errors.Is(err, lapse.ErrCouponNotFound) {
		return &lapse.Error{Code: lapse.ECONFLICT, Field: "coupon", Message: lapse.ErrorMessage(err), Err: err}
	}
	return err
}

// CreateCoupon adds an available coupon to the built-in ledger, or returns
// lapse.ErrCouponExists; a code that lapse.CouponCreateParams.Validate
// refuses is EINVALID.
func (e *Engine) CreateCoupon(ctx context.Context, code string) (*lapse.Coupon, error) {
	return e.feat.coupons.create(ctx, code)
}

func (l *couponLedger) create(ctx context.Context, code string) (*lapse.Coupon, error) {
	return l.e.store.CouponCreate(ctx, &lapse.CouponCreateParams{Code: code, At: l.e.clock.Now()})
}

// Coupon returns a coupon and its journal, or lapse.ErrCouponNotFound.
func (e *Engine) Coupon(ctx context.Context, code string) (*lapse.Coupon, []*lapse.CouponMove, error) {
	return e.feat.coupons.get(ctx, code)
}

func (l *couponLedger) get(ctx context.Context, code string) (*lapse.Coupon, []*lapse.CouponMove, error) {
	c, err := l.e.store.CouponGet(ctx, code)
	if err != nil {
		return nil, nil, err
	}
	moves, err := l.e.store.CouponMoveList(ctx, code)
	return c, moves, err
}

// couponEffect unlocks or uses up the coupon an order holds.
type couponEffect struct{ e *Engine }

func (c couponEffect) Apply(ctx context.Context, tx lapse.Store, d *lapse.Delivery) error {
	now := c.e.clock.Now()
	kind, ok := holdingMove(&c.e.flows, d)
	strand := false
	if !ok {
		var err error
		if strand, err = stranded(ctx, &c.e.flows, tx, d); err != nil || !strand {
			return err
		}
	}
	if !strand {
		first, err := tx.EffectClaim(ctx, d.Subscriber, d.EventID, now)
		if err != nil || !first {
			return err
		}
	}
	o, err := tx.OrderGet(ctx, d.OrderNo)
	if err != nil || o.Coupon == "" {
		return err
	}
	cp, err := tx.CouponGet(ctx, o.Coupon)
	if errors.Is(err, lapse.ErrCouponNotFound) {
		return nil // never locked: the order was created without the ledger
	}
	if err != nil {
		return err
	}
	if cp.Status != lapse.CouponLocked || cp.OrderNo != o.OrderNo {
		return nil // this order does not hold it
	}
	if strand {
		return strandedError(d, "coupon "+o.Coupon+" locked")
	}
	move := lapse.CouponUnlock
	if kind == consumeMove {
		move = lapse.CouponConsume
	}
	_, err = tx.CouponMove(ctx, &lapse.CouponMoveParams{Code: o.Coupon, OrderID: o.ID, OrderNo: o.OrderNo, Kind: move, At: now})
	return err
}
