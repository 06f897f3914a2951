package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

// RefundRequest asks for a merchant refund of a paid order.
type RefundRequest struct {
	Amount int64  // minor units, at most what the order captured and has not refunded
	Reason string // for the provider and the transition log
	// Key makes the request idempotent: the same key again returns the same
	// refund. Default: a key of Lapse's making (no idempotency across calls).
	Key string
	By  Actor
}

// RefundOrder refunds part or all of what a paid order captured, through the
// provider of the payment that paid it. The order moves PAID → REFUNDING
// with the refund recorded in the same transaction; the refund subscriber
// asks the provider (idempotent on the refund's key) and, once the provider
// confirms, the order ends REFUNDED when all it captured went back, or PAID
// again after a partial refund (or one the provider refused). Refunds never
// exceed what was captured. A refund the provider reports for another
// amount, currency or payment completes nothing: the refund is in review,
// and the order waits, refunding, for an operator (SettleReview).
//
// Errors, with nothing written: EINVALID for a bad amount, reason or key, or
// a flow without refunds; ECONFLICT when the order is not paid, has no
// applied payment, the amount exceeds what is left, or the key was used for
// another refund; ENOTFOUND.
func (e *Engine) RefundOrder(ctx context.Context, orderNo string, req RefundRequest) (ref *lapse.OrderRefund, created bool, err error) {
	return e.feat.payments.refundOrder(ctx, orderNo, req)
}

func (ps *payments) refundOrder(ctx context.Context, orderNo string, req RefundRequest) (ref *lapse.OrderRefund, created bool, err error) {
	e := ps.e
	if err := lapse.CheckReason("reason", req.Reason); err != nil {
		return nil, false, err
	}
	if err := checkIdempotencyKey(req.Key); err != nil {
		return nil, false, err
	}
	switch {
	case req.Amount <= 0:
		return nil, false, lapse.FieldError("amount", "must be a positive number of minor units")
	case strings.HasPrefix(req.Key, "lapse-"):
		// Lapse's own keys (late-payment refunds) start so; a merchant key
		// must not name one of them to the provider.
		return nil, false, lapse.FieldError("Idempotency-Key", "must not start with lapse-, which Lapse's own refunds use")
	}
	ref, err = changeOrder(ctx, e, orderChange{orderNo: orderNo}, func(s lapse.Store, o *lapse.Order, flow *lapse.Flow) (*lapse.OrderRefund, error) {
		created = false
		if flow.Refunds.Start == "" {
			return nil, lapse.Errorf(lapse.EINVALID, "order %s follows flow %s, which has no refunds", o.OrderNo, flow.Name)
		}
		refunds, err := s.OrderRefundList(ctx, o.ID)
		if err != nil {
			return nil, err
		}
		if req.Key != "" {
			for _, r := range refunds {
				if r.Key != req.Key {
					continue
				}
				if err := sameRefund(r, o, req); err != nil {
					return nil, err
				}
				return r, nil
			}
		}
		now := e.clock.Now()
		p, err := flow.Plan(o, lapse.Firing{Event: flow.Refunds.Start, Now: now, FiredBy: req.By.FiredBy, Actor: req.By.Name, Reason: req.Reason})
		if err != nil {
			return nil, err
		}
		pays, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID, Status: lapse.PaymentApplied})
		if err != nil {
			return nil, err
		}
		if len(pays) != 1 {
			return nil, lapse.Errorf(lapse.ECONFLICT, "order %s has %d applied payments; a refund needs the one that paid it", o.OrderNo, len(pays))
		}
		pay := pays[0]
		if ps.providers[pay.Provider] == nil {
			return nil, lapse.Errorf(lapse.ECONFLICT, "order %s was paid through %s, which has no provider port here to refund it", o.OrderNo, pay.Provider)
		}
		left := pay.Amount
		for _, r := range refunds {
			if r.Status != lapse.OrderRefundFailed {
				left -= r.Amount
			}
		}
		if req.Amount > left {
			return nil, lapse.Errorf(lapse.ECONFLICT, "a refund of %s exceeds the %s left of the %s order %s captured",
				lapse.Money(req.Amount, pay.Currency), lapse.Money(left, pay.Currency), lapse.Money(pay.Amount, pay.Currency), o.OrderNo)
		}
		key := req.Key
		if key == "" {
			key = "lapse-refund-" + lapse.NewEventID(now)
		}
		want := &lapse.OrderRefund{OrderID: o.ID, OrderNo: o.OrderNo, PaymentID: pay.ID, Provider: pay.Provider, TxnID: pay.TxnID,
			Amount: req.Amount, Currency: pay.Currency, Reason: req.Reason, Key: key, Status: lapse.OrderRefundRequested, CreatedAt: now}
		var got *lapse.OrderRefund
		err = s.Tx(ctx, func(tx lapse.Store) error {
			var err error
			got, created, err = tx.OrderRefundCreate(ctx, want)
			if err != nil || !created {
				return err
			}
			_, err = e.transition(ctx, tx, o, p)
			return err
		})
		if err != nil {
			return nil, err
		}
		if !created {
			// Made meanwhile under the same key, by a request that read
			// the order before this one: it is answered as if it came
			// after, as the read above would have answered it.
			if got.OrderID != o.ID {
				return nil, lapse.Refine(lapse.ErrOrderRefundExists, "refund key %s is taken", key)
			}
			if err := sameRefund(got, o, req); err != nil {
				return nil, err
			}
			return got, nil
		}
		e.committed(flow.Name, p)
		return got, nil
	})
	if err != nil {
		return nil, false, err
	}
	return ref, created, nil
}

