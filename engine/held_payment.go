package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// A payment held without its order. A verified callback that reports a
// capture for an order Lapse does not have was once refused with 404, for
// the provider to send it again: it may have overtaken its order's
// creation. But a provider gives up after a while, and the money it
// captured was then on nobody's books (S3). Such a capture is now recorded
// at once, once per (provider, transaction), as a lapse.HeldPayment, and
// acknowledged. The HeldMatcher (held_matcher.go) applies it through the
// payment path once its order exists, as its callback would have been
// applied (the order's deadline judged at the provider's time, its amount,
// currency and merchant checked); after its window without an order it is
// in review, where an operator refunds it through its provider's port or
// dismisses it with a note, each audited.
//
// Held payments have a table of their own: a payment row and a review row
// stand on an order (their order_id is NOT NULL), and a held payment has
// none. Reconcile counts them as in review.

// hold records n, a paid notice for an order that does not exist, as a
// payment held without its order, unless its transaction is held already:
// then n is a replay of it, or a contradiction (another order, amount or
// currency) that puts it in review. It returns the held payment as a
// lapse.Payment whose status is lapse.PaymentHeld.
func (ps *payments) hold(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	e := ps.e
	now := e.clock.Now()
	paidAt := n.PaidAt
	if paidAt.IsZero() {
		// Judged, once its order exists, at when it came, as a live
		// notice without a time is judged at now.
		paidAt = now
	}
	h := &lapse.HeldPayment{Provider: n.Provider, TxnID: n.TxnID, OrderNo: n.OrderNo, Amount: n.Amount, Currency: n.Currency,
		Merchant: n.Merchant, PaidAt: paidAt, Doubt: lapse.CleanReason(n.Review), Status: lapse.HeldWaiting, Raw: n.Raw, CreatedAt: now,
		Reason: lapse.CleanReason(fmt.Sprintf("no order %s exists: held for its order", n.OrderNo))}
	got, created, err := e.store.HeldPaymentCreate(ctx, h)
	if err != nil {
		return nil, err
	}
	if created {
		e.log.Warn("payment held: its order does not exist", "provider", n.Provider, "txn_id", n.TxnID, "order_no", n.OrderNo,
			"amount", n.Amount, "currency", n.Currency)
		e.metrics.payments.WithLabelValues(n.Provider, string(lapse.PaymentHeld)).Inc()
	} else if why := heldConflict(got, n); why != "" {
		if got, err = ps.heldContradicted(ctx, got, why); err != nil {
			return nil, err
		}
	}
	return heldView(got), nil
}

// heldOf returns the payment held without its order under paid notice n's
// transaction, or nil.
func (ps *payments) heldOf(ctx context.Context, n *lapse.PaymentNotice) (*lapse.HeldPayment, error) {
	hs, err := ps.e.store.HeldPaymentList(ctx, &lapse.HeldPaymentListParams{Provider: n.Provider, TxnID: n.TxnID})
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	return hs[0], nil
}

// heldTaken says why paid notice n, whose order now exists, must not be
// applied because of h, the payment held under its transaction (nil: none),
// or "". A held payment waiting for this order, amount and currency is n's
// own callback that overtook the order: it is applied, and the HeldMatcher
// then finds it recorded. One applied already is recorded as a payment,
// which the payment path finds. Any other is counted as held: in review,
// being refunded or refunded, dismissed by an operator, or held for
// another order, amount or currency. Applying it too would count its money
// twice, or pay an order with money given back.
func heldTaken(h *lapse.HeldPayment, n *lapse.PaymentNotice) string {
	switch {
	case h == nil || h.Status == lapse.HeldApplied:
		return ""
	case heldConflict(h, n) != "":
		return heldConflict(h, n) + fmt.Sprintf("; order %s exists now", n.OrderNo)
	case h.Status == lapse.HeldWaiting:
		return ""
	}
	return fmt.Sprintf("its callback came again once order %s exists now, while the held payment is %s: it is not applied to the order; an operator settles it",
		n.OrderNo, h.Status)
}

