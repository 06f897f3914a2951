package engine

import (
	"context"

	"github.com/lapsehq/lapse"
)

// Retry has an operator retry what automation gave up on: a failed group
// buy's settlement, or a membership's compensation from manual review.
// Errors: ECONFLICT when the order is not waiting for a retry; EINVALID for
// an order of a flow with nothing to retry; ENOTFOUND.
func (e *Engine) Retry(ctx context.Context, orderNo, reason string, by Actor) (*lapse.Order, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, err
	}
	var ev lapse.Event
	for _, ft := range e.feat.all {
		if r, ok := ft.(operatorRetry); ok {
			if ev = r.retryEvent(flow); ev != "" {
				break
			}
		}
	}
	if ev == "" {
		return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which has nothing to retry", o.OrderNo, flow.Name)
	}
	if reason == "" {
		reason = "retried by an operator"
	}
	moved, err := e.Fire(ctx, orderNo, Fire{Event: ev, Reason: reason, By: by})
	if lapse.ErrorCode(err) == lapse.ECONFLICT {
		return nil, lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which has nothing to retry", o.OrderNo, o.State)
	}
	return moved, err
}