// sameRefund says whether req, a request under the key of r, refund of
// order o, asks for r: nil when it does, an error wrapping
// lapse.ErrOrderRefundExists when it asks for another amount or reason
// (the reason kept would not be the one the caller thinks it gave).
func sameRefund(r *lapse.OrderRefund, o *lapse.Order, req RefundRequest) error {
	switch {
	case r.Amount != req.Amount:
		return lapse.Refine(lapse.ErrOrderRefundExists, "refund %s of order %s is for %s, not %s", r.Key, o.OrderNo, lapse.Money(r.Amount, o.Currency), lapse.Money(req.Amount, o.Currency))
	case r.Reason != req.Reason:
		return lapse.Refine(lapse.ErrOrderRefundExists, "refund %s of order %s was asked with another reason", r.Key, o.OrderNo)
	}
	return nil
}

// OrderRefunds returns the merchant refunds of an order, oldest first.
func (e *Engine) OrderRefunds(ctx context.Context, orderNo string) ([]*lapse.OrderRefund, error) {
	return e.feat.payments.refunds(ctx, orderNo)
}

func (ps *payments) refunds(ctx context.Context, orderNo string) ([]*lapse.OrderRefund, error) {
	e := ps.e
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	return e.store.OrderRefundList(ctx, o.ID)
}

// recordOrderRefund moves a requested refund as the provider's answer says.
// A refund still processing is an error, so that it is asked about again.
// ref is about r: the caller checked that it is of r's payment, amount and
// currency.
func (ps *payments) recordOrderRefund(ctx context.Context, r *lapse.OrderRefund, ref *lapse.ProviderRefund, why string) error {
	e := ps.e
	to := lapse.OrderRefundSucceeded
	switch ref.Status {
	case lapse.RefundSucceeded:
	case lapse.RefundFailed:
		to = lapse.OrderRefundFailed
		if why == "" {
			why = fmt.Sprintf("%s reports refund %s failed", r.Provider, cmp.Or(ref.RefundID, r.Key))
		}
		e.log.Warn("the provider refused a refund; the order is paid again", "order_no", r.OrderNo, "key", r.Key, "provider", r.Provider)
	default:
		// Keep the provider's refund id, which its refund callback may name.
		if ref.RefundID != "" && r.RefundID == "" {
			err := ps.orderRefundUpdate(ctx, r, ref, &lapse.OrderRefundUpdateParams{ID: r.ID, From: lapse.OrderRefundRequested,
				To: lapse.OrderRefundRequested, RefundID: ref.RefundID, At: e.clock.Now()})
			var dis *refundDisagreement
			switch {
			case errors.As(err, &dis):
				return ps.refundDisputed(ctx, r, nil, dis.why)
			case err != nil && !errors.Is(err, lapse.ErrStale):
				return err
			}
		}
		return fmt.Errorf("refund %s of order %s is still processing at %s", r.Key, r.OrderNo, r.Provider)
	}
	err := ps.orderRefundUpdate(ctx, r, ref, &lapse.OrderRefundUpdateParams{ID: r.ID, From: lapse.OrderRefundRequested, To: to,
		RefundID: ref.RefundID, Failure: why, At: e.clock.Now()})
	var dis *refundDisagreement
	if errors.As(err, &dis) {
		return ps.refundDisputed(ctx, r, nil, dis.why)
	}
	if errors.Is(err, lapse.ErrStale) {
		return nil // the refund's callback recorded it first
	}
	if err == nil {
		result := refundSucceeded
		if to == lapse.OrderRefundFailed {
			result = refundFailed
		}
		e.metrics.refunds.WithLabelValues(refundOrder, result).Inc()
	}
	return err
}

