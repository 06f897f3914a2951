package engine

import (
	"context"

	"github.com/lapsehq/lapse"
)

// DeliveryHistory is a delivery with every attempt made of it.
type DeliveryHistory struct {
	*lapse.Delivery
	History []*lapse.DeliveryAttempt
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
	return out, nil
}

// RetryDelivery makes a dead delivery pending again, due now, with a fresh
// retry schedule, and resolves the delivery's open reviews ("retried by" by)
// in the same transaction. Errors: lapse.ErrDeliveryNotFound; ECONFLICT when
// it is not dead.
func (e *Engine) RetryDelivery(ctx context.Context, id int64, by Actor) (*lapse.Delivery, error) {
	now := e.clock.Now()
	who := by.resolver()
	var d *lapse.Delivery
	err := e.store.Tx(ctx, func(tx lapse.Store) error {
		var err error
		if d, err = tx.DeliveryRetry(ctx, &lapse.DeliveryRetryParams{ID: id, At: now}); err != nil {
			return err
		}
		_, err = tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{DeliveryID: id, At: now, By: who, Note: "retried by " + who})
		return err
	})
	if err != nil {
		return nil, err
	}
	e.kick.signal()
	return d, nil
}
