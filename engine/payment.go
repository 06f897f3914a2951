package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// PaymentConfig configures the payment path.
type PaymentConfig struct {
	// Providers are the payment ports, by provider name (as in the callback
	// URL). Refunds of late payments and the closer's questions about orders
	// whose customer started paying go through them. With none, the refund
	// subscription does not run and late payments wait for an operator.
	Providers map[string]lapse.PaymentProvider
	// Merchants name, by provider, the merchant account a payment, or a
	// group member's charge, must report having paid; a provider not
	// listed is not checked here (its callback may check its own account,
	// as WeChat Pay's mchid is).
	Merchants map[string]string
}

// RefundSubscriber is the name of the built-in subscription that refunds
// late payments.
const RefundSubscriber = "refund"

// payments is the payment feature: it serves the flows that take payments
// (lapse.Flow.Pays). It applies verified provider callbacks (this file),
// gives the customer who started paying a grace and asks the provider before
// an order closes (intent.go), refunds late payments (refund.go) and
// merchant refunds of paid orders (order_refund.go), and reconciles what was
// captured (reconcile.go).
type payments struct {
	e         *Engine
	providers map[string]lapse.PaymentProvider
	merchants map[string]string
}

func newPayments(e *Engine, cfg PaymentConfig) *payments {
	return &payments{e: e, providers: cfg.Providers, merchants: cfg.Merchants}
}

func (ps *payments) serves(f *lapse.Flow) bool { return f.Pays != "" }

// checkCreate refuses a free order (an amount of 0) in a flow whose orders
// are paid: no provider reports a payment of nothing, so such an order
// could only wait for its deadline and close. The synthetic probe's orders,
// in XXX, carry no money and are never paid.
func (ps *payments) checkCreate(req *lapse.OrderCreate) error {
	if req.Amount == 0 && !lapse.IsProbeOrderNo(req.OrderNo) {
		return lapse.FieldError("amount", "must be positive: the orders of flow %s are paid, and no payment of nothing ever comes", req.Flow)
	}
	return nil
}