// orderRefundUpdate records p, a move of merchant refund r on ref, the
// provider's report about it, unless ref gives as its refund id that of
// another refund of r's order (refundIDTaken): then it writes nothing and
// returns the *refundDisagreement. The check and the write hold the order's
// lock, so that of two reports recorded at once (two deliveries of the
// order's refunds), the later sees the refund id the earlier recorded.
func (ps *payments) orderRefundUpdate(ctx context.Context, r *lapse.OrderRefund, ref *lapse.ProviderRefund, p *lapse.OrderRefundUpdateParams) error {
	return ps.e.store.Tx(ctx, func(tx lapse.Store) error {
		if _, err := tx.OrderLock(ctx, r.OrderNo); err != nil {
			return err
		}
		refunds, err := tx.OrderRefundList(ctx, r.OrderID)
		if err != nil {
			return err
		}
		if dis := refundIDTaken(r, ref, refunds); dis != nil {
			return dis
		}
		_, err = tx.OrderRefundUpdate(ctx, p)
		return err
	})
}

// settleOrderRefund ends a refunding order once none of its refunds is
// still requested or in review (settlePlan). It reports whether none is
// left for the provider to answer: a refund in review is an operator's to
// settle (SettleReview), which ends the order then.
//
// Refunds move without moving their order (a provider's answer, an
// operator's settling), and each mover then settles: it plans with the
// order locked (orderChange.locked), as SettleReview does, so that of two
// movers at once the later sees the earlier's refund moved. Planned
// unlocked, each could read the other's refund as it was before, both
// find one still unsettled, and the order would stay refunding for ever.
func (ps *payments) settleOrderRefund(ctx context.Context, orderNo string) (bool, error) {
	e := ps.e
	var p *lapse.OrderTransitionParams
	var flow *lapse.Flow
	done, err := changeOrder(ctx, e, orderChange{orderNo: orderNo, locked: true}, func(s lapse.Store, o *lapse.Order, f *lapse.Flow) (bool, error) {
		var requested bool
		var err error
		flow = f
		p, requested, err = ps.settlePlan(ctx, s, o, flow, lapse.FiredByPayment, "engine "+e.node)
		if err != nil || p == nil {
			return !requested, err
		}
		if _, err := e.transition(ctx, s, o, p); err != nil {
			return false, err
		}
		return true, nil
	})
	if err == nil && p != nil {
		e.committed(flow.Name, p)
	}
	return done, err
}

// settlePlan plans the end of refunding order o, read through s, fired by
// who: refunded when everything its payment captured went back, paid again
// otherwise. It plans nothing (nil) when o is not refunding, or while one of
// its refunds is requested (then requested is true) or in review: until an
// operator settles that one, Lapse cannot tell whether all went back.
func (ps *payments) settlePlan(ctx context.Context, s lapse.Store, o *lapse.Order, flow *lapse.Flow, by lapse.FiredBy, who string) (p *lapse.OrderTransitionParams, requested bool, err error) {
	refunds, err := s.OrderRefundList(ctx, o.ID)
	if err != nil {
		return nil, false, err
	}
	var refunded, captured int64
	review := false
	for _, r := range refunds {
		switch r.Status {
		case lapse.OrderRefundRequested:
			return nil, true, nil
		case lapse.OrderRefundReview:
			review = true
		case lapse.OrderRefundSucceeded:
			refunded += r.Amount
		}
	}
	if review || flow.Refunds.Start == "" || flow.Transition(o.State, flow.Refunds.Done) == nil {
		return nil, false, nil // an operator's, or not refunding (settled already)
	}
	pays, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID, Status: lapse.PaymentApplied})
	if err != nil {
		return nil, false, err
	}
	for _, p := range pays {
		captured += p.Amount
	}
	ev, why := flow.Refunds.Partial, fmt.Sprintf("refunded %s of %s", lapse.Money(refunded, o.Currency), lapse.Money(captured, o.Currency))
	if refunded >= captured {
		ev, why = flow.Refunds.Done, fmt.Sprintf("refunded all %s", lapse.Money(captured, o.Currency))
	}
	p, err = flow.Plan(o, lapse.Firing{Event: ev, Now: ps.e.clock.Now(), FiredBy: by, Actor: who, Reason: why})
	return p, false, err
}

