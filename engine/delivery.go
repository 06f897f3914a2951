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
// retry schedule. Errors: lapse.ErrDeliveryNotFound; ECONFLICT when it is not
// dead.
func (e *Engine) RetryDelivery(ctx context.Context, id int64) (*lapse.Delivery, error) {
	d, err := e.store.DeliveryRetry(ctx, &lapse.DeliveryRetryParams{ID: id, At: e.clock.Now()})
	if err != nil {
		return nil, err
	}
	e.kick.signal()
	return d, nil
}

// Reviews lists orders waiting for an operator, newest first.
func (e *Engine) Reviews(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	return e.store.ReviewList(ctx, p)
}
