// Package flows holds the built-in flows of Lapse.
package flows

import (
	"time"

	"github.com/lapsehq/lapse"
)

// States of the checkout flow.
const (
	// Unpaid: created, stock and coupon held, waiting for payment. The payment
	// path moves it to PAID; the deadline engine (TIMEOUT) or the caller
	// (CANCEL) moves it to CLOSED.
	Unpaid lapse.State = "UNPAID"
	// Paid: a valid payment was applied before the deadline. A refund moves it
	// to REFUNDING.
	Paid lapse.State = "PAID"
	// Closed: terminal. The payment window lapsed or the order was cancelled;
	// what it held is given back.
	Closed lapse.State = "CLOSED"
	// Refunding: a merchant refund was requested; the refund path moves it
	// to REFUNDED once all the order captured went back, or back to PAID
	// after a partial refund or one the provider refused.
	Refunding lapse.State = "REFUNDING"
	// Refunded: terminal. All the money went back.
	Refunded lapse.State = "REFUNDED"
)

// Events of the checkout flow.
const (
	Pay        lapse.Event = "PAY"         // a valid payment arrived (payment path only)
	Timeout    lapse.Event = "TIMEOUT"     // the payment window lapsed (deadline engine only)
	Cancel     lapse.Event = "CANCEL"      // the caller cancelled the unpaid order
	Refund     lapse.Event = "REFUND"      // a refund of the paid order started (refund path only)
	RefundDone lapse.Event = "REFUND_DONE" // the provider confirmed the refund of all it captured (refund path only)
	// RefundPartial: the provider confirmed a partial refund, or refused
	// one; the order is paid again (refund path only).
	RefundPartial lapse.Event = "REFUND_PARTIAL"
)

// Events emitted by the checkout flow.
const (
	EventOrderPaid      = "order.paid"
	EventOrderClosed    = "order.closed"
	EventOrderRefunding = "order.refunding"
	EventOrderRefunded  = "order.refunded"
	// EventOrderRefundSettled: a partial refund (or a refused one) ended and
	// the order is paid again.
	EventOrderRefundSettled = "order.refund_settled"
)

// CheckoutPaymentWindow is the default time an order may stay UNPAID.
const CheckoutPaymentWindow = 15 * time.Minute

// CheckoutGrace is how long past its deadline an order whose customer
// started paying in time stays open (seed 004: providers confirm within
// minutes; the closer asks before closing anyway).
const CheckoutGrace = 2 * time.Minute

// Checkout returns the checkout flow (seeds 002 and 004): an unpaid order is
// paid before its deadline or closed at it.
func Checkout() *lapse.Flow {
	return &lapse.Flow{
		Name:    "checkout",
		Initial: Unpaid,
		States: []lapse.StateSpec{
			{Name: Unpaid, Deadline: &lapse.Deadline{After: CheckoutPaymentWindow, Event: Timeout},
				Doc: "waiting for payment; PAY, TIMEOUT (deadline) or CANCEL move it on"},
			{Name: Paid, Doc: "paid; REFUND moves it on"},
			{Name: Closed, Terminal: true, Doc: "closed unpaid, by TIMEOUT or CANCEL"},
			{Name: Refunding, Doc: "refund under way; REFUND_DONE (all refunded) or REFUND_PARTIAL (paid again) moves it on"},
			{Name: Refunded, Terminal: true, Doc: "refunded"},
		},
		Events: []lapse.EventSpec{
			{Name: Pay, Internal: true, Doc: "a verified payment, applied by the payment path"},
			{Name: Timeout, Internal: true, Doc: "the payment window lapsed, fired by the deadline engine"},
			{Name: Cancel, Doc: "the caller cancels an unpaid order"},
			{Name: Refund, Internal: true, Doc: "a refund starts, through the refund path"},
			{Name: RefundDone, Internal: true, Doc: "the provider confirmed the refund of all the order captured"},
			{Name: RefundPartial, Internal: true, Doc: "a partial refund ended (or the provider refused it); the order is paid again"},
		},
		Transitions: []lapse.Transition{
			{From: Unpaid, Event: Pay, To: Paid, Guard: lapse.BeforeDeadline, Emits: []string{EventOrderPaid}},
			{From: Unpaid, Event: Timeout, To: Closed, Emits: []string{EventOrderClosed}},
			{From: Unpaid, Event: Cancel, To: Closed, Emits: []string{EventOrderClosed}},
			{From: Paid, Event: Refund, To: Refunding, Emits: []string{EventOrderRefunding}},
			{From: Refunding, Event: RefundDone, To: Refunded, Emits: []string{EventOrderRefunded}},
			{From: Refunding, Event: RefundPartial, To: Paid, Emits: []string{EventOrderRefundSettled}},
		},
		// Creating reserves the items and locks the coupon; closing gives
		// them back; paying uses them up.
		Holds:     true,
		ReleaseOn: []string{EventOrderClosed},
		ConsumeOn: []string{EventOrderPaid},
		Pays:      Pay,
		Refunds:   lapse.RefundEvents{Start: Refund, Done: RefundDone, Partial: RefundPartial},
		Grace:     CheckoutGrace,
	}
}

// Builtin returns the built-in flows.
func Builtin() []*lapse.Flow {
	return []*lapse.Flow{Checkout(), Groupbuy(), Membership()}
}