// deliverOrderRefunds asks the provider for every refund of the order that
// is still requested, then settles the order. An answer about another
// refund than the one asked for puts that refund in review.
func (r refunder) deliverOrderRefunds(ctx context.Context, d *lapse.Delivery) error {
	ps, e := r.ps, r.ps.e
	o, err := e.store.OrderGet(ctx, d.OrderNo)
	if err != nil {
		return err
	}
	refunds, err := e.store.OrderRefundList(ctx, o.ID)
	if err != nil {
		return err
	}
	asked := map[int64]bool{}
	for _, x := range refunds {
		if x.Status != lapse.OrderRefundRequested {
			continue
		}
		asked[x.ID] = true
		prov := ps.providers[x.Provider]
		if prov == nil {
			// Requested while its provider had a port (RefundOrder
			// refuses one without), which was taken out of the
			// configuration since: an attempt may have reached the
			// provider before, and nothing here can ask it. Recording the
			// refund failed would say the money is still the merchant's.
			why := fmt.Sprintf("no payment provider port is configured for %s: whether refund %s was made cannot be asked", x.Provider, x.Key)
			if err := ps.refundDisputed(ctx, x, nil, why); err != nil {
				return err
			}
			continue // the order waits, refunding, for an operator
		}
		ref, err := prov.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: x.Key, TxnID: x.TxnID, OrderNo: x.OrderNo,
			Amount: x.Amount, Currency: x.Currency, Reason: x.Reason})
		why := ""
		if errors.Is(err, lapse.ErrRefused) {
			// Refused for good: the refund failed, and the order is paid again.
			e.log.Warn("the provider refused a refund", "order_no", x.OrderNo, "key", x.Key, "err", err)
			ref, why, err = &lapse.ProviderRefund{TxnID: x.TxnID, Amount: x.Amount, Status: lapse.RefundFailed}, lapse.Reason(err), nil
		}
		if err != nil {
			return err
		}
		if dis := reportDisagrees(x.Provider, x.Key, ref, x.TxnID, x.Amount, x.Currency); dis != nil {
			if err := ps.refundDisputed(ctx, x, nil, dis.Error()); err != nil {
				return err
			}
			continue // the order waits, refunding, for an operator
		}
		if err := ps.recordOrderRefund(ctx, x, ref, why); err != nil {
			return err
		}
	}
	done, err := ps.settleOrderRefund(ctx, d.OrderNo)
	if err == nil && !done {
		// A refund still requested that this delivery did not ask about
		// was made since (the order was paid again, by a callback, and
		// refunded anew): its own refunding event's delivery, which comes
		// after this one, asks about it. Failing here would hold that one
		// back behind this one's retry.
		if refunds, err = e.store.OrderRefundList(ctx, o.ID); err != nil {
			return err
		}
		for _, x := range refunds {
			if x.Status == lapse.OrderRefundRequested && asked[x.ID] {
				return fmt.Errorf("order %s still has refunds waiting for their provider", d.OrderNo)
			}
		}
	}
	return err
}