// ApplyPayment applies what a verified provider callback reports.
//
// A paid notice fires its order's flow Pays event, judged at the provider's
// success time, in one transaction with the payment's row: the order moves
// UNPAID → PAID only through the flow's guarded transition. A payment the
// order cannot take (it is closed, already paid, or the payment came after
// its deadline) is recorded late, and its payment.late event is refunded by
// the refund subscriber. The same provider transaction again changes nothing
// and returns the payment as recorded.
//
// A payment whose amount, currency or merchant differs from its order's,
// whose provider time its order cannot have (before the order was created,
// or more than MaxPaidAtAhead ahead of the clock), or whose notice asks for
// review (PaymentNotice.Review), is recorded for review (payment.review)
// and does not move the order: the money was captured, so it must be on the
// books, and only an operator can tell what it was for.
//
// A payment for an order whose flow takes no payments (a group buy, whose
// members are charged instead) is recorded for review too: it was captured,
// and Lapse cannot tell what it was for (a member's charge reported under
// the group's number must not be refunded blindly).
//
// A notice whose order number is a group member's charge key is about that
// member's charge, which its provider knows by that key: one that confirms
// a charge whose answer was lost records it as the provider's answer to the
// charge would; one that repeats the charge recorded changes nothing; one
// that contradicts it (another amount, currency or merchant, a second
// transaction, a charge Lapse did not ask for, a time the charge cannot
// have) is put in review on the group, a second transaction recorded as a
// payment in review. Nothing is charged or marked charged twice (S7). A
// notice that carries a member's charge transaction under the group's
// number, or one no order has, records no payment: the transaction is
// counted once, as the charge, and the notice is put in review on the
// group. Under the number of an order that takes payments the members'
// charges are not looked at: a provider reports a charge under the key
// Lapse charged it by, and that read, outside the batched ones, cost a
// third of the callbacks a second (BenchmarkCallback, 2026-12-06). The payment returned is
// nil, but for a second transaction. A refund notice for a member's charge
// (by its key or its transaction), which Lapse never refunds, is put in
// review on the group.
//
// A notice that contradicts the payment recorded under its provider
// transaction (another order, amount or currency) is not a replay: nothing
// moves, and it is put in review for an operator (a review row on the
// order it names, or on the payment's when that order does not exist),
// once however often it is sent; the payment as recorded is returned.
//
// A verified callback reports a capture (or a refund) its provider made,
// so it is never refused for a field Lapse cannot take as it is. A payment
// in a currency that is not three capital letters (as sent, cleaned and
// bounded) is recorded in review, as one that does not match its order is.
// An unreadable notice (lapse.NoticeUnreadable: its amount, time or kind
// cannot be read) records no money: it is put in review on its
// transaction's payment when that is recorded, and otherwise on the order
// it names, once however often it comes.
//
// A refunded notice completes the refund of a late payment, or a merchant
// refund of the order an applied payment paid. One that names another
// order or currency than the payment's, or another amount than the refund
// Lapse asked for (a late payment's is refunded only in full; a merchant
// refund's is its own, or, in a notice of what the payment has had
// refunded in all, its own with those of the payment's earlier refunds),
// completes nothing and is put in review. A refunded notice of a payment
// held without its order completes its refund, or, for one Lapse did not
// ask for, refunds it when it is in full for its order and currency, and
// puts it in review otherwise (heldRefundNoticed). A refunded or dispute
// notice that names no order (a Stripe dispute's) is of its payment's. A
// refunded notice with a Review (a dispute's withdrawal of the money) of
// an applied payment is recorded as a refund in review naming it
// (unaskedRefund), once per refund id; of a late payment it refunds it, and
// of one refunding or refunded it moves nothing; either way the dispute is
// put in review on the payment. A dispute notice (a dispute opened,
// or its money given back) puts the payment in review with its Review
// (disputeNoticed), and ENOTFOUND when Lapse has no such payment.
//
// A paid notice for an order that does not exist (and is no member's charge
// key, and whose transaction is not recorded for another order, which is a
// contradiction in review) is held without its order (held_payment.go):
// recorded once per transaction, and returned as a payment whose status is
// lapse.PaymentHeld, with no ID. Its callback may have overtaken its order's
// creation: the HeldMatcher applies it here once the order exists. The same
// notice again is a replay of it; one that says another order, amount or
// currency puts it in review. Once the order exists, the notice again is
// applied only while its held payment waits: one that an operator has (in
// review, refunded, dismissed) or that is held for another order, amount or
// currency pays nothing, and is noted on the held payment, returned as
// held. So does a paid notice under the number of any existing order whose
// transaction is held for another order, amount or currency, or settled
// by an operator or its provider, whatever its time: the payment's own
// write sees the held payment (lapse.ErrPaymentHeld, at no read of its
// own), and nothing is recorded, not even late or in review; a waiting
// held payment is put in review, naming the order.
//
// Errors, with nothing written: EINVALID for a notice that names no
// transaction, or a refund notice no refund; ENOTFOUND for a refund notice of a payment
// Lapse does not have, or an unreadable notice of an order that does not
// exist, so that the provider sends it again.
func (e *Engine) ApplyPayment(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	return e.feat.payments.apply(ctx, n)
}

func (ps *payments) apply(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	return ps.applyNotice(ctx, n, time.Time{})
}