// heldRefused answers paid notice n, whose payment the store did not
// record because the payment held under its transaction takes it
// (lapse.ErrPaymentHeld: held for another order, amount or currency, or
// settled by an operator or the provider): the transaction's money is
// counted once, as held, and n pays nothing. It is noted on the held
// payment (heldContradicted), which is returned as held; a waiting one is
// put in review, as a contradiction is, once however often n comes.
func (ps *payments) heldRefused(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	h, err := ps.heldOf(ctx, n)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("payment %s of %s refused as held, but no held payment has it: %w", n.TxnID, n.Provider, lapse.ErrStale)
	}
	why := heldTaken(h, n)
	if why == "" {
		why = heldConflict(h, n) + fmt.Sprintf("; order %s exists now", n.OrderNo)
	}
	if h, err = ps.heldContradicted(ctx, h, why); err != nil {
		return nil, err
	}
	return heldView(h), nil
}

// heldConflict says how paid notice n contradicts h, the payment held under
// its transaction, or "".
func heldConflict(h *lapse.HeldPayment, n *lapse.PaymentNotice) string {
	if n.OrderNo == h.OrderNo && n.Amount == h.Amount && n.Currency == h.Currency {
		return ""
	}
	return fmt.Sprintf("a paid notice reports it as %s for order %s; it is held as %s for order %s",
		lapse.Money(n.Amount, n.Currency), n.OrderNo, lapse.Money(h.Amount, h.Currency), h.OrderNo)
}

// heldContradicted puts h in review for why, a report that contradicts it
// (a notice, or a payment recorded for its transaction), once however
// often it comes: why is added to its reason. A held payment no longer
// waiting keeps its status (an operator has it, or it is settled); its
// money is counted once, as held (or, when its transaction is recorded as
// a payment, as that payment).
func (ps *payments) heldContradicted(ctx context.Context, h *lapse.HeldPayment, why string) (*lapse.HeldPayment, error) {
	e := ps.e
	for range maxStaleRetries {
		if strings.Contains(h.Reason, lapse.CleanReason(why)) {
			return h, nil
		}
		to := h.Status
		if to == lapse.HeldWaiting {
			to = lapse.HeldReview
		}
		got, err := e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: h.Status, To: to,
			Reason: lapse.CleanReason(h.Reason + "; contradicted: " + why), At: e.clock.Now()})
		if errors.Is(err, lapse.ErrStale) {
			if h, err = e.store.HeldPaymentGet(ctx, h.ID); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		e.log.Error("a report contradicts a payment held without its order; put in review", "provider", h.Provider,
			"txn_id", h.TxnID, "held_order_no", h.OrderNo, "reason", why)
		return got, nil
	}
	return nil, fmt.Errorf("review of held payment %d: %w", h.ID, lapse.ErrStale)
}

// heldView is h as ApplyPayment returns it.
func heldView(h *lapse.HeldPayment) *lapse.Payment {
	return &lapse.Payment{Provider: h.Provider, TxnID: h.TxnID, OrderNo: h.OrderNo, Amount: h.Amount, Currency: h.Currency,
		Merchant: h.Merchant, PaidAt: h.PaidAt, Status: lapse.PaymentHeld, Reason: h.Reason, CreatedAt: h.CreatedAt, UpdatedAt: h.UpdatedAt}
}

// heldNotice is the paid notice that h was held from.
func heldNotice(h *lapse.HeldPayment) *lapse.PaymentNotice {
	return &lapse.PaymentNotice{Provider: h.Provider, Kind: lapse.NoticePaid, TxnID: h.TxnID, OrderNo: h.OrderNo, Amount: h.Amount,
		Currency: h.Currency, Merchant: h.Merchant, PaidAt: h.PaidAt, Raw: h.Raw, Review: h.Doubt}
}

// heldPaidAtMismatch says why paidAt, the provider's time of a payment held
// since heldAt without its order, cannot be true, or "". It came before its
// order, so a time before the order's creation is no contradiction; one
// more than MaxPaidAtAhead after the callback that reported it is.
func heldPaidAtMismatch(paidAt, heldAt time.Time) string {
	if paidAt.After(heldAt.Add(MaxPaidAtAhead)) {
		return fmt.Sprintf("the provider reports it paid at %s, %s after its callback came at %s, more than the %s clocks may drift",
			paidAt.UTC().Format(time.RFC3339Nano), paidAt.Sub(heldAt).Round(time.Second), heldAt.UTC().Format(time.RFC3339Nano), MaxPaidAtAhead)
	}
	return ""
}