// queryOrderRefunds asks the provider about refunds whose request may have
// been lost, and records those it made. It reports true once none is left
// requested; otherwise the next attempt asks again under the same keys. An
// answer about another refund than the one asked for puts that refund in
// review.
func (r refunder) queryOrderRefunds(ctx context.Context, d *lapse.Delivery) (bool, error) {
	ps, e := r.ps, r.ps.e
	o, err := e.store.OrderGet(ctx, d.OrderNo)
	if err != nil {
		return false, err
	}
	refunds, err := e.store.OrderRefundList(ctx, o.ID)
	if err != nil {
		return false, err
	}
	for _, x := range refunds {
		prov := ps.providers[x.Provider]
		if x.Status != lapse.OrderRefundRequested || prov == nil {
			continue
		}
		ref, err := prov.RefundQuery(ctx, x.Key)
		if errors.Is(err, lapse.ErrProviderNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if dis := reportDisagrees(x.Provider, x.Key, ref, x.TxnID, x.Amount, x.Currency); dis != nil {
			if err := ps.refundDisputed(ctx, x, nil, dis.Error()); err != nil {
				return false, err
			}
			continue // the order waits, refunding, for an operator
		}
		if ref.Status == lapse.RefundProcessing {
			return false, nil
		}
		if err := ps.recordOrderRefund(ctx, x, ref, ""); err != nil {
			return false, err
		}
	}
	return ps.settleOrderRefund(ctx, d.OrderNo)
}

// orderRefundNoticed records a refund the provider reports done for an
// applied payment: a merchant refund of its order, found by its key or the
// provider's refund id. A notice that says another amount than Lapse holds
// for a refund requested, or reports done a refund Lapse recorded failed
// (noticeDisagrees), completes nothing: the refund goes to review
// (refundDisputed). One that contradicts a refund that succeeded, or one in
// review, is put on the desk beside it, once however often it comes; one
// that agrees with a refund in review changes nothing, as only an operator
// settles that. A notice whose refund id names none is matched by asking
// the provider after Lapse's refunds that have no answer yet
// (refundByQuery); one that matches no refund so either is of a refund
// Lapse never asked for (unaskedRefund).
func (ps *payments) orderRefundNoticed(ctx context.Context, pay *lapse.Payment, n *lapse.PaymentNotice) error {
	e := ps.e
	refunds, err := e.store.OrderRefundList(ctx, pay.OrderID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(refunds, func(x *lapse.OrderRefund) bool {
		return x.PaymentID == pay.ID && (x.Key == n.RefundID || x.RefundID != "" && x.RefundID == n.RefundID)
	})
	if i < 0 {
		if i, err = ps.refundByQuery(ctx, pay, n, refunds); err != nil {
			return err
		}
	}
	if i < 0 {
		return ps.unaskedRefund(ctx, pay, n, refunds)
	}
	x := refunds[i]
	why := noticeDisagrees(n, x, refunds[:i])
	switch {
	case why != "":
		return ps.refundDisputed(ctx, x, n, why)
	case x.Status == lapse.OrderRefundRequested:
		// The notice's amount is x's, as checked above.
		if err := ps.recordOrderRefund(ctx, x, &lapse.ProviderRefund{RefundID: n.RefundID, TxnID: pay.TxnID, Amount: x.Amount,
			Currency: n.Currency, Status: lapse.RefundSucceeded}, ""); err != nil {
			return err
		}
	}
	_, err = ps.settleOrderRefund(ctx, pay.OrderNo)
	return err
}

// refundByQuery returns the index in refunds (pay's order's) of the refund
// of Lapse's that n, a refund notice naming none of them by its id,
// reports, or -1. The notice can overtake the record of a refund's own
// answer: the process that asked for it stopped between the provider's
// refund and its record. Taken for a refund Lapse did not ask for, the
// money would be counted twice. So each refund of pay that Lapse asked for
// and has no answer to yet (requested, no refund id recorded), of n's
// amount and currency, is asked after at its provider, under its key; the
// one whose refund is n's is n's. A provider that cannot say now makes it
// EUNAVAILABLE, so that the notice is sent again. A provider's total (what
// it refunded in all) and a dispute's withdrawal name no refund of
// Lapse's, and are not asked after.
func (ps *payments) refundByQuery(ctx context.Context, pay *lapse.Payment, n *lapse.PaymentNotice, refunds []*lapse.OrderRefund) (int, error) {
	if n.RefundedTotal || n.Review != "" {
		return -1, nil
	}
	for i, x := range refunds {
		prov := ps.providers[x.Provider]
		if x.PaymentID != pay.ID || x.Status != lapse.OrderRefundRequested || x.RefundID != "" || x.Amount != n.Amount ||
			x.Currency != n.Currency || prov == nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, askTimeout)
		pr, err := prov.RefundQuery(actx, x.Key)
		cancel()
		switch {
		case errors.Is(err, lapse.ErrProviderNotFound):
		case err != nil:
			return -1, lapse.Errorf(lapse.EUNAVAILABLE, "refund %s of payment %s: Lapse's refund %s of the same amount is under way, and %s could not say now whether it is that one (%s); send it again",
				n.RefundID, pay.TxnID, x.Key, x.Provider, lapse.Reason(err))
		case pr.RefundID == n.RefundID:
			return i, nil
		}
	}
	return -1, nil
}

// refundDisputed puts refund x in review, with a review that holds it
// naming why: a report about it (n, a callback; nil for an answer to the
// refund or a query) disagrees with what Lapse asked for or recorded. Only
// a refund requested or failed moves: one that succeeded, or that is in
// review already, keeps its status, and the report is put on the desk
// beside it, on its payment, unless the review that holds it says so.
func (ps *payments) refundDisputed(ctx context.Context, x *lapse.OrderRefund, n *lapse.PaymentNotice, why string) error {
	e := ps.e
	for range maxStaleRetries {
		if x.Status != lapse.OrderRefundRequested && x.Status != lapse.OrderRefundFailed {
			open, err := e.store.ReviewList(ctx, &lapse.ReviewListParams{OrderID: x.OrderID, Open: true})
			if err != nil || x.Status == lapse.OrderRefundReview && hasReason(open, refundReviewReason(x, why)) {
				return err
			}
			pay, err := e.store.PaymentGet(ctx, x.Provider, x.TxnID)
			if err != nil {
				return err
			}
			_, err = ps.conflicting(ctx, pay, n, nil, why)
			return err
		}
		now := e.clock.Now()
		_, err := e.store.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: x.ID, From: x.Status, To: lapse.OrderRefundReview, At: now,
			Review: &lapse.Review{OrderID: x.OrderID, OrderNo: x.OrderNo, Reason: refundReviewReason(x, why), CreatedAt: now}})
		if err == nil {
			e.log.Error("merchant refund handed to an operator: a report about it disagrees", "order_no", x.OrderNo, "key", x.Key,
				"provider", x.Provider, "was", x.Status, "reason", why)
			e.metrics.refunds.WithLabelValues(refundOrder, refundReview).Inc()
			return nil
		}
		if !errors.Is(err, lapse.ErrStale) {
			return err
		}
		if x, err = ps.refundNow(ctx, x.OrderID, x.OrderNo, x.ID); err != nil {
			return err
		}
	}
	return fmt.Errorf("refund %s of order %s: %w", x.Key, x.OrderNo, lapse.ErrStale)
}