// applyNotice is apply; heldAt, when set, is when n was received and held
// without its order (held_payment.go), which the HeldMatcher now applies.
func (ps *payments) applyNotice(ctx context.Context, n *lapse.PaymentNotice, heldAt time.Time) (*lapse.Payment, error) {
	e := ps.e
	// A transaction, refund or order id is a key Lapse finds the notice by
	// again: one that no store keeps (too long, not UTF-8, NUL) names
	// nothing, as a missing one does.
	switch {
	case n.TxnID == "":
		// No capture is found, replayed or refunded by no transaction.
		return nil, lapse.FieldError("txn_id", "is required: the provider's transaction id")
	case n.Kind == lapse.NoticeRefunded && n.RefundID == "":
		return nil, lapse.FieldError("refund_id", "is required on a refund notice")
	}
	for _, f := range []struct{ name, id string }{{"txn_id", n.TxnID}, {"refund_id", n.RefundID}, {"order_no", n.OrderNo}} {
		if len(f.id) > lapse.MaxTxnIDLen || !lapse.StorableText(f.id) {
			return nil, lapse.FieldError(f.name, "must be UTF-8 text without NUL of at most %d bytes, as every provider's is", lapse.MaxTxnIDLen)
		}
	}
	if !lapse.WellFormedCurrency(n.Currency) {
		// Kept as the provider sent it, within what a store keeps as text.
		c := *n
		c.Currency = lapse.CleanReason(n.Currency)
		n = &c
	}
	if len(n.Merchant) > lapse.MaxTxnIDLen || !lapse.StorableText(n.Merchant) {
		// No account is named so: the notice cannot confirm whom it paid.
		c := *n
		c.Merchant = lapse.CleanReason(n.Merchant)
		if c.Kind == lapse.NoticePaid && c.Review == "" {
			c.Review = fmt.Sprintf("the merchant account it names is not text of at most %d bytes: %q", lapse.MaxTxnIDLen, c.Merchant)
		}
		n = &c
	}
	switch n.Kind {
	case lapse.NoticeRefunded:
		return ps.refundNoticed(ctx, n)
	case lapse.NoticeUnreadable:
		return ps.unreadableNoticed(ctx, n)
	case lapse.NoticeDispute:
		return ps.disputeNoticed(ctx, n)
	}
	// A member's charge is not a payment: its transaction, under the
	// group's number or one no order has, is counted once, as the charge.
	// It is looked for only when the notice's order takes no payments
	// (errTakesNoPayments) or does not exist, so that a payment of an
	// order costs no read beyond its batched ones.
	got, err := ps.applyToOrder(ctx, n, false, heldAt, nil)
	if !errors.Is(err, errTakesNoPayments) && lapse.ErrorCode(err) != lapse.ENOTFOUND {
		return got, err
	}
	if handled, herr := e.feat.groups.txnNoticed(ctx, n); handled {
		return nil, herr
	}
	if errors.Is(err, errTakesNoPayments) {
		return ps.applyToOrder(ctx, n, true, heldAt, nil) // decided again: recorded in review
	}
	return got, err
}

// errTakesNoPayments: the notice's order follows a flow that takes no
// payments, and the members' charges were not looked at yet.
var errTakesNoPayments = errors.New("the order takes no payments")

