package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// Names of the built-in ledger subscriptions.
const (
	StockSubscriber  = "stock"
	CouponSubscriber = "coupon"
)

// ledgerSubscriptions returns the local subscriptions that give back or use
// up what orders hold, for every flow that holds.
func ledgerSubscriptions(flows []*lapse.Flow, e *Engine) []Subscription {
	var types, names []string
	for _, f := range flows {
		if !f.Holds {
			continue
		}
		names = append(names, f.Name)
		for _, t := range append(slices.Clone(f.ReleaseOn), f.ConsumeOn...) {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	// Local effects fail only when the database does; retry them briskly.
	// They contend for the same ledger rows, so a few at a time is enough.
	schedule := lapse.Schedule{Base: time.Second, Cap: time.Minute, MaxAttempts: 20, Jitter: 0.2}
	const concurrency = 4
	var out []Subscription
	if e.stock {
		out = append(out, Subscription{Name: StockSubscriber, Events: types, Flows: names, Local: stockEffect{e}, Schedule: schedule, Concurrency: concurrency,
			Filter: func(o *lapse.Order) bool { return len(o.Items) > 0 }})
	}
	if e.coupons {
		out = append(out, Subscription{Name: CouponSubscriber, Events: types, Flows: names, Local: couponEffect{e}, Schedule: schedule, Concurrency: concurrency,
			Filter: func(o *lapse.Order) bool { return o.Coupon != "" }})
	}
	return out
}

// holds reports whether creating o must reserve anything.
func (e *Engine) holds(f *lapse.Flow, o *lapse.Order) bool {
	return f.Holds && ((e.stock && len(o.Items) > 0) || (e.coupons && o.Coupon != ""))
}

// hold reserves what a new order holds, inside the creation transaction.
// Refusals are conflicts that name the SKU or coupon.
func (e *Engine) hold(ctx context.Context, tx lapse.Store, o *lapse.Order, now time.Time) error {
	if e.stock && len(o.Items) > 0 {
		lines, err := lapse.StockLines(o.Items)
		if err != nil {
			return err
		}
		err = tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: lines, At: now})
		if errors.Is(err, lapse.ErrStockNotFound) {
			// At creation a missing SKU is the caller's conflict with the
			// ledger, not a missing resource of this request.
			return &lapse.Error{Code: lapse.ECONFLICT, Field: "items", Message: lapse.ErrorMessage(err) + "; set it with PUT /v1/stock/{sku} first", Err: err}
		}
		if err != nil {
			return err
		}
	}
	if e.coupons && o.Coupon != "" {
		_, err := tx.CouponMove(ctx, &lapse.CouponMoveParams{Code: o.Coupon, OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponLock, At: now})
		switch {
		case errors.Is(err, lapse.ErrCouponNotFound):
			return &lapse.Error{Code: lapse.ECONFLICT, Field: "coupon", Message: lapse.ErrorMessage(err), Err: err}
		case err != nil:
			return err
		}
	}
	return nil
}

// stockEffect gives back or uses up an order's stock when its flow says so.
// It works from the order's stock journal, so it moves exactly what the order
// still holds; its dedup row makes it happen once per event.
type stockEffect struct{ e *Engine }

func (s stockEffect) Apply(ctx context.Context, tx lapse.Store, d *lapse.Delivery) error {
	now := s.e.clock.Now()
	kind, ok := s.e.holdingMove(d)
	if !ok {
		return nil
	}
	first, err := tx.EffectClaim(ctx, d.Subscriber, d.EventID, now)
	if err != nil || !first {
		return err
	}
	journal, err := tx.StockMoveList(ctx, d.OrderID)
	if err != nil {
		return err
	}
	bySKU := map[string]int64{}
	for _, m := range journal {
		if m.Kind == lapse.StockReserve {
			bySKU[m.SKU] += m.Qty
		} else {
			bySKU[m.SKU] -= m.Qty
		}
	}
	var held []lapse.Item
	for sku, qty := range bySKU {
		if qty > 0 {
			held = append(held, lapse.Item{SKU: sku, Qty: qty})
		}
	}
	if len(held) == 0 {
		return nil
	}
	lines, err := lapse.StockLines(held)
	if err != nil {
		return err
	}
	if kind == releaseMove {
		return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: d.OrderID, Kind: lapse.StockRelease, Lines: lines, At: now})
	}
	return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: d.OrderID, Kind: lapse.StockConsume, Lines: lines, At: now})
}

// couponEffect unlocks or uses up the coupon an order holds.
type couponEffect struct{ e *Engine }

func (c couponEffect) Apply(ctx context.Context, tx lapse.Store, d *lapse.Delivery) error {
	now := c.e.clock.Now()
	kind, ok := c.e.holdingMove(d)
	if !ok {
		return nil
	}
	first, err := tx.EffectClaim(ctx, d.Subscriber, d.EventID, now)
	if err != nil || !first {
		return err
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
	move := lapse.CouponUnlock
	if kind == consumeMove {
		move = lapse.CouponConsume
	}
	_, err = tx.CouponMove(ctx, &lapse.CouponMoveParams{Code: o.Coupon, OrderID: o.ID, OrderNo: o.OrderNo, Kind: move, At: now})
	return err
}

type holdingMoveKind int

const (
	releaseMove holdingMoveKind = iota
	consumeMove
)

// holdingMove says what the event of d does to what its order holds.
func (e *Engine) holdingMove(d *lapse.Delivery) (holdingMoveKind, bool) {
	flow := e.flows.ofEvent(d)
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
