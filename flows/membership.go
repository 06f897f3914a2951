package flows

import (
	"time"

	"github.com/lapsehq/lapse"
)

// States of the membership flow (seed 003).
const (
	// PreOrder: created, not yet submitted for payment; SUBMIT opens the
	// payment window, CANCEL or the deadline (EXPIRE) ends it.
	PreOrder lapse.State = "PRE_ORDER"
	// WaitPay: waiting for payment until the deadline.
	WaitPay lapse.State = "WAIT_PAY"
	// MembershipPaid: paid; the issue subscriber issues its cards.
	MembershipPaid lapse.State = "PAID"
	// Issued: the cards were issued and the benefits granted.
	Issued lapse.State = "ISSUED"
	// Cancelled: terminal. Cancelled or expired before payment.
	Cancelled lapse.State = "CANCELLED"
	// Compensating: issuing failed; the issue subscriber retries on its
	// schedule (1 min, 5 min, 15 min, 30 min, 1 h), reading the order again
	// before each attempt.
	Compensating lapse.State = "COMPENSATING"
	// ManualReview: issuing failed through its whole schedule, or a partial
	// refund revoked the cards; an operator RETRYs the compensation (refused
	// once the cards were revoked: issuing again could only bring them back
	// voided) or REFUNDs the order.
	ManualReview lapse.State = "MANUAL_REVIEW"
	// MembershipRefunding: a refund started; the order's cards are revoked
	// at once (count cards lose their remaining visits, bundles every card).
	MembershipRefunding lapse.State = "REFUNDING"
	// MembershipRefunded: terminal. The money went back.
	MembershipRefunded lapse.State = "REFUNDED"
)

// Events of the membership flow; PAY, TIMEOUT, CANCEL, REFUND, REFUND_DONE
// and REFUND_PARTIAL are as in checkout.
const (
	Submit      lapse.Event = "SUBMIT"       // the customer goes to pay
	Expire      lapse.Event = "EXPIRE"       // a pre-order was left too long (deadline engine only)
	Issue       lapse.Event = "ISSUE"        // the cards were issued (issue subscriber only)
	IssueFailed lapse.Event = "ISSUE_FAILED" // the first attempt to issue failed (issue subscriber only)
	Escalate    lapse.Event = "ESCALATE"     // issuing failed through its schedule (issue subscriber only)
)

// Events emitted by the membership flow.
const (
	EventMembershipSubmitted    = "membership.submitted"
	EventMembershipPaid         = "membership.paid"
	EventMembershipIssued       = "membership.issued"
	EventMembershipCancelled    = "membership.cancelled"
	EventMembershipCompensating = "membership.compensating"
	EventMembershipRetried      = "membership.retried"
	EventMembershipReview       = "membership.manual_review"
	EventMembershipRefunding    = "membership.refunding"
	EventMembershipRefunded     = "membership.refunded"
	EventMembershipRefundReview = "membership.refund_review"
)

// PreOrderWindow is how long a pre-order waits to be submitted, and
// MembershipPaymentWindow how long a submitted one waits for payment.
const (
	PreOrderWindow          = 24 * time.Hour
	MembershipPaymentWindow = 15 * time.Minute
)

// IssueRetries is seed 003's compensation schedule: after the first failed
// attempt, retry after 1 min, 5 min, 15 min, 30 min and 1 h, then hand the
// order to an operator.
var IssueRetries = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour}