// applyToOrder applies n to the order it names (apply); membersLooked
// says whether a member's charge of n's transaction was looked for, and
// until it was, an order that takes no payments is errTakesNoPayments.
// heldAt is when n was held without its order, or zero (applyNotice).
// op, when set, is an operator's apply of the held payment n is the notice
// of (ApplyHeldPayment): n pays its order, or nothing is written and it is
// ErrHeldNotPayable where the payment path would record it late or in
// review.
func (ps *payments) applyToOrder(ctx context.Context, n *lapse.PaymentNotice, membersLooked bool, heldAt time.Time, op *heldApply) (*lapse.Payment, error) {
	e := ps.e
	// The same transaction again is found by the store's unique key on
	// (provider, txn id), whichever way it is recorded below: it writes
	// nothing and returns the payment recorded, so that a first callback is
	// not made to read before it writes; recorded then tells a replay from
	// a contradiction.
	unknown := false
	var held *lapse.HeldPayment // of n's transaction, once read
	heldRead := false
	c := orderChange{orderNo: n.OrderNo, stale: "payment " + n.TxnID + " of order " + n.OrderNo,
		missing: func() error {
			unknown = true
			return lapse.Refine(lapse.ErrOrderNotFound, "payment %s of %s is for order %s, which does not exist", n.TxnID, n.Provider, n.OrderNo)
		}}
	got, err := changeOrder(ctx, e, c, func(s lapse.Store, o *lapse.Order, flow *lapse.Flow) (*lapse.Payment, error) {
		now := e.clock.Now()
		pay := &lapse.Payment{Provider: n.Provider, TxnID: n.TxnID, OrderID: o.ID, OrderNo: o.OrderNo, Amount: n.Amount,
			Currency: n.Currency, Merchant: n.Merchant, PaidAt: n.PaidAt, Status: lapse.PaymentApplied, Raw: n.Raw,
			CreatedAt: now, UpdatedAt: now}
		if !ps.serves(flow) {
			if op != nil {
				return nil, op.refuse(fmt.Sprintf("order %s follows flow %s, which takes no payments", o.OrderNo, flow.Name))
			}
			if !membersLooked {
				return nil, errTakesNoPayments
			}
			why := fmt.Sprintf("order %s follows flow %s, which takes no payments", o.OrderNo, flow.Name)
			return ps.recordPayment(ctx, o, n, pay, lapse.PaymentReview, lapse.EventPaymentReview, why)
		}
		at := heldAt
		if at.IsZero() && (n.PaidAt.IsZero() || n.PaidAt.Before(o.CreatedAt.Truncate(time.Second))) {
			// Paid before its order was created, or at no time it says:
			// its callback may have overtaken the order's creation and
			// been held (the HeldMatcher applies those with heldAt set). A
			// held payment that an operator has, or that says another
			// order or amount, is not applied again: a refunded one would
			// leave the order paid with its money given back (S3). Read
			// only then, so that a payment costs no read of its own (a
			// third of the callbacks a second, BenchmarkCallback): a held
			// payment's own time is at most MaxPaidAtAhead past its
			// callback, which came before the order, and one an operator
			// has waited out its window (or was contradicted, and then the
			// operator's actions and reconcile find the payment).
			if !heldRead {
				heldRead = true
				var herr error
				if held, herr = ps.heldOf(ctx, n); herr != nil {
					return nil, herr
				}
			}
			if why := heldTaken(held, n); why != "" {
				h, err := ps.heldContradicted(ctx, held, why)
				if err != nil {
					return nil, err
				}
				return heldView(h), nil
			}
			if held != nil && heldConflict(held, n) == "" && !n.PaidAt.IsZero() {
				// Paid before its order was created: a contradiction,
				// unless its callback overtook the creation and was held.
				at = held.CreatedAt
			}
		}
		if why := ps.payMismatch(o, n, now, at); why != "" {
			if op != nil {
				return nil, op.refuse(why)
			}
			return ps.recordPayment(ctx, o, n, pay, lapse.PaymentReview, lapse.EventPaymentReview, why)
		}
		firing := lapse.Firing{Event: flow.Pays, Now: now, At: n.PaidAt, FiredBy: lapse.FiredByPayment,
			Actor: n.Provider, Reason: "payment " + n.TxnID}
		if op != nil {
			firing.Actor = op.by
			firing.Reason = fmt.Sprintf("payment %s, held payment %d applied by %s", n.TxnID, op.id, op.by)
			pay.Reason = lapse.CleanReason(fmt.Sprintf("held without its order (held payment %d); applied by %s", op.id, op.by))
		}
		p, perr := flow.Plan(o, firing)
		if perr == nil {
			// S2 is the engine's, not the flow's: a payment made, by the
			// provider's clock, once the order's payment window closed
			// pays nothing, whatever guard the flow put on its pay event
			// (a YAML flow may leave out before_deadline). A notice
			// without a time is judged at now, as Plan's guard judges it.
			at := n.PaidAt
			if at.IsZero() {
				at = now
			}
			perr = lapse.BeforeDeadline(o, at)
		}
		if lapse.ErrorCode(perr) == lapse.ECONFLICT {
			if op != nil {
				return nil, op.refuse(lapse.ErrorMessage(perr))
			}
			return ps.recordPayment(ctx, o, n, pay, lapse.PaymentLate, lapse.EventPaymentLate, lapse.ErrorMessage(perr))
		}
		if perr != nil {
			return nil, perr
		}
		// The payment and the order's transition commit together (one
		// statement on PostgreSQL), or neither does.
		e.fanOut(o, p.Outbox)
		got, created, err := s.PaymentCreate(ctx, &lapse.PaymentCreateParams{Payment: pay, Transition: p})
		if errors.Is(err, lapse.ErrPaymentHeld) {
			if op != nil {
				return nil, op.refuse("the held payment moved on meanwhile")
			}
			// Held for another order (or settled): the write's own
			// statement saw it, at no read of its own.
			return ps.heldRefused(ctx, n)
		}
		if err != nil {
			return nil, err // lapse.ErrStale: the order moved meanwhile, and is decided again
		}
		if !created {
			if op != nil {
				return got, nil // recorded meanwhile: ApplyHeldPayment looks at it
			}
			return ps.recorded(ctx, got, n, o)
		}
		e.committed(flow.Name, p)
		e.metrics.payments.WithLabelValues(n.Provider, string(lapse.PaymentApplied)).Inc()
		return got, nil
	})
	if unknown && op != nil {
		return nil, op.refuse(fmt.Sprintf("no order %s exists", n.OrderNo))
	}
	if unknown {
		return ps.unknownOrder(ctx, n, err, heldAt)
	}
	return got, err
}

