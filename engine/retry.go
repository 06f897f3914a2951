package engine

import (
	"context"
	"errors"

	"github.com/lapsehq/lapse"
)

// Retry has an operator retry what automation gave up on: a failed group
// buy's settlement, or a membership's compensation from manual review. The
// order's open reviews are resolved ("retried by" by, with the reason) in
// the transaction of its transition. Errors, with nothing written:
// ECONFLICT when the order is not waiting for a retry;
// lapse.ErrCardsRevoked (ECONFLICT) for a membership whose cards were
// revoked (a refund started, or they are voided), which a retry could not
// issue again; EINVALID for an order of a flow with nothing to retry;
// ENOTFOUND.
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
	var check retryCheck
	for _, ft := range e.feat.all {
		if r, ok := ft.(operatorRetry); ok {
			if ev = r.retryEvent(flow); ev != "" {
				check, _ = ft.(retryCheck)
				break
			}
		}
	}
	if ev == "" {
		return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which has nothing to retry", o.OrderNo, flow.Name)
	}
	who := by.resolver()
	note := "retried by " + who
	if reason == "" {
		reason = "retried by an operator"
	} else {
		note += ": " + lapse.CleanReason(reason)
	}
	var refused error
	resolve := func(tx lapse.Store, p *lapse.OrderTransitionParams) error {
		if check != nil {
			if refused = check.checkRetry(ctx, tx, flow, o); refused != nil {
				return refused
			}
		}
		_, err := tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{OrderID: p.OrderID, At: p.At, By: who, Note: note})
		return err
	}
	moved, err := e.fire(ctx, orderNo, Fire{Event: ev, Reason: reason, By: by}, resolve)
	if refused != nil && errors.Is(err, refused) {
		return nil, err
	}
	if lapse.ErrorCode(err) == lapse.ECONFLICT {
		return nil, lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which has nothing to retry", o.OrderNo, o.State)
	}
	return moved, err
}
