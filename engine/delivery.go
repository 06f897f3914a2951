package engine

import (
	"context"

	"github.com/lapsehq/lapse"
)

// DeliveryHistory is a delivery with every attempt made of it.
type DeliveryHistory struct {
	*lapse.Delivery
	History []*lapse.DeliveryAttempt
	// Relayed marks an event relayed to its subscriber without a delivery
	// row (Subscription.Relay): its ID is 0, its status done once the relay
	// handed it over and pending until then, and it has no history.
	Relayed bool `json:"relayed,omitempty"`
}

// Deliveries returns the deliveries of the order with orderNo, oldest first,
// each with its attempts.
func (e *Engine) Deliveries(ctx context.Context, orderNo string) ([]DeliveryHistory, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	ds, err := e.store.DeliveryList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	atts, err := e.store.DeliveryAttemptList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	out := make([]DeliveryHistory, len(ds))
	for i, d := range ds {
		out[i].Delivery = d
		for _, a := range atts {
			if a.DeliveryID == d.ID {
				out[i].History = append(out[i].History, a)
			}
		}
	}
	return e.relayedDeliveries(ctx, o.ID, out)
}

// relayedDeliveries appends to out the events of order orderID relayed
// without a delivery row, as deliveries (DeliveryHistory.Relayed).
func (e *Engine) relayedDeliveries(ctx context.Context, orderID int64, out []DeliveryHistory) ([]DeliveryHistory, error) {
	r := relayerOf(e.store)
	if r == nil {
		return out, nil
	}
	evs, err := r.RelayedEvents(ctx, orderID)
	if err != nil {
		return nil, err
	}
	for _, re := range evs {
		ev := re.Event
		dl := &lapse.Delivery{EventID: ev.ID, EventType: ev.Type, OrderID: ev.OrderID, OrderNo: ev.OrderNo, Subscriber: re.Subscriber,
			Status: lapse.DeliveryPending, NextAttemptAt: ev.CreatedAt, CreatedAt: ev.CreatedAt, UpdatedAt: ev.CreatedAt}
		if re.Passed {
			dl.Status, dl.Attempts = lapse.DeliveryDone, 1
		}
		out = append(out, DeliveryHistory{Delivery: dl, Relayed: true})
	}
	return out, nil
}

// Revivable returns the error with which RetryDelivery would refuse to
// revive d, a dead delivery, for what its order is now (ErrReviveIssue),
// or nil. It only reads: the console offers to revive the deliveries it
// allows, and RetryDelivery checks again.
func (e *Engine) Revivable(ctx context.Context, d *lapse.Delivery) error {
	return e.checkRevive(ctx, e.store, d)
}

// checkRevive runs the features' checks of a revive of d through s (in
// RetryDelivery's transaction, whose locks they take). A delivery that is
// not dead is not theirs to judge: DeliveryRetry refuses it.
func (e *Engine) checkRevive(ctx context.Context, s lapse.Store, d *lapse.Delivery) error {
	if d.Status != lapse.DeliveryDead {
		return nil
	}
	for _, ft := range e.feat.all {
		if rc, ok := ft.(reviveCheck); ok {
			if err := rc.checkRevive(ctx, s, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// RetryDelivery makes a dead delivery pending again, due now, with a fresh
// retry schedule, and resolves the delivery's open reviews ("retried by" by)
// in the same transaction. Errors, with nothing changed:
// lapse.ErrDeliveryNotFound; ECONFLICT when it is not dead;
// ErrReviveIssue (ECONFLICT) for the dead issue delivery of an order that
// waits for the order's retry (Retry) and was never refunded, which the
// delivery's cannot stand for.
func (e *Engine) RetryDelivery(ctx context.Context, id int64, by Actor) (*lapse.Delivery, error) {
	now := e.clock.Now()
	who := by.resolver()
	var d *lapse.Delivery
	err := e.store.Tx(ctx, func(tx lapse.Store) error {
		dead, err := tx.DeliveryGet(ctx, id)
		if err != nil {
			return err
		}
		if err := e.checkRevive(ctx, tx, dead); err != nil {
			return err
		}
		if d, err = tx.DeliveryRetry(ctx, &lapse.DeliveryRetryParams{ID: id, At: now}); err != nil {
			return err
		}
		_, err = tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{DeliveryID: id, At: now, By: who, Note: "retried by " + who})
		return err
	})
	if err != nil {
		return nil, err
	}
	e.wakeSubscriber(d.Subscriber)
	return d, nil
}