// unknownOrder answers a paid notice for an order that does not exist: one
// about a group member's charge, named by its charge key (chargeNoticed);
// a contradiction when its transaction is recorded (for another order,
// then); and otherwise a payment held without its order (hold). A notice
// held already (heldAt set: the HeldMatcher's) is err: its order went again.
func (ps *payments) unknownOrder(ctx context.Context, n *lapse.PaymentNotice, err error, heldAt time.Time) (*lapse.Payment, error) {
	if pay, handled, merr := ps.e.feat.groups.chargeNoticed(ctx, n); handled {
		return pay, merr
	}
	rec, gerr := ps.e.store.PaymentGet(ctx, n.Provider, n.TxnID)
	switch {
	case errors.Is(gerr, lapse.ErrPaymentNotFound) && heldAt.IsZero():
		return ps.hold(ctx, n)
	case errors.Is(gerr, lapse.ErrPaymentNotFound):
		return nil, err
	case gerr != nil:
		return nil, gerr
	}
	return ps.recorded(ctx, rec, n, nil)
}

// payMismatch says how a payment differs from what its order asked for
// (amount, currency, or the merchant configured for its provider), or how
// its provider time contradicts the order (paidAtMismatch, judged at now),
// or why its callback asked for review, or "". A payment held without its
// order (heldAt set) was reported before its order existed, so its time is
// checked against when it was received instead (heldPaidAtMismatch).
func (ps *payments) payMismatch(o *lapse.Order, n *lapse.PaymentNotice, now, heldAt time.Time) string {
	if !lapse.WellFormedCurrency(n.Currency) {
		return fmt.Sprintf("the payment's currency is not a currency code (three capital letters): %d minor units in %q; order %s is %s",
			n.Amount, n.Currency, o.OrderNo, lapse.Money(o.Amount, o.Currency))
	}
	if n.Amount != o.Amount || n.Currency != o.Currency {
		return fmt.Sprintf("the payment is %s; order %s is %s", lapse.Money(n.Amount, n.Currency), o.OrderNo, lapse.Money(o.Amount, o.Currency))
	}
	if why := ps.merchantMismatch(n.Provider, n.Merchant); why != "" {
		return "the payment was " + why
	}
	why := paidAtMismatch(o, n.PaidAt, now)
	if !heldAt.IsZero() {
		why = heldPaidAtMismatch(n.PaidAt, heldAt)
	}
	if why != "" {
		return why
	}
	return n.Review
}

// merchantMismatch says how merchant, the account provider reports it paid
// (made to merchant "x", not "y"), differs from the account configured for
// provider (PaymentConfig.Merchants), or "": a provider not configured is
// not checked here.
func (ps *payments) merchantMismatch(provider, merchant string) string {
	if m := ps.merchants[provider]; m != "" && merchant != m {
		return fmt.Sprintf("made to merchant %q, not %q", merchant, m)
	}
	return ""
}

// MaxPaidAtAhead is how far a payment's provider time may be ahead of
// Lapse's clock: the drift between two clocks that a callback's signature
// window allows (payment.DefaultTolerance, and Stripe's and WeChat Pay's
// 300 s).
const MaxPaidAtAhead = 5 * time.Minute

// paidAtMismatch says why paidAt, a provider's time of a payment for order
// o, cannot be true, judged at now, or "". A payment cannot be made before
// its order exists: a time before the second in which o was created (most
// providers report whole seconds) is a contradiction. Nor can it be made
// after the callback that reports it: a time more than MaxPaidAtAhead ahead
// of now is one too. Such a time cannot bring a late payment in time (a
// payment is judged at its provider time, and a later time is only later),
// but applying it would record a time that is not true, and would pay, or
// refund as late, a payment whose real time is unknown: an operator decides.
// A zero paidAt is no time (the payment is judged at now, as lapse.Firing's
// At is), not one before the order.
func paidAtMismatch(o *lapse.Order, paidAt, now time.Time) string {
	switch {
	case paidAt.IsZero():
		return ""
	case paidAt.Before(o.CreatedAt.Truncate(time.Second)):
		return fmt.Sprintf("the provider reports it paid at %s, before order %s was created at %s: a payment cannot predate its order",
			paidAt.UTC().Format(time.RFC3339Nano), o.OrderNo, o.CreatedAt.UTC().Format(time.RFC3339Nano))
	case paidAt.After(now.Add(MaxPaidAtAhead)):
		return fmt.Sprintf("the provider reports it paid at %s, %s ahead of Lapse's clock (%s), more than the %s clocks may drift",
			paidAt.UTC().Format(time.RFC3339Nano), paidAt.Sub(now).Round(time.Second), now.UTC().Format(time.RFC3339Nano), MaxPaidAtAhead)
	}
	return ""
}

