package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
)

// A provider's transaction id names one capture. A notice under an id that
// is recorded already is a replay only when it says what the record says:
// the same order, amount and currency. Anything else is a contradiction
// (a provider's bug, a reused id, a forged callback signed with a leaked
// secret) that neither Lapse nor the provider can settle by trying again:
// nothing moves, and an operator gets a review, written before the notice
// is acknowledged. Answering it with an error instead would have the
// provider send it for days (some providers then disable the endpoint,
// and with it every other payment's callbacks), while a review is on the
// books at once.

// recorded answers notice n, whose transaction is recorded as rec: rec
// when n is a replay of it, and otherwise n put in review on order o (the
// order n names; nil when it does not exist).
func (ps *payments) recorded(ctx context.Context, rec *lapse.Payment, n *lapse.PaymentNotice, o *lapse.Order) (*lapse.Payment, error) {
	why := noticeConflict(rec, n, true)
	if why == "" {
		return rec, nil
	}
	return ps.conflicting(ctx, rec, n, o, why)
}

// noticeConflict says how notice n contradicts rec, the payment recorded
// under its transaction, or "": by its order or currency, and by its amount
// when amount is set (a paid notice's amount is the capture's; a refund
// notice's is the refund's, or what the payment has had refunded in all,
// which for a late payment, refunded only in full, are both the whole
// payment's; a merchant refund's notice is checked by noticeDisagrees).
func noticeConflict(rec *lapse.Payment, n *lapse.PaymentNotice, amount bool) string {
	if n.OrderNo == rec.OrderNo && n.Currency == rec.Currency && (!amount || n.Amount == rec.Amount) {
		return ""
	}
	said := fmt.Sprintf("a paid notice reports it as %s for order %s", lapse.Money(n.Amount, n.Currency), n.OrderNo)
	if n.Kind == lapse.NoticeRefunded {
		said = fmt.Sprintf("a refund notice (refund %s) reports %s refunded for order %s", n.RefundID, lapse.Money(n.Amount, n.Currency), n.OrderNo)
	}
	return fmt.Sprintf("%s; it is recorded as %s for order %s", said, lapse.Money(rec.Amount, rec.Currency), rec.OrderNo)
}

// conflicting puts notice n, which contradicts rec (why), in review: a
// review row on order o, or on rec's order when o is nil, written with a
// guarded touch of rec (its status unchanged) so that it goes with the
// payment as the store has it. An open review with the same reason stands
// for it already (the provider sent n again). rec and its order do not
// change otherwise; rec is returned as it stands. n is nil for a
// provider's answer to a refund or a query, which is no notice.
func (ps *payments) conflicting(ctx context.Context, rec *lapse.Payment, n *lapse.PaymentNotice, o *lapse.Order, why string) (*lapse.Payment, error) {
	e := ps.e
	if o == nil {
		var err error
		if o, err = e.store.OrderGet(ctx, rec.OrderNo); err != nil {
			return nil, err
		}
	}
	reason := lapse.CleanReason(fmt.Sprintf("payment %s of %s (%s) is in review: %s", rec.TxnID, rec.Provider, lapse.Money(rec.Amount, rec.Currency), why))
	open, err := e.store.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil {
		return nil, err
	}
	for _, r := range open {
		if r.Reason == reason {
			return rec, nil
		}
	}
	for range maxStaleRetries {
		now := e.clock.Now()
		got, err := e.store.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: rec.ID, From: rec.Status, To: rec.Status, At: now,
			Review: &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: reason, CreatedAt: now}})
		if errors.Is(err, lapse.ErrStale) {
			// The payment moved on (its refund, say): touch it as it is now.
			if rec, err = e.store.PaymentGet(ctx, rec.Provider, rec.TxnID); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		attrs := []any{"provider", rec.Provider, "txn_id", rec.TxnID, "recorded_order_no", rec.OrderNo, "reason", why}
		if n != nil {
			attrs = append(attrs, "kind", n.Kind, "order_no", n.OrderNo)
		}
		e.log.Error("payment report contradicts the payment recorded; put in review", attrs...)
		return got, nil
	}
	return nil, fmt.Errorf("review of a notice contradicting payment %s: %w", rec.TxnID, lapse.ErrStale)
}
