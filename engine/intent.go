package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// Time bounds of the closer's questions to a payment provider.
const (
	// askTimeout bounds one Close call to a provider.
	askTimeout = 10 * time.Second
	// askRetry is how long an order waits before the provider is asked
	// again when it did not answer. A payment made meanwhile is still judged
	// against the order's PayBy.
	askRetry = 30 * time.Second
	// askLease is how far the closer moves the deadline of an order it is
	// asking about, in the claim's transaction, so that no other pass or
	// process claims it meanwhile.
	askLease = askTimeout + 5*time.Second
)

// StartPayment records that the customer of an order started paying through
// provider. Started before the deadline, it moves the deadline later by the
// flow's grace (with an order.deadline_changed event), so that a payment
// made meanwhile is applied rather than refunded, and makes the closer ask
// the provider before closing the order. Starting again returns the order
// as it is: the grace is given once.
//
// Errors: EINVALID for a provider with no port or a flow that takes no
// payments; ECONFLICT when the order's state takes no payment, its deadline
// has passed, or it was started with another provider; ENOTFOUND.
func (e *Engine) StartPayment(ctx context.Context, orderNo, provider string, by Actor) (*lapse.Order, error) {
	return e.feat.payments.start(ctx, orderNo, provider, by)
}

func (ps *payments) start(ctx context.Context, orderNo, provider string, by Actor) (*lapse.Order, error) {
	e := ps.e
	if ps.providers[provider] == nil {
		names := make([]string, 0, len(ps.providers))
		for n := range ps.providers {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, lapse.FieldError("provider", "no payment provider %q is configured (configured: %s)", provider, strings.Join(names, ", "))
	}
	var moved *lapse.Order
	var evs []lapse.OutboxEvent
	err := e.store.Tx(ctx, func(tx lapse.Store) error {
		evs = nil // of this run: a store's Tx may run fn again
		o, err := tx.OrderLock(ctx, orderNo)
		if err != nil {
			return err
		}
		flow, err := e.flows.of(o)
		if err != nil {
			return err
		}
		switch {
		case !ps.serves(flow):
			return lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which takes no payments", o.OrderNo, flow.Name)
		case flow.Transition(o.State, flow.Pays) == nil:
			return lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which takes no payment", o.OrderNo, o.State)
		case o.IntentAt != nil && o.IntentProvider != provider:
			return lapse.Errorf(lapse.ECONFLICT, "order %s: the customer started paying through %s", o.OrderNo, o.IntentProvider)
		case o.IntentAt != nil:
			moved = o
			return nil
		case o.DeadlineAt == nil:
			return lapse.Errorf(lapse.ECONFLICT, "order %s is %s, which has no payment window", o.OrderNo, o.State)
		}
		// Read after the lock, as SetDeadline does: a window that has closed
		// by now cannot be given its grace.
		now := e.clock.Now()
		if !now.Before(*o.DeadlineAt) {
			return lapse.Errorf(lapse.ECONFLICT, "order %s: its payment window closed at %s", o.OrderNo, o.DeadlineAt.Format(time.RFC3339Nano))
		}
		next := lapse.Ceil(o.DeadlineAt.Add(flow.Grace))
		after := *o
		after.DeadlineAt, after.Version, after.UpdatedAt, after.IntentAt, after.IntentProvider = &next, o.Version+1, now, &now, provider
		after.PayBy = &next
		evs = []lapse.OutboxEvent{lapse.NewDeadlineChangedEvent(&after, lapse.DeadlineMove{Previous: o.DeadlineAt, Next: &next,
			FiredBy: by.FiredBy, Actor: by.Name, Reason: fmt.Sprintf("payment started through %s: grace of %v", provider, flow.Grace)})}
		e.fanOut(o, evs)
		moved, err = tx.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State,
			FromVersion: o.Version, DeadlineAt: next, At: now, Outbox: evs, IntentAt: &now, IntentProvider: provider, PayBy: &next})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		e.deadlineSet(moved.ID, *moved.DeadlineAt)
		e.delivered(evs)
	}
	return moved, nil
}