// recordPayment records a payment its order cannot take, with the event
// that acts on it, in one transaction: late (payment.late: the refund
// subscriber refunds it) or review (payment.review: it does not match its
// order, or its order's flow takes no payments, and an operator decides;
// refunding it blindly could refund the wrong amount). The order does not
// change. A payment recorded already under its transaction is not written
// again: recorded answers n with it.
func (ps *payments) recordPayment(ctx context.Context, o *lapse.Order, n *lapse.PaymentNotice, pay *lapse.Payment, st lapse.PaymentStatus, typ, why string) (*lapse.Payment, error) {
	e := ps.e
	if st == lapse.PaymentLate && ps.providers[pay.Provider] == nil {
		// Nothing here can refund it (callbacks are taken for its
		// provider, and no port): an operator has it from the start, in
		// the payment's own statement, rather than through a refund
		// delivery that could only find so, at some five commits a
		// late payment (http BenchmarkCallback's racing payments).
		st, typ = lapse.PaymentReview, lapse.EventPaymentReview
		why = fmt.Sprintf("%s; no payment provider port is configured for %s to refund it", why, pay.Provider)
	}
	pay.Status, pay.Reason = st, lapse.CleanReason(why)
	evs := []lapse.OutboxEvent{lapse.NewPaymentEvent(typ, o, pay)}
	e.fanOut(o, evs)
	p := &lapse.PaymentCreateParams{Payment: pay, Outbox: evs}
	if st == lapse.PaymentReview {
		p.Review = paymentReview(o, pay, pay.CreatedAt)
	}
	got, created, err := e.store.PaymentCreate(ctx, p)
	if errors.Is(err, lapse.ErrPaymentHeld) {
		return ps.heldRefused(ctx, n)
	}
	if err != nil {
		return nil, err
	}
	if !created {
		return ps.recorded(ctx, got, n, o)
	}
	log := e.log.Warn
	if st == lapse.PaymentReview {
		log = e.log.Error
	}
	log("payment recorded but not applied", "order_no", o.OrderNo, "provider", pay.Provider, "txn_id", pay.TxnID,
		"status", st, "reason", why)
	e.metrics.payments.WithLabelValues(pay.Provider, string(st)).Inc()
	e.delivered(evs)
	return got, nil
}

// paymentReview is the review row of a payment that goes to review: it
// stands on the operators' desk with the payment's reason.
func paymentReview(o *lapse.Order, pay *lapse.Payment, at time.Time) *lapse.Review {
	return &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, CreatedAt: at,
		Reason: lapse.CleanReason(fmt.Sprintf("payment %s of %s (%s) is in review: %s", pay.TxnID, pay.Provider, lapse.Money(pay.Amount, pay.Currency), pay.Reason))}
}