// Membership returns the membership flow (seed 003): a paid order issues its
// cards, compensating when issuing fails and landing in manual review when
// the compensation schedule runs out; a refund revokes the benefits.
func Membership() *lapse.Flow {
	refundable := []lapse.State{MembershipPaid, Issued, Compensating, ManualReview}
	f := &lapse.Flow{
		Name:    "membership",
		Initial: PreOrder,
		States: []lapse.StateSpec{
			{Name: PreOrder, Deadline: &lapse.Deadline{After: PreOrderWindow, Event: Expire},
				Doc: "pre-order; SUBMIT opens the payment window, CANCEL or EXPIRE (deadline) ends it"},
			{Name: WaitPay, Deadline: &lapse.Deadline{After: MembershipPaymentWindow, Event: Timeout},
				Doc: "waiting for payment; PAY, TIMEOUT (deadline) or CANCEL move it on"},
			{Name: MembershipPaid, Doc: "paid; the issue subscriber issues the cards (ISSUE) or starts compensating (ISSUE_FAILED)"},
			{Name: Issued, Doc: "cards issued, benefits granted; REFUND revokes them"},
			{Name: Cancelled, Terminal: true, Doc: "cancelled or expired before payment"},
			{Name: Compensating, Doc: "issuing failed; retried on schedule, the order read again before each attempt"},
			{Name: ManualReview, Doc: "issuing failed through its schedule, or a partial refund revoked the cards; an operator RETRYs (refused once the cards were revoked) or REFUNDs"},
			{Name: MembershipRefunding, Doc: "refund under way; the cards were revoked"},
			{Name: MembershipRefunded, Terminal: true, Doc: "refunded; benefits revoked"},
		},
		Events: []lapse.EventSpec{
			{Name: Submit, Doc: "the customer goes to pay"},
			{Name: Expire, Internal: true, Doc: "the pre-order was left too long, fired by the deadline engine"},
			{Name: Pay, Internal: true, Doc: "a verified payment, applied by the payment path"},
			{Name: Timeout, Internal: true, Doc: "the payment window lapsed, fired by the deadline engine"},
			{Name: Cancel, Doc: "the customer cancels before paying"},
			{Name: Issue, Internal: true, Doc: "the cards were issued"},
			{Name: IssueFailed, Internal: true, Doc: "the first attempt to issue failed"},
			{Name: Escalate, Internal: true, Doc: "issuing failed through its whole schedule"},
			{Name: Retry, Internal: true, Doc: "an operator retries the compensation, through the retry API, unless a refund revoked the cards"},
			{Name: Refund, Internal: true, Doc: "a refund starts, through the refund path"},
			{Name: RefundDone, Internal: true, Doc: "the provider confirmed the refund of all the order captured"},
			{Name: RefundPartial, Internal: true, Doc: "a partial refund ended, or the provider refused it: an operator decides"},
		},
		Transitions: []lapse.Transition{
			{From: PreOrder, Event: Submit, To: WaitPay, Emits: []string{EventMembershipSubmitted}},
			{From: PreOrder, Event: Cancel, To: Cancelled, Emits: []string{EventMembershipCancelled}},
			{From: PreOrder, Event: Expire, To: Cancelled, Emits: []string{EventMembershipCancelled}},
			{From: WaitPay, Event: Pay, To: MembershipPaid, Guard: lapse.BeforeDeadline, Emits: []string{EventMembershipPaid}},
			{From: WaitPay, Event: Timeout, To: Cancelled, Emits: []string{EventMembershipCancelled}},
			{From: WaitPay, Event: Cancel, To: Cancelled, Emits: []string{EventMembershipCancelled}},
			{From: MembershipPaid, Event: Issue, To: Issued, Emits: []string{EventMembershipIssued}},
			{From: MembershipPaid, Event: IssueFailed, To: Compensating, Emits: []string{EventMembershipCompensating}},
			{From: Compensating, Event: Issue, To: Issued, Emits: []string{EventMembershipIssued}},
			{From: Compensating, Event: Escalate, To: ManualReview, Emits: []string{EventMembershipReview}},
			{From: ManualReview, Event: Retry, To: Compensating, Emits: []string{EventMembershipRetried}},
			{From: MembershipRefunding, Event: RefundDone, To: MembershipRefunded, Emits: []string{EventMembershipRefunded}},
			// The cards were revoked when the refund started: a refund that
			// did not take everything back needs a person.
			{From: MembershipRefunding, Event: RefundPartial, To: ManualReview, Emits: []string{EventMembershipRefundReview}},
		},
		Pays:    Pay,
		Refunds: lapse.RefundEvents{Start: Refund, Done: RefundDone, Partial: RefundPartial},
		Grace:   CheckoutGrace,
		Issues: lapse.IssueEvents{On: EventMembershipPaid, Issued: Issue, Failed: IssueFailed, GiveUp: Escalate, Retry: Retry,
			Revoke: []string{EventMembershipRefunding}},
	}
	for _, s := range refundable {
		f.Transitions = append(f.Transitions, lapse.Transition{From: s, Event: Refund, To: MembershipRefunding,
			Emits: []string{EventMembershipRefunding}})
	}
	return f
}