// asksProvider reports whether the closer must ask a provider before firing
// o's deadline: its customer started paying, and its state takes payments.
func (ps *payments) asksProvider(o *lapse.Order) bool {
	e := ps.e
	if o.IntentAt == nil || o.IntentProvider == "" {
		return false
	}
	f := e.flows.get(o.Flow)
	return f != nil && ps.serves(f) && f.Transition(o.State, f.Pays) != nil
}

// settleIntent decides a due order whose customer started paying; o is the
// order as the claim leased it (its deadline moved by askLease). It asks the
// provider to close the payment, applies it if it was paid, and otherwise
// fires the order's deadline event, provided nothing changed the order
// since the lease. A provider that refuses the close for good
// (lapse.ErrRefused) is not asked again: the deadline fires and an open
// review tells an operator the provider's reason. A provider that does not
// answer leaves the order open, to be asked again after askRetry; a payment made meanwhile is still judged
// against PayBy. Every move is guarded by the order's version.
func (ps *payments) settleIntent(ctx context.Context, o *lapse.Order, path lapse.FiredBy) {
	e := ps.e
	log := e.log.With("order_no", o.OrderNo, "provider", o.IntentProvider)
	said := " closed the payment unpaid"
	var refused string // the provider's reason, when it refused the close for good
	if prov := ps.providers[o.IntentProvider]; prov != nil {
		actx, cancel := context.WithTimeout(ctx, askTimeout)
		pp, err := prov.Close(actx, o.OrderNo)
		cancel()
		if err == nil {
			err = answerAbout(o.IntentProvider, o.OrderNo, pp)
		}
		switch {
		case errors.Is(err, lapse.ErrProviderNotFound):
		case errors.Is(err, lapse.ErrRefused):
			// Asking again gets the same answer: the deadline decides, as
			// with no port to ask, and an operator is told why. A payment
			// made after it is late, refunded or reviewed.
			refused = lapse.Reason(err)
			said = " refused to close the payment (" + refused + ")"
			log.Warn("closer: the provider refused for good to close the payment; the deadline fires and an operator is told", "err", err)
		case err != nil:
			log.Warn("closer: the provider did not close the payment; the order stays open", "err", err, "retry_in", askRetry)
			ps.askAgain(ctx, o, err)
			return
		case pp.Status == lapse.ProviderPaid:
			raw, _ := json.Marshal(pp)
			n := &lapse.PaymentNotice{Provider: o.IntentProvider, Kind: lapse.NoticePaid, TxnID: pp.TxnID, OrderNo: o.OrderNo,
				Amount: pp.Amount, Currency: pp.Currency, Merchant: pp.Merchant, PaidAt: pp.PaidAt, Raw: raw}
			if _, err := ps.apply(ctx, n); err != nil {
				log.Error("closer: the provider reports a payment that cannot be recorded; the order stays open", "txn_id", pp.TxnID, "err", err)
				ps.askAgain(ctx, o, err)
				return
			}
		}
	} else {
		log.Warn("closer: no port for the provider the customer started paying with; closing without asking")
	}
	// Not paid (or paid late, and refunded): the deadline event fires, as
	// long as the order is as leased. A payment applied, or a deadline moved,
	// since then changed its version; the claimer sees it again if due.
	cur, err := e.store.OrderGet(ctx, o.OrderNo)
	if err != nil {
		log.Error("closer: cannot read the order", "err", err)
		return
	}
	flow := e.flows.get(cur.Flow)
	st := flow.State(cur.State)
	if cur.Version != o.Version || st == nil || st.Deadline == nil {
		return
	}
	now := e.clock.Now()
	p, err := flow.Plan(cur, lapse.Firing{Event: st.Deadline.Event, Now: now, FiredBy: path, Actor: "engine " + e.node,
		Reason: "deadline passed; " + cur.IntentProvider + said})
	if err != nil {
		log.Error("closer: cannot fire the deadline", "err", err)
		return
	}
	// Not retried when stale: the order moved since the lease, and is
	// claimed again if it is still due. A refused close's review commits
	// with the firing, or neither does.
	err = e.store.Tx(ctx, func(tx lapse.Store) error {
		if _, err := e.transition(ctx, tx, cur, p); err != nil {
			return err
		}
		if refused == "" {
			return nil
		}
		_, err := tx.ReviewCreate(ctx, &lapse.Review{OrderID: cur.ID, OrderNo: cur.OrderNo, CreatedAt: now,
			Reason: intentRefusedReason(cur, refused)})
		return err
	})
	if err != nil {
		if !errors.Is(err, lapse.ErrStale) {
			log.Error("closer: firing the deadline failed", "err", err)
		}
		return
	}
	e.committed(flow.Name, p)
	e.metrics.firings.WithLabelValues(string(path)).Inc()
	if cur.PayBy != nil {
		e.metrics.closed(flow.Name, now, *cur.PayBy)
	}
}

