package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// subscriptions returns the subscription that refunds late payments and
// asks providers for merchant refunds. It is there whether or not a
// provider port is configured, so that a merchant refund whose port was
// taken out of the configuration after it was requested goes to review
// rather than waiting for good (S3). A late payment that no port can
// refund never comes here: it is recorded in review (recordPayment).
func (ps *payments) subscriptions(flows []*lapse.Flow) []Subscription {
	events := []string{lapse.EventPaymentLate}
	for _, f := range flows {
		for _, t := range f.Transitions {
			if f.Refunds.Start != "" && t.Event == f.Refunds.Start {
				addNew(&events, t.Emits...)
			}
		}
	}
	return []Subscription{{
		Name:    RefundSubscriber,
		Events:  events,
		Flows:   flowNames(flows),
		Handler: refunder{ps},
		// Money going back: keep trying for about a day before an operator
		// is asked, as seed 003's schedule does for benefits.
		Schedule: lapse.Schedule{Steps: []time.Duration{
			time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
			2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 8 * time.Hour}, Jitter: 0.1},
		Concurrency: 4,
	}}
}

// refunder refunds late payments, and merchant refunds of paid orders,
// through their provider's port. The idempotency key is derived from the
// payment (or is the merchant refund's own), not the event, so that the same
// refund is made once however often it is asked for.
type refunder struct{ ps *payments }

var _ lapse.QueryHandler = refunder{}

// RefundKey is the idempotency key of the refund of a late payment.
func RefundKey(p *lapse.Payment) string {
	return "lapse-refund-" + p.Provider + "-" + p.TxnID
}

// current reads the payment of a delivery's event as it stands, and the port
// of its provider. A payment no longer late needs nothing: it is refunding
// or refunded already, or an operator has it.
func (r refunder) current(ctx context.Context, d *lapse.Delivery) (*lapse.Payment, lapse.PaymentProvider, error) {
	p, err := lapse.EventPayment(d.Event)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", lapse.ErrRefused, err)
	}
	cur, err := r.ps.e.store.PaymentGet(ctx, p.Provider, p.TxnID)
	if err != nil {
		return nil, nil, err
	}
	prov := r.ps.providers[cur.Provider]
	if prov == nil {
		return cur, nil, fmt.Errorf("%w: no payment provider port is configured for %s", lapse.ErrRefused, cur.Provider)
	}
	return cur, prov, nil
}

// Deliver asks the provider to refund a late payment, or how a refund it
// accepted is doing, and records the answer. A refund still processing is
// asked about again on the retry schedule; one that never finishes dies
// into manual review like any delivery.
func (r refunder) Deliver(ctx context.Context, d *lapse.Delivery) error {
	if d.EventType != lapse.EventPaymentLate {
		return r.deliverOrderRefunds(ctx, d)
	}
	pay, prov, err := r.current(ctx, d)
	if pay != nil && pay.Status == lapse.PaymentLate && errors.Is(err, lapse.ErrRefused) {
		return r.review(ctx, pay, "refund refused: "+lapse.Reason(err))
	}
	if err != nil {
		return err
	}
	var ref *lapse.ProviderRefund
	switch pay.Status {
	case lapse.PaymentLate:
		ref, err = prov.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: RefundKey(pay), TxnID: pay.TxnID, OrderNo: pay.OrderNo,
			Amount: pay.Amount, Currency: pay.Currency, Reason: "late payment: " + pay.Reason})
	case lapse.PaymentRefunding:
		ref, err = prov.RefundQuery(ctx, RefundKey(pay))
	default:
		return nil // refunded, or an operator has it
	}
	if err == nil {
		err = r.record(ctx, pay, ref)
	}
	var dis *refundDisagreement
	switch {
	case errors.As(err, &dis):
		return r.review(ctx, pay, dis.why)
	case errors.Is(err, lapse.ErrRefused):
		return r.review(ctx, pay, "refund refused: "+lapse.Reason(err))
	}
	return err
}