// refundNoticed completes the refund of a late payment that the provider
// reports done, or of a merchant refund (orderRefundNoticed). A payment
// already refunded is left as it is. A notice that contradicts the payment
// (another order or currency, or another amount than a late payment's,
// which is refunded in full) completes nothing: the books would say the
// money went back when it did not, or not all of it. A refund of a payment
// in review is put on the desk beside it, for the operator who has it.
func (ps *payments) refundNoticed(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	e := ps.e
	for range maxStaleRetries {
		pay, err := e.store.PaymentGet(ctx, n.Provider, n.TxnID)
		if errors.Is(err, lapse.ErrPaymentNotFound) {
			if handled, merr := e.feat.groups.refundNoticed(ctx, n); handled {
				return nil, merr
			}
			if h, herr := ps.heldRefundNoticed(ctx, n); h != nil || herr != nil {
				if herr != nil {
					return nil, herr
				}
				return heldView(h), nil
			}
		}
		if err != nil {
			return nil, err
		}
		if n.OrderNo == "" {
			// A notice that names no order (a Stripe dispute's) is of
			// its payment's.
			c := *n
			c.OrderNo = pay.OrderNo
			n = &c
		}
		whole := pay.Status == lapse.PaymentLate || pay.Status == lapse.PaymentRefunding || pay.Status == lapse.PaymentRefunded
		if why := noticeConflict(pay, n, whole); why != "" {
			if n.Review != "" {
				why = n.Review + "; " + why
			}
			return ps.conflicting(ctx, pay, n, nil, why)
		}
		switch {
		case n.Review != "" && pay.Status == lapse.PaymentRefunding:
			// The provider took the money back itself (a dispute) while
			// Lapse's refund of it is under way: both may give it back.
			return ps.conflicting(ctx, pay, n, nil, fmt.Sprintf("%s; Lapse's refund %s of the payment is under way at %s too: the money may go back twice",
				n.Review, pay.RefundID, pay.Provider))
		case n.Review != "" && pay.Status == lapse.PaymentRefunded && pay.RefundID == n.RefundID:
			// Refunded by this very dispute (a late payment's), and
			// reported again: on the desk once.
			return ps.conflicting(ctx, pay, n, nil, n.Review)
		case n.Review != "" && pay.Status == lapse.PaymentRefunded:
			// Refunded, and then taken back by the provider too.
			return ps.conflicting(ctx, pay, n, nil, fmt.Sprintf("%s; the payment was refunded already (refund %s): the money went back twice",
				n.Review, pay.RefundID))
		}
		switch pay.Status {
		case lapse.PaymentLate, lapse.PaymentRefunding:
		case lapse.PaymentApplied:
			// A refund of a paid order: the merchant refund path's.
			return pay, ps.orderRefundNoticed(ctx, pay, n)
		case lapse.PaymentReview:
			why := fmt.Sprintf("a refund notice reports refund %s done, %s refunded; the payment is in review",
				n.RefundID, lapse.Money(n.Amount, n.Currency))
			if n.Review != "" {
				why = n.Review + "; " + why
			}
			return ps.conflicting(ctx, pay, n, nil, why)
		default:
			return pay, nil
		}
		got, err := ps.paymentRefunded(ctx, pay, n.RefundID)
		if errors.Is(err, lapse.ErrStale) {
			continue
		}
		if err == nil && n.Review != "" {
			// A late payment the provider took back itself (a dispute):
			// refunded, and on the desk naming it, as every dispute is.
			return ps.conflicting(ctx, got, n, nil, n.Review)
		}
		return got, err
	}
	return nil, fmt.Errorf("refund of payment %s: %w", n.TxnID, lapse.ErrStale)
}

// unreadableNoticed puts n, a verified notice Lapse cannot read in full
// (n.Review says what), in review, once however often it comes, and records
// no money: on the payment its transaction names when that is recorded, as
// a notice that contradicts it is, and otherwise on the order it names, or
// on the group of the member whose charge key it names. An order that does
// not exist is ENOTFOUND, as for a payment, so that the provider sends it
// again. The payment returned is the one recorded, or nil.
func (ps *payments) unreadableNoticed(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	e := ps.e
	about := "the callback"
	if n.RefundID != "" {
		about += " of refund " + n.RefundID
	}
	why := fmt.Sprintf("%s verified, but cannot be read: %s", about, n.Review)
	rec, err := e.store.PaymentGet(ctx, n.Provider, n.TxnID)
	switch {
	case err == nil:
		return ps.conflicting(ctx, rec, n, nil, why)
	case !errors.Is(err, lapse.ErrPaymentNotFound):
		return nil, err
	}
	o, err := e.store.OrderGet(ctx, n.OrderNo)
	if errors.Is(err, lapse.ErrOrderNotFound) {
		m, merr := e.store.GroupMemberGet(ctx, n.OrderNo)
		switch {
		case merr == nil:
			o, err = e.store.OrderGet(ctx, m.GroupID)
		case !errors.Is(merr, lapse.ErrGroupMemberNotFound):
			return nil, merr
		}
	}
	if errors.Is(err, lapse.ErrOrderNotFound) {
		return nil, lapse.Refine(lapse.ErrOrderNotFound, "payment %s of %s is for order %s, which does not exist", n.TxnID, n.Provider, n.OrderNo)
	}
	if err != nil {
		return nil, err
	}
	reason := lapse.CleanReason(fmt.Sprintf("payment %s of %s (not recorded) is in review: %s; nothing was recorded as money",
		n.TxnID, n.Provider, why))
	open, err := e.store.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || hasReason(open, reason) {
		return nil, err
	}
	if _, err := e.store.ReviewCreate(ctx, &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: reason, CreatedAt: e.clock.Now()}); err != nil {
		return nil, err
	}
	e.log.Error("payment callback verified but unreadable; put in review", "provider", n.Provider, "txn_id", n.TxnID,
		"order_no", o.OrderNo, "reason", n.Review)
	return nil, nil
}

