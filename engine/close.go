package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// ErrNotClosable: the order's state has no deadline, so there is nothing to
// close by hand: it is closed, paid, settled or waiting for something else.
var ErrNotClosable = &lapse.Error{Code: lapse.ECONFLICT, Message: "the order's state has no deadline to close it by"}

// CloseOrder closes an order by hand, for when automation failed (seed
// 004's manual close): it fires the deadline event of the order's current
// state now, as the deadline engine would at the deadline, with its log row
// (fired by by, with reason), its events and what they release (stock,
// coupons). The deadline need not have passed.
//
// An order whose customer started paying is settled with the provider
// first, as the closer does: the provider is asked to close the payment,
// and a payment it reports is applied (the order is then paid, and
// CloseOrder returns ErrNotClosable); a provider that does not answer fails
// the close with EUNAVAILABLE, and nothing changes.
//
// Errors: an error wrapping ErrNotClosable when the state has no deadline;
// lapse.ErrOrderNotFound; EUNAVAILABLE as above.
func (e *Engine) CloseOrder(ctx context.Context, orderNo, reason string, by Actor) (*lapse.Order, error) {
	return e.CloseOrderIf(ctx, orderNo, reason, by, nil)
}

// CloseOrderIf is CloseOrder of an order whose state closable accepts (nil
// accepts every state with a deadline), checked on the order as it is read
// for the close, in the guarded change that closes it, and before its
// provider is asked: an order in a state closable refuses, however it got
// there since it was chosen, fails with an error wrapping ErrNotClosable
// and nothing changes. The manual close (package closes) gives
// (*lapse.Flow).ClosableByHand.
func (e *Engine) CloseOrderIf(ctx context.Context, orderNo, reason string, by Actor, closable func(*lapse.Flow, lapse.State) bool) (*lapse.Order, error) {
	for range maxStaleRetries {
		moved, err := e.closeOrder(ctx, orderNo, reason, by, closable)
		if !errors.Is(err, errIntentSince) {
			return moved, err
		}
	}
	return nil, fmt.Errorf("manual close of order %s: its customer kept starting to pay: %w", orderNo, lapse.ErrStale)
}

// errIntentSince: the customer of the order being closed by hand started
// paying after the close asked (or did not need to ask) the provider.
var errIntentSince = errors.New("the customer started paying since the provider was asked")

func (e *Engine) closeOrder(ctx context.Context, orderNo, reason string, by Actor, closable func(*lapse.Flow, lapse.State) bool) (*lapse.Order, error) {
	seen, err := e.settleBeforeClose(ctx, orderNo, closable)
	if err != nil {
		return nil, err
	}
	return changeOrder(ctx, e, orderChange{orderNo: orderNo}, func(s lapse.Store, o *lapse.Order, flow *lapse.Flow) (*lapse.Order, error) {
		if err := notClosable(flow, o, closable); err != nil {
			return nil, err
		}
		st := flow.State(o.State)
		if e.feat.payments.asksProvider(o) && (seen == nil || !seen.Equal(*o.IntentAt)) {
			// Started paying after settleBeforeClose looked: a payment
			// made in time must be asked about, not refunded as late.
			return nil, errIntentSince
		}
		p, err := flow.Plan(o, lapse.Firing{Event: st.Deadline.Event, Now: e.clock.Now(), FiredBy: by.FiredBy, Actor: by.Name, Reason: reason})
		if err != nil {
			return nil, err
		}
		moved, err := e.transition(ctx, s, o, p)
		if err != nil {
			return nil, err
		}
		e.committed(moved.Flow, p)
		if moved.DeadlineAt != nil {
			e.deadlineSet(moved.ID, *moved.DeadlineAt)
		}
		return moved, nil
	})
}

// settleBeforeClose asks the provider of an order whose customer started
// paying to close the payment, and applies a payment it reports. It
// returns the intent it settled (the order's IntentAt), or nil when the
// customer had not started paying.
func (e *Engine) settleBeforeClose(ctx context.Context, orderNo string, closable func(*lapse.Flow, lapse.State) bool) (*time.Time, error) {
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, err
	}
	if err := notClosable(flow, o, closable); err != nil {
		return nil, err // nothing to ask its provider about
	}
	ps := e.feat.payments
	if !ps.asksProvider(o) {
		return nil, nil
	}
	if err := e.askBeforeClose(ctx, o); err != nil {
		return nil, err
	}
	return o.IntentAt, nil
}

// notClosable returns the ErrNotClosable of o, nil when its state has a
// deadline that closable (nil: any) accepts.
func notClosable(flow *lapse.Flow, o *lapse.Order, closable func(*lapse.Flow, lapse.State) bool) error {
	st := flow.State(o.State)
	switch {
	case st == nil || st.Deadline == nil:
		return lapse.Refine(ErrNotClosable, "order %s is %s, which has no deadline to close it by", o.OrderNo, o.State)
	case closable != nil && !closable(flow, o.State):
		return lapse.Refine(ErrNotClosable, "order %s is %s, whose deadline (%s) a manual close does not fire: it does not end an unpaid order",
			o.OrderNo, o.State, st.Deadline.Event)
	}
	return nil
}

// askBeforeClose is settleBeforeClose of o, whose customer started paying.
func (e *Engine) askBeforeClose(ctx context.Context, o *lapse.Order) error {
	ps := e.feat.payments
	prov := ps.providers[o.IntentProvider]
	if prov == nil {
		return nil // no port to ask: closed as the closer would, without asking
	}
	actx, cancel := context.WithTimeout(ctx, askTimeout)
	pp, err := prov.Close(actx, o.OrderNo)
	cancel()
	if err == nil {
		err = answerAbout(o.IntentProvider, o.OrderNo, pp)
	}
	switch {
	case errors.Is(err, lapse.ErrProviderNotFound):
		return nil
	case err != nil:
		return lapse.Errorf(lapse.EUNAVAILABLE, "order %s: %s did not close the payment its customer started (%v); try again",
			o.OrderNo, o.IntentProvider, lapse.Reason(err))
	case pp.Status != lapse.ProviderPaid:
		return nil
	}
	raw, _ := json.Marshal(pp)
	n := &lapse.PaymentNotice{Provider: o.IntentProvider, Kind: lapse.NoticePaid, TxnID: pp.TxnID, OrderNo: o.OrderNo,
		Amount: pp.Amount, Currency: pp.Currency, Merchant: pp.Merchant, PaidAt: pp.PaidAt, Raw: raw}
	// The payment is the provider's doing, not the closer's action: it is
	// not the write the close's audit row goes with.
	if _, err := ps.apply(withoutAudit(context.WithoutCancel(ctx)), n); err != nil {
		return fmt.Errorf("order %s: %s reports a payment that cannot be recorded: %w", o.OrderNo, o.IntentProvider, err)
	}
	return nil
}