// heldRefundNoticed applies refund notice n to the payment held without
// its order under n's transaction, and returns it as it then stands, or nil
// when none is held. A refund an operator asked for completes as the
// provider's answer would (heldRefundAnswered: refunded, or back to review
// when it reports another amount or currency); a refund already recorded is
// a replay. One made at the provider without Lapse (from its dashboard,
// say) of a held payment waiting or in review, in full, for its order and
// currency, is the provider's word that the money went back: the held
// payment is refunded (final), so that it is never applied to its order
// afterwards (the payment write refuses it: lapse.HeldTakes) and reconcile
// counts it refunded. Any other (another order, amount or currency, or a
// held payment an operator dismissed) is put on the desk with the held
// payment, as a contradiction is.
func (ps *payments) heldRefundNoticed(ctx context.Context, n *lapse.PaymentNotice) (*lapse.HeldPayment, error) {
	e := ps.e
	hs, err := e.store.HeldPaymentList(ctx, &lapse.HeldPaymentListParams{Provider: n.Provider, TxnID: n.TxnID})
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	h := hs[0]
	for range maxStaleRetries {
		whole := n.OrderNo == h.OrderNo && n.Amount == h.Amount && n.Currency == h.Currency
		switch {
		case h.Status == lapse.HeldRefunded && n.Amount == h.Amount && n.Currency == h.Currency:
			return h, nil
		case h.Status == lapse.HeldRefunding && n.OrderNo == h.OrderNo:
			got, err := e.heldRefundAnswered(ctx, h, &lapse.ProviderRefund{RefundID: n.RefundID, TxnID: n.TxnID, Amount: n.Amount,
				Currency: n.Currency, Status: lapse.RefundSucceeded}, nil)
			if errors.Is(err, lapse.ErrStale) {
				return e.store.HeldPaymentGet(ctx, h.ID)
			}
			return got, err
		case (h.Status == lapse.HeldWaiting || h.Status == lapse.HeldReview) && whole:
			got, err := e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: h.Status, To: lapse.HeldRefunded,
				RefundID: n.RefundID, At: e.clock.Now(), Reason: lapse.CleanReason(fmt.Sprintf(
					"refunded by %s (refund %s), which Lapse did not ask for: reported by its refund callback", n.Provider, n.RefundID))})
			if errors.Is(err, lapse.ErrStale) {
				if h, err = e.store.HeldPaymentGet(ctx, h.ID); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			e.log.Warn("a payment held without its order was refunded at its provider, not by Lapse", "provider", h.Provider,
				"txn_id", h.TxnID, "order_no", h.OrderNo, "refund_id", n.RefundID, "was", h.Status)
			e.metrics.payments.WithLabelValues(h.Provider, string(lapse.PaymentRefunded)).Inc()
			e.metrics.refunds.WithLabelValues(refundHeldPayment, refundSucceeded).Inc()
			return got, nil
		}
		return ps.heldContradicted(ctx, h, fmt.Sprintf("a refund notice (refund %s) reports %s refunded for order %s, which Lapse did not ask for",
			n.RefundID, lapse.Money(n.Amount, n.Currency), n.OrderNo))
	}
	return nil, fmt.Errorf("refund notice of held payment %d: %w", h.ID, lapse.ErrStale)
}

// HeldPayments lists payments held without their order, by id.
func (e *Engine) HeldPayments(ctx context.Context, p *lapse.HeldPaymentListParams) ([]*lapse.HeldPayment, error) {
	return e.store.HeldPaymentList(ctx, p)
}

// HeldPayment returns the held payment with id, or
// lapse.ErrHeldPaymentNotFound.
func (e *Engine) HeldPayment(ctx context.Context, id int64) (*lapse.HeldPayment, error) {
	return e.store.HeldPaymentGet(ctx, id)
}