// refundReviewReason is the reason of the review that holds refund x, in
// review because of why.
func refundReviewReason(x *lapse.OrderRefund, why string) string {
	return lapse.CleanReason(fmt.Sprintf("refund %s of order %s (%s) is in review: %s; an operator settles it as succeeded or failed",
		x.Key, x.OrderNo, lapse.Money(x.Amount, x.Currency), why))
}

// refundNow reads refund id of order orderNo (orderID) as it stands.
func (ps *payments) refundNow(ctx context.Context, orderID int64, orderNo string, id int64) (*lapse.OrderRefund, error) {
	refunds, err := ps.e.store.OrderRefundList(ctx, orderID)
	if err != nil {
		return nil, err
	}
	for _, r := range refunds {
		if r.ID == id {
			return r, nil
		}
	}
	return nil, lapse.Errorf(lapse.EINTERNAL, "order %s has no refund %d", orderNo, id)
}

// disputeKeyPrefix begins the key of a refund recorded for money the
// provider took back itself (a dispute's withdrawal), not refunded.
const disputeKeyPrefix = "lapse-dispute-"

// unaskedRefund records a refund the provider reports done for applied
// payment pay that matches none of refunds, its order's, that Lapse asked
// for: one made in the provider's dashboard, say. Money left the merchant,
// so it goes on the books as a refund in review of what the notice says it
// gave back, with a review that holds it, and its order does not move: an
// operator settles it, succeeded or failed; settled succeeded, once it and
// the order's other refunds gave back all the order captured, the order
// ends refunded (refundedOutside). A notice of what the payment
// has had refunded in all (RefundedTotal) gave back only what Lapse's
// refunds of the payment (not failed) do not explain, and records nothing
// when they explain it all. The refund's key is made of the payment's id,
// the provider's refund id, and the total for a notice of one, so that the
// same report again records nothing. A provider's refund ids need not be
// unique beyond their payment (Alipay's out_biz_no is unique within its
// trade), and refund keys are unique across orders: without the payment's
// id, a second payment's refund under the same id met the first's key and
// was recorded nowhere. A notice with a Review (the provider took the
// money back itself, a dispute lost) has it lead the review's reason, and
// its refund's key begins disputeKeyPrefix: a provider's total of what it
// refunded does not count what it took back so, and is not explained by it.
func (ps *payments) unaskedRefund(ctx context.Context, pay *lapse.Payment, n *lapse.PaymentNotice, refunds []*lapse.OrderRefund) error {
	e := ps.e
	amount, refundID := n.Amount, n.RefundID
	key := "lapse-unasked-" + strconv.FormatInt(pay.ID, 10) + "-" + n.Provider + "-" + n.RefundID
	said := fmt.Sprintf("%s reports refund %s of payment %s done, %s refunded; Lapse asked for no such refund",
		n.Provider, n.RefundID, pay.TxnID, lapse.Money(n.Amount, pay.Currency))
	reason := "reported by " + n.Provider + ", not asked for by Lapse"
	if n.Review != "" {
		key = disputeKeyPrefix + strings.TrimPrefix(key, "lapse-unasked-")
		reason = "taken back by " + n.Provider + " (a dispute), not asked for by Lapse"
	}
	if n.RefundedTotal {
		for _, r := range refunds {
			// What a provider took back itself (a dispute) is not in
			// what it reports refunded (Stripe's amount_refunded).
			if r.PaymentID == pay.ID && r.Status != lapse.OrderRefundFailed && !strings.HasPrefix(r.Key, disputeKeyPrefix) {
				amount -= r.Amount
			}
		}
		if amount <= 0 {
			return nil // Lapse's own refunds explain it
		}
		// The refund id of a total may name the payment's every refund
		// (Stripe's charge id): it is not the unasked refund's own.
		key, refundID = key+"-"+strconv.FormatInt(n.Amount, 10), ""
		said = fmt.Sprintf("%s reports %s refunded of payment %s in all (refund %s), %s more than Lapse's refunds of it",
			n.Provider, lapse.Money(n.Amount, pay.Currency), pay.TxnID, n.RefundID, lapse.Money(amount, pay.Currency))
	}
	if n.Review != "" {
		// The provider took the money back itself (a dispute lost):
		// the review says so, that nobody refunds it again.
		said = n.Review + "; " + said
	}
	now := e.clock.Now()
	x := &lapse.OrderRefund{OrderID: pay.OrderID, OrderNo: pay.OrderNo, PaymentID: pay.ID, Provider: pay.Provider, TxnID: pay.TxnID,
		Amount: amount, Currency: pay.Currency, Reason: reason, Key: key,
		Status: lapse.OrderRefundReview, RefundID: refundID, CreatedAt: now}
	created := false
	err := e.store.Tx(ctx, func(tx lapse.Store) error {
		got, c, err := tx.OrderRefundCreate(ctx, x)
		if err != nil || !c {
			return err
		}
		created = true
		_, err = tx.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: got.ID, From: lapse.OrderRefundReview, To: lapse.OrderRefundReview,
			At: now, Review: &lapse.Review{OrderID: pay.OrderID, OrderNo: pay.OrderNo, Reason: refundReviewReason(got, said), CreatedAt: now}})
		return err
	})
	if err == nil && created {
		e.log.Error("refund notice matches no refund Lapse asked for; recorded in review", "provider", n.Provider, "txn_id", n.TxnID,
			"refund_id", n.RefundID, "order_no", pay.OrderNo, "amount", amount)
		e.metrics.refunds.WithLabelValues(refundOrder, refundReview).Inc()
	}
	return err
}

