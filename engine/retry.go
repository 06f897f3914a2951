package engine

import (
	"context"
	"errors"
	"math"

	"github.com/lapsehq/lapse"
)

// An operator's retry starts again what automation gave up on. Retrying a
// group buy charges its members, which retrying anything else never does,
// so the two are apart: RetryGroup retries group buys only, Retry every
// other order, and each refuses the other's orders, so that a caller
// allowed one (an API route with its own scope) cannot reach the other.

// Sentinels of a retry asked of the wrong kind of order: EINVALID, nothing
// changed. Errors that refine them name the order.
var (
	// ErrRetryIsGroup: Retry was asked to retry a group buy, which only
	// RetryGroup retries.
	ErrRetryIsGroup = &lapse.Error{Code: lapse.EINVALID, Message: "the order is a group buy, which is retried as a group"}
	// ErrRetryNotGroup: RetryGroup was asked to retry an order that is not
	// a group buy, which only Retry retries.
	ErrRetryNotGroup = &lapse.Error{Code: lapse.EINVALID, Message: "the order is not a group buy"}
)

// Retry has an operator retry what automation gave up on for an order that
// is not a group buy: a membership's compensation from manual review. The
// order's open reviews that the retry takes over are resolved ("retried by"
// by, with the reason) in the transaction of its transition
// (resolveRetried); the others stay open. Errors, with nothing changed:
// ErrRetryIsGroup (refined) for a group buy; ECONFLICT when the order is
// not waiting for a retry; lapse.ErrCardsRevoked (ECONFLICT) for a
// membership whose cards were revoked (a refund started, or they are
// voided), which a retry could not issue again; EINVALID for an order of a
// flow with nothing to retry, or a reason that is not one line of at most
// lapse.MaxReasonLen bytes; ENOTFOUND.
func (e *Engine) Retry(ctx context.Context, orderNo, reason string, by Actor) (*lapse.Order, error) {
	return e.retry(ctx, orderNo, false, reason, by)
}

// RetryGroup has an operator settle a failed group buy again: it closes
// again, and its members not charged yet are charged. Of its open reviews,
// those it takes over are resolved as Retry resolves an order's: a
// member's charge in review is not one of them. Errors, with nothing changed:
// ErrRetryNotGroup (refined) for an order that is not a group buy;
// ECONFLICT when the group has not failed; ENOTFOUND.
func (e *Engine) RetryGroup(ctx context.Context, groupID, reason string, by Actor) (*lapse.Order, error) {
	return e.retry(ctx, groupID, true, reason, by)
}

// RetryStake is what Retry of the order puts at risk, in minor units of
// its currency: its amount. Errors: those Retry returns before it tries
// the order's state (ErrRetryIsGroup, EINVALID, ENOTFOUND).
func (e *Engine) RetryStake(ctx context.Context, orderNo string) (amount int64, currency string, err error) {
	t, err := e.retryPlan(ctx, orderNo, false)
	if err != nil {
		return 0, "", err
	}
	return t.order.Amount, t.order.Currency, nil
}

// RetryGroupStake is what RetryGroup of the group can charge, in minor
// units of its currency: what each member not charged yet pays (a group's
// order holds the price one member pays, not the group's). A member whose
// charge is under way or failed counts, as the retry may charge it.
// Errors: those RetryGroup returns before it tries the group's state
// (ErrRetryNotGroup, ENOTFOUND).
func (e *Engine) RetryGroupStake(ctx context.Context, groupID string) (amount int64, currency string, err error) {
	t, err := e.retryPlan(ctx, groupID, true)
	if err != nil {
		return 0, "", err
	}
	o := t.order
	ms, err := e.store.GroupMemberList(ctx, o.ID)
	if err != nil {
		return 0, "", err
	}
	for _, m := range ms {
		if m.Status == lapse.ChargeCharged {
			continue
		}
		var ok bool
		if amount, ok = lapse.AddInt64(amount, m.Amount); !ok {
			amount = math.MaxInt64
		}
	}
	return amount, o.Currency, nil
}