// Errors of an operator's action on a held payment that cannot be taken:
// ECONFLICT, nothing changed. Errors that refine them name the payment.
var (
	// ErrHeldNotInReview: the held payment is not in review (it waits for
	// its order, or is settled already).
	ErrHeldNotInReview = &lapse.Error{Code: lapse.ECONFLICT, Message: "the held payment is not in review"}
	// ErrHeldNoProvider: no payment provider port is configured for the
	// held payment's provider, so Lapse cannot refund it.
	ErrHeldNoProvider = &lapse.Error{Code: lapse.ECONFLICT, Message: "no payment provider port can refund the held payment"}
)

// HeldRefundKey is the idempotency key of the refund of a held payment.
func HeldRefundKey(h *lapse.HeldPayment) string {
	return "lapse-refund-held-" + h.Provider + "-" + h.TxnID
}

// RefundHeldPayment has an operator refund the held payment id, which must
// be in review, in full through its provider's port, under HeldRefundKey.
// It moves to refunding first (the operator's action, audited with that
// change when ctx carries a row: WithAudit), then as the provider answers:
// refunded when it succeeded; refunding while it processes or when its
// answer was lost (the HeldMatcher asks again); back to review, with why,
// when the provider refused or reported another refund. It returns the
// held payment as it then stands.
//
// Errors, with nothing changed: lapse.ErrHeldPaymentNotFound;
// ErrHeldNotInReview; ErrHeldNoProvider.
func (e *Engine) RefundHeldPayment(ctx context.Context, id int64, by Actor) (*lapse.HeldPayment, error) {
	h, err := e.heldInReview(ctx, id)
	if err != nil {
		return nil, err
	}
	prov := e.feat.payments.providers[h.Provider]
	if prov == nil {
		return nil, lapse.Refine(ErrHeldNoProvider, "held payment %d: no payment provider port is configured for %s", id, h.Provider)
	}
	h, err = e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: id, From: lapse.HeldReview, To: lapse.HeldRefunding,
		RefundID: HeldRefundKey(h), By: by.resolver(), At: e.clock.Now()})
	if errors.Is(err, lapse.ErrStale) {
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d moved on meanwhile", id)
	}
	if err != nil {
		return nil, err
	}
	ctx = withoutAudit(ctx) // what follows is the provider's answer, not the operator's action
	ref, err := prov.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: HeldRefundKey(h), TxnID: h.TxnID, OrderNo: h.OrderNo,
		Amount: h.Amount, Currency: h.Currency, Reason: "payment held without its order: refunded by " + by.resolver()})
	return e.heldRefundAnswered(ctx, h, ref, err)
}

// heldRefundAnswered records the provider's answer (ref, or err) about the
// refund of h, refunding: see RefundHeldPayment.
func (e *Engine) heldRefundAnswered(ctx context.Context, h *lapse.HeldPayment, ref *lapse.ProviderRefund, err error) (*lapse.HeldPayment, error) {
	back := func(why string) (*lapse.HeldPayment, error) {
		got, uerr := e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: lapse.HeldRefunding, To: lapse.HeldReview,
			Reason: lapse.CleanReason(why), At: e.clock.Now()})
		if uerr != nil {
			return nil, uerr
		}
		e.log.Warn("the refund of a held payment did not go through; it is in review again", "provider", h.Provider, "txn_id", h.TxnID, "reason", why)
		e.metrics.refunds.WithLabelValues(refundHeldPayment, refundReview).Inc()
		return got, nil
	}
	switch {
	case errors.Is(err, lapse.ErrRefused):
		return back("refund refused: " + lapse.Reason(err))
	case err != nil:
		// Sent, perhaps: the HeldMatcher asks under the same key.
		e.log.Warn("the refund of a held payment has no answer yet; it is asked for again", "provider", h.Provider, "txn_id", h.TxnID, "err", err)
		return h, nil
	}
	if dis := reportDisagrees(h.Provider, HeldRefundKey(h), ref, h.TxnID, h.Amount, h.Currency); dis != nil {
		return back(dis.Error())
	}
	switch ref.Status {
	case lapse.RefundSucceeded:
		got, err := e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: lapse.HeldRefunding, To: lapse.HeldRefunded,
			RefundID: ref.RefundID, Reason: "refunded", At: e.clock.Now()})
		if err != nil {
			return nil, err
		}
		e.metrics.payments.WithLabelValues(h.Provider, string(lapse.PaymentRefunded)).Inc()
		e.metrics.refunds.WithLabelValues(refundHeldPayment, refundSucceeded).Inc()
		return got, nil
	case lapse.RefundProcessing:
		return h, nil
	}
	return back(fmt.Sprintf("refund refused: %s reports refund %s %s", h.Provider, ref.RefundID, ref.Status))
}