// noticeDisagrees says how refund notice n contradicts x, the merchant
// refund it names, or "". Whatever its amount, n contradicts an x recorded
// failed: x's order was paid again, and what it captured may be refunded
// once more. Otherwise n's amount must be x's, or, when n reports what the
// payment has had refunded in all (RefundedTotal), x's with those of the
// payment's earlier refunds that succeeded: a merchant refund is asked for
// only once the order's earlier ones are settled. (n's order and currency
// were checked against the payment's, which are x's.)
func noticeDisagrees(n *lapse.PaymentNotice, x *lapse.OrderRefund, earlier []*lapse.OrderRefund) string {
	id := x.Key
	if x.RefundID != "" && x.RefundID != x.Key {
		id += " (" + x.RefundID + ")"
	}
	if x.Status == lapse.OrderRefundFailed {
		return fmt.Sprintf("a refund notice reports refund %s of order %s done, %s refunded; Lapse recorded that refund of %s failed (%s) and the order paid again",
			id, x.OrderNo, lapse.Money(n.Amount, n.Currency), lapse.Money(x.Amount, x.Currency), x.Failure)
	}
	want, said := x.Amount, "refunded"
	if n.RefundedTotal {
		said = "refunded of the payment in all"
		for _, r := range earlier {
			if r.PaymentID == x.PaymentID && r.Status == lapse.OrderRefundSucceeded {
				want += r.Amount
			}
		}
	}
	if n.Amount == want {
		return ""
	}
	asked := fmt.Sprintf("Lapse asked for %s", lapse.Money(x.Amount, x.Currency))
	if want != x.Amount {
		asked += fmt.Sprintf(", which with the refunds before it makes %s in all", lapse.Money(want, x.Currency))
	}
	return fmt.Sprintf("a refund notice about refund %s of order %s reports %s %s; %s", id, x.OrderNo, lapse.Money(n.Amount, n.Currency), said, asked)
}