// retryTarget is an order an operator may retry, and how.
type retryTarget struct {
	order *lapse.Order
	flow  *lapse.Flow
	event lapse.Event // the event that retries it
	check retryCheck  // nil, or the feature's check inside the retry
}

// retryPlan returns the order orderNo as a retryTarget, refusing a group
// buy unless group, and any other order if group.
func (e *Engine) retryPlan(ctx context.Context, orderNo string, group bool) (*retryTarget, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, err
	}
	gb := e.feat.groups
	switch isGroup := gb.serves(flow); {
	case isGroup && !group:
		return nil, lapse.Refine(ErrRetryIsGroup, "order %s is a group buy, whose retry charges its members: it is retried as a group", o.OrderNo)
	case !isGroup && group:
		return nil, lapse.Refine(ErrRetryNotGroup, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
	case isGroup:
		return &retryTarget{order: o, flow: flow, event: gb.retryEvent(flow)}, nil
	}
	for _, ft := range e.feat.all {
		if r, ok := ft.(operatorRetry); ok {
			if ev := r.retryEvent(flow); ev != "" {
				check, _ := ft.(retryCheck)
				return &retryTarget{order: o, flow: flow, event: ev, check: check}, nil
			}
		}
	}
	return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which has nothing to retry", o.OrderNo, flow.Name)
}

func (e *Engine) retry(ctx context.Context, orderNo string, group bool, reason string, by Actor) (*lapse.Order, error) {
	if err := lapse.CheckReason("reason", reason); err != nil {
		return nil, err
	}
	t, err := e.retryPlan(ctx, orderNo, group)
	if err != nil {
		return nil, err
	}
	o := t.order
	who := by.resolver()
	note := "retried by " + who
	if reason == "" {
		reason = "retried by an operator"
	} else {
		note += ": " + reason
	}
	var refused error
	resolve := func(tx lapse.Store, p *lapse.OrderTransitionParams) error {
		if t.check != nil {
			if refused = t.check.checkRetry(ctx, tx, t.flow, o); refused != nil {
				return refused
			}
		}
		return resolveRetried(ctx, tx, p, who, note)
	}
	moved, err := e.fire(ctx, orderNo, Fire{Event: t.event, Reason: reason, By: by}, resolve)
	if refused != nil && errors.Is(err, refused) {
		return nil, err
	}
	if lapse.ErrorCode(err) == lapse.ECONFLICT {
		return nil, lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which has nothing to retry", o.OrderNo, o.State)
	}
	return moved, err
}

// resolveRetried resolves, in the transaction of a retry's transition p,
// the order's open reviews that the retry takes over: those of its
// deliveries that died at a subscriber that p's events go to again. The
// others stay on the desk, each for an operator to settle on its own: a
// payment or a member's charge in review, a refund, a delivery to another
// subscriber. A retry settles none of them, and resolving them would take
// money, or an event no one received, off the desk (S3, S5).
func resolveRetried(ctx context.Context, tx lapse.Store, p *lapse.OrderTransitionParams, who, note string) error {
	again := map[string]bool{}
	for _, ev := range p.Outbox {
		for _, s := range ev.Subscribers {
			again[s] = true
		}
		for _, s := range ev.Relays {
			again[s] = true
		}
	}
	open, err := tx.ReviewList(ctx, &lapse.ReviewListParams{OrderID: p.OrderID, Open: true})
	if err != nil {
		return err
	}
	for _, r := range open {
		if r.DeliveryID == 0 || r.OrderRefundID != 0 {
			continue
		}
		dl, err := tx.DeliveryGet(ctx, r.DeliveryID)
		if errors.Is(err, lapse.ErrDeliveryNotFound) {
			continue // pruned: whose it was is not known, so it stays for an operator
		}
		if err != nil {
			return err
		}
		if !again[dl.Subscriber] {
			continue
		}
		if _, err := tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: r.ID, At: p.At, By: who, Note: note}); err != nil {
			return err
		}
	}
	return nil
}
