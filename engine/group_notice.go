package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
)

// A member's charge is made under the member's charge key, which is also
// the order number the provider knows the charge by (ChargeRequest.OrderNo):
// a provider that calls back about the charge names the key as the order.
// Such a callback is about the member, not about an order of that number,
// which no order may have (lapse.ChargeKeyPrefix): it is answered here,
// never refused as unknown (the provider would send it until it gave up).
//
// A member's charge is also found by its transaction: a notice that
// carries it under the group's number, or one no order has, is about the
// charge too, and records no payment (txnNoticed). Under the number of an
// order that takes payments it is not looked for (apply says why).

// txnNoticed answers a paid notice n that carries the transaction of a
// group member's charge under another order number than the member's
// charge key: the group's own number, another member's key, a number no
// order has (apply looks only for those). The transaction is counted once, as the member's charge, so n
// records no payment and pays no order: it contradicts the charge, and is
// put in review (once however often it comes) on the order it names, or on
// the member's group when it names none, and handled is true. A notice
// under the member's key (chargeNoticed answers it), and one whose
// transaction is recorded as a payment too (recorded answers it, as the
// payment's), are not handled here.
func (gb *groupBuys) txnNoticed(ctx context.Context, n *lapse.PaymentNotice) (handled bool, err error) {
	e := gb.e
	m, err := e.store.GroupMemberGetByTxn(ctx, n.Provider, n.TxnID)
	switch {
	case errors.Is(err, lapse.ErrGroupMemberNotFound):
		return false, nil
	case err != nil:
		return true, err
	case m.Key == n.OrderNo:
		return false, nil
	}
	switch _, err := e.store.PaymentGet(ctx, n.Provider, n.TxnID); {
	case err == nil:
		return false, nil
	case !errors.Is(err, lapse.ErrPaymentNotFound):
		return true, err
	}
	on, err := e.store.OrderGet(ctx, n.OrderNo)
	switch {
	case errors.Is(err, lapse.ErrOrderNotFound):
		on = nil
	case err != nil:
		return true, err
	}
	why := memberReviewReason(m, n.TxnID, fmt.Sprintf("a paid notice reports it as %s for order %s, not under its key: "+
		"it is counted once, as the member's charge", lapse.Money(n.Amount, n.Currency), n.OrderNo))
	for range maxStaleRetries {
		err := gb.reviewMember(ctx, m, on, why)
		if !errors.Is(err, lapse.ErrStale) {
			return true, err
		}
		if m, err = e.store.GroupMemberGet(ctx, m.Key); err != nil {
			return true, err
		}
	}
	return true, fmt.Errorf("notice of payment %s for order %s, member charge %s: %w", n.TxnID, n.OrderNo, m.Key, lapse.ErrStale)
}

// chargeNoticed answers a paid notice n whose order number names no order:
// when a member's charge has that key, n is about that charge, and handled
// is true. What it says is recorded by memberNoticed.
func (gb *groupBuys) chargeNoticed(ctx context.Context, n *lapse.PaymentNotice) (pay *lapse.Payment, handled bool, err error) {
	e := gb.e
	if !lapse.IsChargeKey(n.OrderNo) {
		return nil, false, nil
	}
	for range maxStaleRetries {
		m, err := e.store.GroupMemberGet(ctx, n.OrderNo)
		if errors.Is(err, lapse.ErrGroupMemberNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, true, err
		}
		pay, err := gb.memberNoticed(ctx, m, n)
		if errors.Is(err, lapse.ErrStale) {
			continue // the member's charge moved meanwhile: decide again
		}
		return pay, true, err
	}
	return nil, true, fmt.Errorf("notice of payment %s for member charge %s: %w", n.TxnID, n.OrderNo, lapse.ErrStale)
}

// memberNoticed records what paid notice n says of member m's charge:
//   - the member's charge under way, or failed, paid: what the provider's
//     answer to the charge would record (chargeAnswered), the same rule;
//   - the member's recorded charge again (its transaction, amount and
//     currency, and the merchant account configured): a replay, which
//     changes nothing;
//   - another transaction, or another provider's, under the member's key:
//     a second capture, on the books as a payment in review on the group;
//   - the recorded charge with another amount, currency or merchant
//     account, a charge Lapse has not asked for (the member is pending),
//     or a time the charge cannot have (paidAtMismatch of the group): a
//     review on the group, the member unchanged.
//
// Nothing is charged, and no member marked charged, twice (S7); a review is
// written before the notice is acknowledged. It returns the payment
// recorded for a second capture, and otherwise nil. lapse.ErrStale: m moved
// meanwhile, and nothing was written.
func (gb *groupBuys) memberNoticed(ctx context.Context, m *lapse.GroupMember, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	e := gb.e
	ps := e.feat.payments
	o, err := e.store.OrderGet(ctx, m.GroupID)
	if err != nil {
		return nil, err
	}
	// n as about the group, whose order holds the member's charge and any
	// payment recorded under its key.
	g := *n
	g.OrderNo = o.OrderNo
	switch rec, err := e.store.PaymentGet(ctx, n.Provider, n.TxnID); {
	case err == nil:
		return ps.recorded(ctx, rec, &g, o)
	case !errors.Is(err, lapse.ErrPaymentNotFound):
		return nil, err
	}
	if n.Provider != m.Provider || m.TxnID != "" && n.TxnID != m.TxnID {
		return gb.secondCharge(ctx, m, o, n)
	}
	now := e.clock.Now()
	var why string
	switch merchant := ps.merchantMismatch(m.Provider, n.Merchant); {
	case paidAtMismatch(o, n.PaidAt, now) != "":
		why = paidAtMismatch(o, n.PaidAt, now)
	case m.Status == lapse.ChargeCharged && (n.Amount != m.Amount || n.Currency != m.Currency):
		why = fmt.Sprintf("a paid notice reports it as %s; it is recorded as %s", lapse.Money(n.Amount, n.Currency), lapse.Money(m.Amount, m.Currency))
	case m.Status == lapse.ChargeCharged && merchant != "":
		why = "a paid notice reports it " + merchant
	case m.Status == lapse.ChargeCharged:
		return nil, nil // a replay
	case m.Status == lapse.ChargePending:
		why = fmt.Sprintf("a paid notice reports it as %s, but Lapse has not asked for this charge", lapse.Money(n.Amount, n.Currency))
	default: // charging or failed: the provider's answer to the charge Lapse asked for
		return nil, gb.chargeAnswered(ctx, m, &lapse.ProviderPayment{TxnID: n.TxnID, OrderNo: n.OrderNo, Status: lapse.ProviderPaid,
			Amount: n.Amount, Currency: n.Currency, Merchant: n.Merchant, PaidAt: n.PaidAt})
	}
	return nil, gb.reviewMember(ctx, m, nil, memberReviewReason(m, n.TxnID, why))
}