// refundedOutside moves order o along flow's refund path, start and done,
// through s, when what it captured has all gone back by refunds Lapse did
// not ask for (made in the provider's dashboard, then settled succeeded by
// an operator) while o is still in the state a refund starts from: the
// order ends refunded, as one that Lapse refunded, with the same events
// (its benefits revoked, say). It moves nothing while another refund of o
// is requested or in review, or for a part refunded: a partial refund
// leaves an order paid. It returns the transitions it made.
func (ps *payments) refundedOutside(ctx context.Context, s lapse.Store, o *lapse.Order, flow *lapse.Flow, by Actor) ([]*lapse.OrderTransitionParams, error) {
	if flow.Refunds.Start == "" || flow.Transition(o.State, flow.Refunds.Start) == nil {
		return nil, nil
	}
	refunds, err := s.OrderRefundList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	var refunded, captured int64
	for _, r := range refunds {
		switch r.Status {
		case lapse.OrderRefundRequested, lapse.OrderRefundReview:
			return nil, nil
		case lapse.OrderRefundSucceeded:
			refunded += r.Amount
		}
	}
	pays, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID, Status: lapse.PaymentApplied})
	if err != nil {
		return nil, err
	}
	for _, p := range pays {
		captured += p.Amount
	}
	if captured == 0 || refunded < captured {
		return nil, nil
	}
	why := fmt.Sprintf("refunded all %s outside Lapse, settled by %s", lapse.Money(captured, o.Currency), by.resolver())
	var plans []*lapse.OrderTransitionParams
	for _, ev := range []lapse.Event{flow.Refunds.Start, flow.Refunds.Done} {
		p, err := flow.Plan(o, lapse.Firing{Event: ev, Now: ps.e.clock.Now(), FiredBy: by.FiredBy, Actor: by.Name, Reason: why})
		if err != nil {
			return nil, err
		}
		if o, err = ps.e.transition(ctx, s, o, p); err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// reviewRefund returns the refund that review id holds, with the review.
func (ps *payments) reviewRefund(ctx context.Context, id int64) (*lapse.OrderRefund, *lapse.Review, error) {
	if id <= 0 {
		return nil, nil, lapse.FieldError("id", "must be a review id, a positive integer")
	}
	e := ps.e
	rv, err := e.store.ReviewGet(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if rv.OrderRefundID == 0 {
		return nil, nil, lapse.Refine(ErrReviewHoldsNoRefund, "review %d of order %s holds no refund: resolve it instead", id, rv.OrderNo)
	}
	x, err := ps.refundNow(ctx, rv.OrderID, rv.OrderNo, rv.OrderRefundID)
	if err != nil {
		return nil, nil, err
	}
	return x, rv, nil
}

// settleReview is SettleReview.
func (ps *payments) settleReview(ctx context.Context, id int64, to lapse.OrderRefundStatus, note string, by Actor) (*lapse.Review, error) {
	e := ps.e
	if to != lapse.OrderRefundSucceeded && to != lapse.OrderRefundFailed {
		return nil, lapse.FieldError("status", "must be %s (the money went back) or %s (it did not), not %q", lapse.OrderRefundSucceeded, lapse.OrderRefundFailed, to)
	}
	if strings.TrimSpace(note) == "" {
		return nil, lapse.FieldError("note", "is required: say what the provider shows")
	}
	x, rv, err := ps.reviewRefund(ctx, id)
	if err != nil {
		return nil, err
	}
	who := by.resolver()
	failure := ""
	if to == lapse.OrderRefundFailed {
		failure = lapse.CleanReason("settled failed by " + who + ": " + note)
	}
	// The resolution, the refund's move and the order's are one
	// transaction, planned with the order locked, as settleOrderRefund
	// plans: a provider's answer about another refund of the order, at
	// once, is then seen by one of the two.
	var plans []*lapse.OrderTransitionParams
	var flow *lapse.Flow
	got, err := changeOrder(ctx, e, orderChange{orderNo: rv.OrderNo, locked: true}, func(tx lapse.Store, o *lapse.Order, f *lapse.Flow) (*lapse.Review, error) {
		now := e.clock.Now()
		flow, plans = f, nil
		rs, err := tx.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: id, At: now, By: who, Note: note})
		if err != nil {
			return nil, err
		}
		_, err = tx.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: x.ID, From: lapse.OrderRefundReview, To: to, Failure: failure, At: now})
		if errors.Is(err, lapse.ErrStale) { // cannot be while its review was open
			return nil, lapse.Errorf(lapse.EINTERNAL, "refund %s of order %s is not in review, while review %d that holds it was open", x.Key, x.OrderNo, id)
		}
		if err != nil {
			return nil, err
		}
		p, _, err := ps.settlePlan(ctx, tx, o, flow, by.FiredBy, by.Name)
		if err != nil {
			return nil, err
		}
		if p != nil {
			plans = append(plans, p)
			_, err = e.transition(ctx, tx, o, p)
			return rs[0], err
		}
		if to == lapse.OrderRefundSucceeded {
			plans, err = ps.refundedOutside(ctx, tx, o, flow, by)
		}
		return rs[0], err
	})
	if err != nil {
		return nil, err
	}
	for _, p := range plans {
		e.committed(flow.Name, p)
	}
	e.log.Warn("merchant refund settled by an operator", "order_no", x.OrderNo, "key", x.Key, "status", to, "by", who)
	result := refundSucceeded
	if to == lapse.OrderRefundFailed {
		result = refundFailed
	}
	e.metrics.refunds.WithLabelValues(refundOrder, result).Inc()
	return got, nil
}