// answerAbout checks pp, provider's answer about the payment of order
// orderNo (to a close, a query or a charge under that number): one that
// names another order is no answer about this one, whatever it says (a
// port at odds with its contract; the HTTP provider refuses such an answer
// itself), and is an error wrapping lapse.ErrUnknownOutcome, as an answer
// that cannot be read is. Applied, another order's capture would pay this
// one (S3). So is a paid (or refunded) answer that names no transaction: a
// capture Lapse could never tell from another. An answer that names no
// order is taken as this order's.
func answerAbout(provider, orderNo string, pp *lapse.ProviderPayment) error {
	switch {
	case pp.OrderNo != "" && pp.OrderNo != orderNo:
		return fmt.Errorf("%w: %s answered about order %s with payment %s of order %q", lapse.ErrUnknownOutcome, provider, orderNo, pp.TxnID, pp.OrderNo)
	case pp.TxnID == "" && (pp.Status == lapse.ProviderPaid || pp.Status == lapse.ProviderRefunded):
		return fmt.Errorf("%w: %s answered about order %s with a %s payment that names no transaction", lapse.ErrUnknownOutcome, provider, orderNo, pp.Status)
	}
	return nil
}

// intentRefusedReason is the reason of the review of order o, closed at
// its deadline after its provider refused for good (why) to close the
// payment its customer started.
func intentRefusedReason(o *lapse.Order, why string) string {
	return lapse.CleanReason(fmt.Sprintf("%s refused for good to close the payment the customer started (%s); the order closed at its deadline; a payment made after it is late: check with %s that none is pending",
		o.IntentProvider, why, o.IntentProvider))
}

// askAgain moves the deadline of an order whose provider could not settle
// it to askRetry from now, saying why in its order.deadline_changed event.
func (ps *payments) askAgain(ctx context.Context, o *lapse.Order, why error) {
	e := ps.e
	now := e.clock.Now()
	next := now.Add(askRetry)
	after := *o
	after.DeadlineAt, after.Version, after.UpdatedAt = &next, o.Version+1, now
	evs := []lapse.OutboxEvent{lapse.NewDeadlineChangedEvent(&after, lapse.DeadlineMove{Previous: o.DeadlineAt, Next: &next,
		FiredBy: lapse.FiredByPayment, Actor: "engine " + e.node,
		Reason: fmt.Sprintf("%s could not settle the payment the customer started (%v); asking again", o.IntentProvider, lapse.Reason(why))})}
	e.fanOut(o, evs)
	_, err := e.store.OrderDeadlineSet(ctx, &lapse.OrderDeadlineSetParams{OrderID: o.ID, FromState: o.State, FromVersion: o.Version,
		DeadlineAt: next, At: now, Outbox: evs})
	if err != nil && !errors.Is(err, lapse.ErrStale) {
		e.log.Error("closer: cannot postpone the order", "order_no", o.OrderNo, "err", err)
		return
	}
	e.deadlineSet(o.ID, next)
	e.delivered(evs)
}