// DismissHeldPayment has an operator take the held payment id, in review,
// off the desk with note, which says what became of the money (it is kept
// as written). The change is audited when ctx carries a row (WithAudit).
// It returns the held payment as dismissed.
//
// Errors, with nothing changed: EINVALID for an empty note, or one that
// lapse.ReviewResolveParams would refuse; lapse.ErrHeldPaymentNotFound;
// ErrHeldNotInReview.
func (e *Engine) DismissHeldPayment(ctx context.Context, id int64, note string, by Actor) (*lapse.HeldPayment, error) {
	if strings.TrimSpace(note) == "" {
		return nil, lapse.FieldError("note", "is required: say what became of the money")
	}
	now := e.clock.Now()
	check := lapse.ReviewResolveParams{ID: id, At: now, By: by.resolver(), Note: note}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	if _, err := e.heldInReview(ctx, id); err != nil {
		return nil, err
	}
	got, err := e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: id, From: lapse.HeldReview, To: lapse.HeldDismissed,
		By: by.resolver(), Note: note, Reason: "dismissed by an operator", At: now})
	if errors.Is(err, lapse.ErrStale) {
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d moved on meanwhile", id)
	}
	return got, err
}

// ErrHeldNotPayable: an operator asked to apply a held payment that its
// order cannot take (ECONFLICT, nothing changed): the order does not exist,
// is closed or paid, its payment window had closed at the payment's
// provider time, or the payment differs from it (amount, currency,
// merchant, a time it cannot have, a doubt of its callback). Errors that
// refine it say which, as the payment path would have.
var ErrHeldNotPayable = &lapse.Error{Code: lapse.ECONFLICT, Message: "the held payment's order cannot take it"}

// heldApply is an operator's apply of held payment id (ApplyHeldPayment),
// by whom: the payment path refuses what it would record late or in review.
type heldApply struct {
	id int64
	by string
}

func (op *heldApply) refuse(why string) error {
	return lapse.Refine(ErrHeldNotPayable, "held payment %d is not applied: %s", op.id, why)
}

// ApplyHeldPayment has an operator apply the held payment id, in review, to
// its order through the payment path, as its callback would be applied
// once the order exists (the HeldMatcher's rules: its provider time judged
// against the order's deadline, and checked against when it was held, not
// the order's creation; amount, currency and merchant checked): the order
// moves through its flow's pay event, with the payment's row, in one
// transaction, audited with that change when ctx carries a row (WithAudit).
// The held payment is then applied, by the operator. It is the way out for
// one whose order exists, created no later than its provider time, which
// is neither refunded nor dismissed (RefundHeldPayment).
//
// Errors, with nothing changed: lapse.ErrHeldPaymentNotFound;
// ErrHeldNotInReview (also when its transaction is recorded as a payment
// that it does not match: settle it there); ErrHeldNotPayable when the
// order does not exist or cannot take it (closed, paid, late, another
// amount or currency…), where the payment path would record it late or in
// review.
func (e *Engine) ApplyHeldPayment(ctx context.Context, id int64, by Actor) (*lapse.HeldPayment, error) {
	if id <= 0 {
		return nil, lapse.FieldError("id", "must be a held payment id, a positive integer")
	}
	h, err := e.store.HeldPaymentGet(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.Status != lapse.HeldReview {
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d is %s, not in review", id, h.Status)
	}
	op := &heldApply{id: id, by: by.resolver()}
	pay, err := e.store.PaymentGet(ctx, h.Provider, h.TxnID)
	if errors.Is(err, lapse.ErrPaymentNotFound) {
		pay, err = e.feat.payments.applyToOrder(ctx, heldNotice(h), true, h.CreatedAt, op)
	}
	if err != nil {
		return nil, err
	}
	// Applied now, or (an earlier apply that stopped before marking it, a
	// callback again) recorded as its order's payment already.
	if pay.Status != lapse.PaymentApplied || heldConflict(h, &lapse.PaymentNotice{OrderNo: pay.OrderNo, Amount: pay.Amount, Currency: pay.Currency}) != "" {
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d: its transaction is recorded as payment %d of order %s, %s; settle it there",
			id, pay.ID, pay.OrderNo, pay.Status)
	}
	// Audited here when the payment was recorded before (no write of this
	// call carried the row yet).
	got, err := e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: id, From: lapse.HeldReview, To: lapse.HeldApplied,
		By: op.by, Reason: fmt.Sprintf("applied to order %s as payment %d by %s", pay.OrderNo, pay.ID, op.by), At: e.clock.Now()})
	if errors.Is(err, lapse.ErrStale) {
		// Moved meanwhile (a refund callback, another operator): the
		// payment stands, and reconcile names the two.
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d moved on meanwhile; its transaction is applied to order %s as payment %d",
			id, pay.OrderNo, pay.ID)
	}
	if err != nil {
		return nil, err
	}
	e.log.Info("a held payment was applied to its order by an operator", "provider", h.Provider, "txn_id", h.TxnID,
		"order_no", pay.OrderNo, "payment_id", pay.ID, "by", op.by)
	return got, nil
}