// review hands a payment that cannot be refunded (the provider refused, or
// reports another refund than the one asked for, or no port is configured
// for it) to an operator: the payment moves to review with why and a
// payment.review event, and its delivery is done.
func (r refunder) review(ctx context.Context, pay *lapse.Payment, why string) error {
	e := r.ps.e
	o, err := e.store.OrderGet(ctx, pay.OrderNo)
	if err != nil {
		return err
	}
	now := e.clock.Now()
	after := *pay
	after.Status, after.Reason, after.UpdatedAt = lapse.PaymentReview, lapse.CleanReason(why), now
	evs := []lapse.OutboxEvent{lapse.NewPaymentEvent(lapse.EventPaymentReview, o, &after)}
	e.fanOut(o, evs)
	_, err = e.store.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: pay.Status, To: lapse.PaymentReview,
		Reason: after.Reason, At: now, Outbox: evs, Review: paymentReview(o, &after, now)})
	if errors.Is(err, lapse.ErrStale) {
		return nil
	}
	if err == nil {
		e.log.Warn("payment handed to an operator: its refund did not go through", "order_no", pay.OrderNo, "txn_id", pay.TxnID, "reason", why)
		e.metrics.payments.WithLabelValues(pay.Provider, string(lapse.PaymentReview)).Inc()
		e.metrics.refunds.WithLabelValues(refundLatePayment, refundReview).Inc()
		e.delivered(evs)
	}
	return err
}

// Query asks the provider whether an attempt whose answer was lost made the
// refund. A refund made and finished is recorded and the delivery is done;
// one made and still processing is recorded, and the next attempt follows
// it up under the same key. One the provider reports for another amount,
// currency or payment puts the payment in review, and the delivery is done.
func (r refunder) Query(ctx context.Context, d *lapse.Delivery) (bool, error) {
	if d.EventType != lapse.EventPaymentLate {
		return r.queryOrderRefunds(ctx, d)
	}
	pay, prov, err := r.current(ctx, d)
	if err != nil {
		return false, err
	}
	if pay.Status != lapse.PaymentLate && pay.Status != lapse.PaymentRefunding {
		return true, nil
	}
	ref, err := prov.RefundQuery(ctx, RefundKey(pay))
	if errors.Is(err, lapse.ErrProviderNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if ref.Status != lapse.RefundSucceeded && ref.Status != lapse.RefundProcessing {
		return false, nil // asked again, a refusal puts the payment in review
	}
	err = r.record(ctx, pay, ref)
	var dis *refundDisagreement
	switch {
	case errors.As(err, &dis):
		return true, r.review(ctx, pay, dis.why)
	case ref.Status == lapse.RefundProcessing:
		return false, nil // recorded refunding; the error says "still processing"
	}
	return true, err
}

// record moves a payment as the provider's answer about its refund says:
// refunded when it succeeded, refunding (and an error, so that it is asked
// again) while it processes. Someone else having moved the payment first
// (the refund's callback) is not an error. An answer about another refund
// than the whole payment's moves nothing: its error is a
// *refundDisagreement.
func (r refunder) record(ctx context.Context, pay *lapse.Payment, ref *lapse.ProviderRefund) error {
	e := r.ps.e
	if err := reportDisagrees(pay.Provider, RefundKey(pay), ref, pay.TxnID, pay.Amount, pay.Currency); err != nil {
		return err
	}
	switch ref.Status {
	case lapse.RefundSucceeded:
		_, err := r.ps.paymentRefunded(ctx, pay, ref.RefundID)
		if errors.Is(err, lapse.ErrStale) {
			return nil
		}
		return err
	case lapse.RefundProcessing:
		if pay.Status == lapse.PaymentLate {
			_, err := e.store.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: lapse.PaymentLate, To: lapse.PaymentRefunding,
				RefundID: ref.RefundID, At: e.clock.Now()})
			if err != nil && !errors.Is(err, lapse.ErrStale) {
				return err
			}
			if err == nil {
				e.metrics.payments.WithLabelValues(pay.Provider, string(lapse.PaymentRefunding)).Inc()
			}
		}
		return fmt.Errorf("refund %s of payment %s is still processing at %s", ref.RefundID, pay.TxnID, pay.Provider)
	}
	return fmt.Errorf("%w: %s refused refund %s of payment %s (status %q)", lapse.ErrRefused, pay.Provider, ref.RefundID, pay.TxnID, ref.Status)
}