// disputeNoticed puts n, a dispute notice (lapse.NoticeDispute: a dispute
// opened, or money it withdrew given back), in review on the payment its
// transaction names, with n.Review as the reason, once however often it
// comes; nothing moves and no money is recorded. One of a group member's
// charge is put in review on its group, one of a payment held without its
// order in review as held. A payment Lapse does not
// have is ENOTFOUND, as for a refund notice, so that the provider sends it
// again.
func (ps *payments) disputeNoticed(ctx context.Context, n *lapse.PaymentNotice) (*lapse.Payment, error) {
	pay, err := ps.e.store.PaymentGet(ctx, n.Provider, n.TxnID)
	if errors.Is(err, lapse.ErrPaymentNotFound) {
		// A member's charge, by its transaction: on the group's desk.
		if handled, merr := ps.e.feat.groups.refundNoticed(ctx, n); handled {
			return nil, merr
		}
		// A payment held without its order: in review, not applied
		// once its order comes.
		hs, herr := ps.e.store.HeldPaymentList(ctx, &lapse.HeldPaymentListParams{Provider: n.Provider, TxnID: n.TxnID})
		if herr != nil {
			return nil, herr
		}
		if len(hs) > 0 {
			h, herr := ps.heldContradicted(ctx, hs[0], cmp.Or(n.Review, n.Provider+" reports a dispute of it"))
			if herr != nil {
				return nil, herr
			}
			return heldView(h), nil
		}
	}
	if err != nil {
		return nil, err
	}
	why := n.Review
	if why == "" {
		why = fmt.Sprintf("%s reports a dispute of it", n.Provider)
	}
	return ps.conflicting(ctx, pay, n, nil, why)
}

// paymentRefunded moves pay from its status to refunded, with its
// payment.refunded event.
func (ps *payments) paymentRefunded(ctx context.Context, pay *lapse.Payment, refundID string) (*lapse.Payment, error) {
	e := ps.e
	o, err := e.store.OrderGet(ctx, pay.OrderNo)
	if err != nil {
		return nil, err
	}
	now := e.clock.Now()
	after := *pay
	after.Status, after.UpdatedAt, after.RefundedAt = lapse.PaymentRefunded, now, &now
	if refundID != "" {
		after.RefundID = refundID
	}
	evs := []lapse.OutboxEvent{lapse.NewPaymentEvent(lapse.EventPaymentRefunded, o, &after)}
	e.fanOut(o, evs)
	got, err := e.store.PaymentUpdate(ctx, &lapse.PaymentUpdateParams{ID: pay.ID, From: pay.Status, To: lapse.PaymentRefunded,
		RefundID: refundID, RefundedAt: &now, At: now, Outbox: evs})
	if err != nil {
		return nil, err
	}
	e.metrics.payments.WithLabelValues(pay.Provider, string(lapse.PaymentRefunded)).Inc()
	e.metrics.refunds.WithLabelValues(refundLatePayment, refundSucceeded).Inc()
	e.delivered(evs)
	return got, nil
}

// Payments returns the payments of an order, oldest first.
func (e *Engine) Payments(ctx context.Context, orderNo string) ([]*lapse.Payment, error) {
	return e.feat.payments.list(ctx, orderNo)
}

func (ps *payments) list(ctx context.Context, orderNo string) ([]*lapse.Payment, error) {
	e := ps.e
	o, err := e.store.OrderGet(ctx, orderNo)
	if err != nil {
		return nil, err
	}
	return e.store.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID})
}
