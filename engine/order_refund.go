package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
// amount, currency or payment completes nothing: its delivery dies into
// review, and the order waits, refunding, for an operator.
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
				switch {
				case r.Amount != req.Amount:
					return nil, lapse.Refine(lapse.ErrOrderRefundExists, "refund %s of order %s is for %s, not %s", r.Key, o.OrderNo, lapse.Money(r.Amount, o.Currency), lapse.Money(req.Amount, o.Currency))
				case r.Reason != req.Reason:
					// Another request under the same key: the reason kept
					// would not be the one the caller thinks it gave.
					return nil, lapse.Refine(lapse.ErrOrderRefundExists, "refund %s of order %s was asked with another reason", r.Key, o.OrderNo)
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
			if got.OrderID != o.ID || got.Amount != req.Amount {
				return nil, lapse.Refine(lapse.ErrOrderRefundExists, "refund key %s is taken", key)
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
			if _, err := e.store.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: r.ID, From: lapse.OrderRefundRequested,
				To: lapse.OrderRefundRequested, RefundID: ref.RefundID, At: e.clock.Now()}); err != nil && !errors.Is(err, lapse.ErrStale) {
				return err
			}
		}
		return fmt.Errorf("refund %s of order %s is still processing at %s", r.Key, r.OrderNo, r.Provider)
	}
	_, err := e.store.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: r.ID, From: lapse.OrderRefundRequested, To: to,
		RefundID: ref.RefundID, Failure: why, At: e.clock.Now()})
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

// settleOrderRefund ends a refunding order once none of its refunds is
// still requested: refunded when everything its payment captured went back,
// paid again otherwise. It reports whether nothing is left to wait for.
func (ps *payments) settleOrderRefund(ctx context.Context, orderNo string) (bool, error) {
	e := ps.e
	return changeOrder(ctx, e, orderChange{orderNo: orderNo}, func(s lapse.Store, o *lapse.Order, flow *lapse.Flow) (bool, error) {
		refunds, err := s.OrderRefundList(ctx, o.ID)
		if err != nil {
			return false, err
		}
		var refunded, captured int64
		for _, r := range refunds {
			switch r.Status {
			case lapse.OrderRefundRequested:
				return false, nil
			case lapse.OrderRefundSucceeded:
				refunded += r.Amount
			}
		}
		if flow.Refunds.Start == "" || flow.Transition(o.State, flow.Refunds.Done) == nil {
			return true, nil // not refunding (settled already)
		}
		pays, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID, Status: lapse.PaymentApplied})
		if err != nil {
			return false, err
		}
		for _, p := range pays {
			captured += p.Amount
		}
		ev, why := flow.Refunds.Partial, fmt.Sprintf("refunded %s of %s", lapse.Money(refunded, o.Currency), lapse.Money(captured, o.Currency))
		if refunded >= captured {
			ev, why = flow.Refunds.Done, fmt.Sprintf("refunded all %s", lapse.Money(captured, o.Currency))
		}
		p, err := flow.Plan(o, lapse.Firing{Event: ev, Now: e.clock.Now(), FiredBy: lapse.FiredByPayment, Actor: "engine " + e.node, Reason: why})
		if err != nil {
			return false, err
		}
		if _, err := e.transition(ctx, s, o, p); err != nil {
			return false, err
		}
		e.committed(flow.Name, p)
		return true, nil
	})
}

// deliverOrderRefunds asks the provider for every refund of the order that
// is still requested, then settles the order. An answer about another
// refund than the one asked for fails the delivery for good, so that it
// dies into review.
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
	for _, x := range refunds {
		if x.Status != lapse.OrderRefundRequested {
			continue
		}
		var ref *lapse.ProviderRefund
		err := fmt.Errorf("%w: no payment provider port is configured for %s", lapse.ErrRefused, x.Provider)
		if prov := ps.providers[x.Provider]; prov != nil {
			ref, err = prov.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: x.Key, TxnID: x.TxnID, OrderNo: x.OrderNo,
				Amount: x.Amount, Currency: x.Currency, Reason: x.Reason})
		}
		why := ""
		if errors.Is(err, lapse.ErrRefused) {
			// Refused for good: the refund failed, and the order is paid again.
			e.log.Warn("the provider refused a refund", "order_no", x.OrderNo, "key", x.Key, "err", err)
			ref, why, err = &lapse.ProviderRefund{TxnID: x.TxnID, Amount: x.Amount, Status: lapse.RefundFailed}, lapse.Reason(err), nil
		}
		if err != nil {
			return err
		}
		if err := reportDisagrees(x.Provider, x.Key, ref, x.TxnID, x.Amount, x.Currency); err != nil {
			return err // the delivery dies into review; the order waits, refunding
		}
		if err := ps.recordOrderRefund(ctx, x, ref, why); err != nil {
			return err
		}
	}
	done, err := ps.settleOrderRefund(ctx, d.OrderNo)
	if err == nil && !done {
		return fmt.Errorf("order %s still has refunds waiting for their provider", d.OrderNo)
	}
	return err
}

// queryOrderRefunds asks the provider about refunds whose request may have
// been lost, and records those it made. It reports true once none is left
// requested; otherwise the next attempt asks again under the same keys. An
// answer about another refund than the one asked for is an error that
// kills the delivery, into review.
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
		if err := reportDisagrees(x.Provider, x.Key, ref, x.TxnID, x.Amount, x.Currency); err != nil {
			return false, err // the delivery dies into review; the order waits, refunding
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
// for that refund, or reports done a refund Lapse recorded failed
// (noticeDisagrees), completes nothing and is put in review on the order,
// once however often it comes: the books would say that money went back
// which did not, or miss money that did.
func (ps *payments) orderRefundNoticed(ctx context.Context, pay *lapse.Payment, n *lapse.PaymentNotice) error {
	e := ps.e
	refunds, err := e.store.OrderRefundList(ctx, pay.OrderID)
	if err != nil {
		return err
	}
	for i, x := range refunds {
		if x.PaymentID != pay.ID || (x.Key != n.RefundID && (x.RefundID == "" || x.RefundID != n.RefundID)) {
			continue
		}
		if why := noticeDisagrees(n, x, refunds[:i]); why != "" {
			_, err := ps.conflicting(ctx, pay, n, nil, why)
			return err
		}
		if x.Status == lapse.OrderRefundRequested {
			// The notice's amount is x's, as checked above.
			if err := ps.recordOrderRefund(ctx, x, &lapse.ProviderRefund{RefundID: n.RefundID, TxnID: pay.TxnID, Amount: x.Amount,
				Currency: n.Currency, Status: lapse.RefundSucceeded}, ""); err != nil {
				return err
			}
		}
		_, err := ps.settleOrderRefund(ctx, pay.OrderNo)
		return err
	}
	e.log.Warn("refund notice matches no refund Lapse asked for", "provider", n.Provider, "txn_id", n.TxnID, "refund_id", n.RefundID)
	return nil
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