// A provider's report about a refund (its answer to the refund, to a
// query-back, or a refund callback) completes the refund Lapse asked for
// only when it is about that refund: of the same payment, for the same
// amount, in the same currency. A report of another refund (the provider
// gave back more or less than asked, a port mixed two refunds up, an answer
// was forged) would have the books say that money went back which did
// not, or miss money that did (S3). Asking again brings the same report,
// so nothing moves and an operator gets it in review.
//
// A report without an amount cannot be checked, so it completes nothing
// either: every port gives one (the generic protocol requires it). A report
// without a currency or a payment is taken to be in those of the refund
// asked for, as the protocol makes the currency optional and the refund was
// asked under its own idempotency key. Answers are checked here
// (reportDisagrees); callbacks by noticeConflict and noticeDisagrees.

// refundDisagreement is the error of a provider's report about a refund
// that is not the refund Lapse asked for. It wraps lapse.ErrRefused, as
// asking again would bring the same report: a delivery that fails with it
// dies into review at once.
type refundDisagreement struct{ why string }

func (d *refundDisagreement) Error() string { return d.why }
func (d *refundDisagreement) Unwrap() error { return lapse.ErrRefused }

// refundIDTaken returns a *refundDisagreement when ref, the provider's
// report about merchant refund x, gives as its refund id the id or the key
// of another of refunds (x's order's): it is a report of that refund, not of
// x, even when it is of the same payment and amount (a gateway that takes a
// second refund of the same amount for the first one sent again, a port
// that mixes two keys up). Completing x with it would have the books say
// that the money went back twice when it went back once (S3).
func refundIDTaken(x *lapse.OrderRefund, ref *lapse.ProviderRefund, refunds []*lapse.OrderRefund) error {
	if ref.RefundID == "" || ref.RefundID == x.RefundID || ref.RefundID == x.Key {
		return nil
	}
	for _, y := range refunds {
		if y.ID != x.ID && y.Provider == x.Provider && (y.RefundID == ref.RefundID || y.Key == ref.RefundID) {
			return &refundDisagreement{fmt.Sprintf("%s reports refund %s %s under refund id %s, which is the id of Lapse's refund %s (%s, %s): a report of that refund, not of %s",
				x.Provider, x.Key, ref.Status, ref.RefundID, y.Key, lapse.Money(y.Amount, y.Currency), y.Status, x.Key)}
		}
	}
	return nil
}

// reportDisagrees returns a *refundDisagreement, naming what provider
// reported and what Lapse asked for, when ref, provider's report about the
// refund under key, is not about a refund of amount in currency of payment
// txnID; nil when it is.
func reportDisagrees(provider, key string, ref *lapse.ProviderRefund, txnID string, amount int64, currency string) error {
	cur, txn := cmp.Or(ref.Currency, currency), cmp.Or(ref.TxnID, txnID)
	if ref.Amount == amount && cur == currency && txn == txnID {
		return nil
	}
	said, asked := "for "+lapse.Money(ref.Amount, cur), lapse.Money(amount, currency)
	if ref.Amount == 0 {
		said = "without an amount"
	}
	if txn != txnID {
		said, asked = said+" of payment "+txn, asked+" of payment "+txnID
	}
	id := key
	if ref.RefundID != "" && ref.RefundID != key {
		id += " (" + ref.RefundID + ")"
	}
	return &refundDisagreement{fmt.Sprintf("%s reports refund %s %s %s; Lapse asked for %s", provider, id, ref.Status, said, asked)}
}