// heldInReview returns the held payment id when it is in review.
func (e *Engine) heldInReview(ctx context.Context, id int64) (*lapse.HeldPayment, error) {
	if id <= 0 {
		return nil, lapse.FieldError("id", "must be a held payment id, a positive integer")
	}
	h, err := e.store.HeldPaymentGet(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.Status != lapse.HeldReview {
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d is %s, not in review", id, h.Status)
	}
	// Its callback may have paid its order meanwhile (its window passed
	// as the order came): the money is the order's, to refund through it.
	switch pay, err := e.store.PaymentGet(ctx, h.Provider, h.TxnID); {
	case err == nil:
		return nil, lapse.Refine(ErrHeldNotInReview, "held payment %d: its transaction is recorded as payment %d of order %s, %s; settle it there",
			id, pay.ID, pay.OrderNo, pay.Status)
	case !errors.Is(err, lapse.ErrPaymentNotFound):
		return nil, err
	}
	// The payment path looks at a held payment only for a callback whose
	// provider time is before its order was created (to the second; see
	// applyToOrder): its callback again, under the number of an order
	// created at or before that time, pays the order as any payment. A
	// provider time may be ahead of the callback (by up to
	// MaxPaidAtAhead), and a held payment may be on the desk before it
	// (a window shorter than that, or a contradiction): refunded or
	// dismissed then, the order would be paid with money given back (S3).
	// So the operator waits until an order created from now on is created
	// after that time, and not while one exists that it would pay.
	now := e.clock.Now()
	if after := h.PaidAt.Truncate(time.Second).Add(time.Second); now.Before(after) {
		return nil, lapse.Errorf(lapse.ECONFLICT, "held payment %d: its provider time %s is not past yet: its callback again would pay an order %s created until then; try again from %s",
			id, h.PaidAt.UTC().Format(time.RFC3339Nano), h.OrderNo, after.UTC().Format(time.RFC3339))
	}
	switch o, err := e.store.OrderGet(ctx, h.OrderNo); {
	case err == nil && !h.PaidAt.Before(o.CreatedAt.Truncate(time.Second)):
		return nil, lapse.Errorf(lapse.ECONFLICT, "held payment %d: order %s exists, created at %s, not after the payment's provider time %s: its callback again pays the order; apply it to the order instead (ApplyHeldPayment), or settle it there once the callback does",
			id, o.OrderNo, o.CreatedAt.UTC().Format(time.RFC3339Nano), h.PaidAt.UTC().Format(time.RFC3339Nano))
	case err != nil && !errors.Is(err, lapse.ErrOrderNotFound):
		return nil, err
	}
	return h, nil
}