// secondCharge records n, which reports a transaction under member m's
// charge key other than m's charge (or another provider's), as a second
// capture: a payment in review on m's group o, which it returns. The same
// transaction recorded already is answered as recorded answers it.
func (gb *groupBuys) secondCharge(ctx context.Context, m *lapse.GroupMember, o *lapse.Order, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	now := gb.e.clock.Now()
	why := fmt.Sprintf("a second charge under member %s's charge key %s, whose charge is %s of %s (%s)",
		m.UserID, m.Key, orNone(m.TxnID), m.Provider, m.Status)
	g := *n // as about the group, whose order holds any payment recorded under the key
	g.OrderNo = o.OrderNo
	pay := &lapse.Payment{Provider: n.Provider, TxnID: n.TxnID, OrderID: o.ID, OrderNo: o.OrderNo, Amount: n.Amount,
		Currency: n.Currency, Merchant: n.Merchant, PaidAt: n.PaidAt, Raw: n.Raw, CreatedAt: now, UpdatedAt: now}
	return gb.e.feat.payments.recordPayment(ctx, o, &g, pay, lapse.PaymentReview, lapse.EventPaymentReview, why)
}

// refundNoticed answers a refund notice n whose payment Lapse does not hold:
// when a member's charge has n's order number as its key, or else n's
// transaction, n reports that charge refunded, and handled is true. The
// refund of a member of an abandoned group, of its whole charge, records
// the member refunded (once); any other is a refund Lapse did not ask
// for, so an operator is told on the group (once however often it comes)
// and the member is unchanged: the books count its charge until a person
// looks.
//
// A dispute notice (lapse.NoticeDispute) of a member's charge, and a
// dispute's withdrawal (a refunded notice with a Review), are put in
// review on the group the same way, with its Review as the reason: never
// taken for the abandoning's own refund, however much they say.
func (gb *groupBuys) refundNoticed(ctx context.Context, n *lapse.PaymentNotice) (handled bool, err error) {
	for range maxStaleRetries {
		m, err := gb.noticedMember(ctx, n)
		if errors.Is(err, lapse.ErrGroupMemberNotFound) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		ours := n.Kind == lapse.NoticeRefunded && n.Review == "" &&
			(m.Status == lapse.ChargeRefunding || m.Status == lapse.ChargeRefunded) && n.Provider == m.Provider &&
			n.TxnID == m.TxnID && n.Amount == m.Amount && n.Currency == m.Currency
		switch {
		case ours && m.Status == lapse.ChargeRefunded:
			return true, nil // a replay
		case ours:
			// The refund the abandoning of the group asked for.
			return true, gb.refunded(ctx, m)
		}
		why := fmt.Sprintf("a refund notice (refund %s) reports %s refunded, which Lapse did not ask for",
			n.RefundID, lapse.Money(n.Amount, n.Currency))
		switch {
		case n.Kind == lapse.NoticeDispute:
			why = n.Review
		case n.Review != "":
			why = n.Review + "; " + why
		}
		err = gb.reviewMember(ctx, m, nil, memberReviewReason(m, n.TxnID, why))
		if errors.Is(err, lapse.ErrStale) {
			continue
		}
		return true, err
	}
	return true, fmt.Errorf("refund notice %s for member charge %s: %w", n.RefundID, n.OrderNo, lapse.ErrStale)
}

// noticedMember returns the member whose charge notice n is about: the one
// whose charge key n names as its order, or else the one whose charge is
// n's transaction; lapse.ErrGroupMemberNotFound when there is none.
func (gb *groupBuys) noticedMember(ctx context.Context, n *lapse.PaymentNotice) (*lapse.GroupMember, error) {
	st := gb.e.store
	if lapse.IsChargeKey(n.OrderNo) {
		if m, err := st.GroupMemberGet(ctx, n.OrderNo); !errors.Is(err, lapse.ErrGroupMemberNotFound) {
			return m, err
		}
	}
	return st.GroupMemberGetByTxn(ctx, n.Provider, n.TxnID)
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}
