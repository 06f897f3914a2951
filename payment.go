package lapse

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// PaymentStatus is where a captured payment stands. Every captured payment
// ends applied, refunded or in review (S3).
type PaymentStatus string

// Payment statuses, with who moves a payment out of each.
const (
	// PaymentApplied: the payment moved its order UNPAID → PAID. Final; a
	// merchant refund of the order is the order's business, not this row's.
	PaymentApplied PaymentStatus = "applied"
	// PaymentLate: the payment arrived for an order it cannot pay (closed,
	// already paid by another payment, or past its deadline and grace). The
	// engine writes its refund delivery in the same transaction and moves it
	// to refunding when the provider accepts the refund.
	PaymentLate PaymentStatus = "late"
	// PaymentRefunding: the provider accepted a refund; its callback or a
	// query-back moves the payment to refunded.
	PaymentRefunding PaymentStatus = "refunding"
	// PaymentRefunded: the money went back. Final.
	PaymentRefunded PaymentStatus = "refunded"
	// PaymentReview: automation gave up (the refund's delivery died, or the
	// payment does not match its order); an operator decides.
	PaymentReview PaymentStatus = "review"
	// PaymentHeld is never a recorded payment's status: the engine's
	// ApplyPayment returns a Payment with it, and no ID, for a capture it
	// held without its order (HeldPayment), as no such order exists.
	PaymentHeld PaymentStatus = "held"
)

// Payment is a payment a provider captured, as Lapse recorded it: one row per
// provider transaction, whatever became of it.
type Payment struct {
	ID         int64         `json:"id"`
	Provider   string        `json:"provider"`
	TxnID      string        `json:"txn_id"`
	OrderID    int64         `json:"-"`
	OrderNo    string        `json:"order_no"`
	Amount     int64         `json:"amount"`
	Currency   string        `json:"currency"`
	Merchant   string        `json:"merchant"`
	PaidAt     time.Time     `json:"paid_at"` // the provider's success time
	Status     PaymentStatus `json:"status"`
	Reason     string        `json:"reason,omitempty"`    // why late or in review
	RefundID   string        `json:"refund_id,omitempty"` // the provider's, once refunding
	RefundedAt *time.Time    `json:"refunded_at"`
	Raw        []byte        `json:"-"` // the callback as received
	CreatedAt  time.Time     `json:"created_at"`
	UpdatedAt  time.Time     `json:"updated_at"`
}

// Events about payments, emitted by the payment path.
const (
	// EventPaymentLate: a payment that cannot pay its order was recorded;
	// the built-in refund subscriber refunds it.
	EventPaymentLate = "payment.late"
	// EventPaymentRefunded: a late payment's money went back.
	EventPaymentRefunded = "payment.refunded"
	// EventPaymentReview: automation gave up on a payment; an operator decides.
	EventPaymentReview = "payment.review"
)

// ErrPaymentNotFound: no payment with that provider and transaction id.
var ErrPaymentNotFound = &Error{Code: ENOTFOUND, Message: "payment not found"}

// PaymentNoticeKind says what a provider callback reports.
type PaymentNoticeKind string

// Kinds of provider notice.
const (
	NoticePaid     PaymentNoticeKind = "paid"     // a customer's payment succeeded
	NoticeRefunded PaymentNoticeKind = "refunded" // a refund completed
	// NoticeUnreadable: a verified callback that names its transaction and
	// order (and a refund's id, when it has one) but of which Lapse cannot
	// read all it needs: an amount that is not a positive number of minor
	// units, a time that is not one, a kind or status Lapse does not know.
	// Review says what, with the values as sent. The provider captured
	// something and signed it, so it is never refused: it is put in review,
	// without money on the books, and acknowledged.
	NoticeUnreadable PaymentNoticeKind = "unreadable"
	// NoticeDispute: a verified report about a dispute (chargeback) of a
	// recorded payment that moves no money on Lapse's books by itself (one
	// opened, or the withdrawn money given back when the merchant won).
	// It names the payment by TxnID alone (OrderNo may be empty); Review
	// says what happened, and the payment is put in review with it, once
	// however often it comes. The dispute's withdrawal of the money is a
	// refunded notice instead (see PaymentNotice.Review).
	NoticeDispute PaymentNoticeKind = "dispute"
)

// MaxTxnIDLen bounds a provider's transaction and refund ids, and the
// merchant account a notice names: longer than any provider's (Stripe's ids
// are at most 255 characters, WeChat Pay's 32, Alipay's 64), and short enough
// for every store's key columns.
const MaxTxnIDLen = 255

// PaymentNotice is what a verified provider callback says, in Lapse's terms.
// Amounts are integer minor units; PaidAt is the provider's success time
// (for a refund notice, the refund's). Currency is as the provider sent it
// (upper-cased where its format is lower case): a verified callback's need
// not be a code, and a payment in one that is not three capital letters is
// recorded in review.
type PaymentNotice struct {
	Provider string
	Kind     PaymentNoticeKind
	TxnID    string // the provider's transaction id, unique per provider
	RefundID string // the provider's refund id, for refund notices
	OrderNo  string // the merchant's order number the payment is for
	Amount   int64
	Currency string
	Merchant string // the merchant (or app) account the provider paid
	PaidAt   time.Time
	Raw      []byte // the callback body, as received (decrypted resource for WeChat Pay)
	// RefundedTotal, on a refund notice, says that Amount is what the
	// payment has had refunded in all so far (Stripe's amount_refunded,
	// Alipay's refund_fee), not the refund's own amount.
	RefundedTotal bool
	// Review, on a paid notice, is why the callback verified it but cannot
	// confirm whom it paid (say, it names no seller). The payment is then
	// recorded for review, as one that does not match its order is, and
	// does not move its order: a genuine payment must be on the books, and
	// only an operator can tell whose it is. On an unreadable notice it is
	// what Lapse could not read. On a refunded notice it says that the
	// provider took the money back without a refund anyone asked for (a
	// dispute lost: RefundID is the dispute's id, Amount what was
	// withdrawn): the refund is recorded in review with it, so that
	// nobody refunds the payment again. On a dispute notice it is what the
	// dispute did. A refunded or dispute notice may leave OrderNo empty
	// (a Stripe dispute names no order): its payment's is taken.
	Review string
}

// PaymentCallback verifies the callbacks of one provider by its real scheme
// and answers them in the form that provider expects.
type PaymentCallback interface {
	// Verify checks the signature (and, where the scheme has one, the
	// timestamp window) of a callback and returns what it reports. A
	// callback that fails verification is an error with code
	// EUNAUTHORIZED (wrapping ErrSignature); one that verifies but cannot
	// be read, or names no transaction or order, is EINVALID. One that
	// verifies and names them but of which a field cannot be read is a
	// NoticeUnreadable notice. A verified callback about something Lapse
	// does not act on (another event type) is nil, nil: acknowledged, so
	// that the provider stops sending it. Verify never has side effects.
	Verify(h http.Header, body []byte, now time.Time) (*PaymentNotice, error)
	// Ack writes the provider's expected answer: success when err is nil,
	// failure (so that the provider calls again) otherwise.
	Ack(w http.ResponseWriter, err error)
}

// NoteAcker is a PaymentCallback whose provider's success answer has room
// for text of Lapse's own (HMAC and Sandbox JSON, Stripe's), such as that
// a payment was held because no such order exists. Schemes whose success
// answer is fixed (Alipay's "success", WeChat Pay's empty 200) have none.
type NoteAcker interface {
	// AckNote writes success, as Ack(w, nil) does, with note in it.
	AckNote(w http.ResponseWriter, note string)
}

// ErrSignature is the sentinel of every callback that fails verification.
var ErrSignature = &Error{Code: EUNAUTHORIZED, Message: "payment callback failed verification"}

// ProviderPayment is a payment as the provider sees it.
type ProviderPayment struct {
	TxnID    string                `json:"txn_id"`
	OrderNo  string                `json:"order_no"`
	Status   ProviderPaymentStatus `json:"status"`
	Amount   int64                 `json:"amount"`
	Currency string                `json:"currency"`
	Merchant string                `json:"merchant"`
	PaidAt   time.Time             `json:"paid_at"` // zero unless paid
}

// ProviderPaymentStatus is a payment's status at the provider.
type ProviderPaymentStatus string

// Provider-side payment statuses.
const (
	ProviderPending  ProviderPaymentStatus = "pending"  // started, not paid
	ProviderPaid     ProviderPaymentStatus = "paid"     // captured
	ProviderClosed   ProviderPaymentStatus = "closed"   // closed unpaid; can no longer be paid
	ProviderRefunded ProviderPaymentStatus = "refunded" // paid, then refunded in full
)

// ChargeRequest charges a stored payment method without the customer (a
// group buy participant's).
type ChargeRequest struct {
	IdempotencyKey string
	OrderNo        string
	Amount         int64
	Currency       string
	Method         string // the provider's token for the payment method
}

// RefundRequest refunds part or all of a captured payment.
type RefundRequest struct {
	IdempotencyKey string // the same key is the same refund, however often sent
	TxnID          string
	OrderNo        string
	Amount         int64
	Currency       string
	Reason         string
}

// ProviderRefund is a refund as the provider sees it. Ports always give its
// Amount: a refund is completed only by a report of the payment, amount
// and currency (when given) it was asked for, and any other report is put
// in review.
type ProviderRefund struct {
	RefundID string `json:"refund_id"`
	TxnID    string `json:"txn_id"`
	Amount   int64  `json:"amount"`
	// Currency is the refund's ISO 4217 code when the provider's answer
	// gives one, and empty when it does not.
	Currency string               `json:"currency,omitempty"`
	Status   ProviderRefundStatus `json:"status"`
}

// ProviderRefundStatus is a refund's status at the provider.
type ProviderRefundStatus string

// Provider-side refund statuses.
const (
	RefundProcessing ProviderRefundStatus = "processing"
	RefundSucceeded  ProviderRefundStatus = "succeeded"
	RefundFailed     ProviderRefundStatus = "failed"
)

// PaymentProvider is the port to a payment gateway. Calls carry idempotency
// keys; a call that was sent but not answered (or answered with a server
// error, which may come after the effect) returns an error wrapping
// ErrUnknownOutcome, and the caller asks (Query, RefundQuery) before trying
// again. A refusal for good wraps ErrRefused; a call that was never sent
// wraps ErrNotSent. Callers take any other error as an unknown outcome.
type PaymentProvider interface {
	// Charge captures Amount from a stored payment method.
	Charge(ctx context.Context, r *ChargeRequest) (*ProviderPayment, error)
	// Refund refunds a captured payment; the same IdempotencyKey returns
	// the same refund.
	Refund(ctx context.Context, r *RefundRequest) (*ProviderRefund, error)
	// RefundQuery returns the refund made under an idempotency key, or an
	// error wrapping ErrProviderNotFound.
	RefundQuery(ctx context.Context, idempotencyKey string) (*ProviderRefund, error)
	// Query returns the provider's payment for a merchant order number,
	// or an error wrapping ErrProviderNotFound when it has none.
	Query(ctx context.Context, orderNo string) (*ProviderPayment, error)
	// Close closes an unpaid provider-side payment so that it can no longer
	// be paid, and returns it as it stands: a payment that was paid first
	// comes back paid (not an error), for the caller to apply.
	Close(ctx context.Context, orderNo string) (*ProviderPayment, error)
}

// ErrProviderNotFound: the provider knows no such payment or refund.
var ErrProviderNotFound = &Error{Code: ENOTFOUND, Message: "the payment provider has no such payment"}

// ErrNotSent is in the chain of a provider call's error when the call
// failed before its request reached the provider (no connection, no free
// slot, a gateway known to be down): the provider did nothing, for certain.
// Any other failure that is not a refusal (ErrRefused) may have taken
// effect (a timeout, a 5xx, a connection lost while waiting, an answer that
// cannot be read), and the caller asks (Query, RefundQuery) before it
// counts the call as failed. An error that wraps ErrUnknownOutcome is
// unknown, whatever else it wraps.
var ErrNotSent = errors.New("lapse: not sent: the request did not reach the other side, and nothing was done")

// Validate reports a payment that no store may be given, as an EINVALID
// error naming the field: no payment, a review of another order than the
// payment's, a transition of another order, or with events or a review of
// its own beside it, and events that ValidateOutbox refuses.
func (p *PaymentCreateParams) Validate() error {
	switch {
	case p.Payment == nil:
		return FieldError("payment", "is required")
	case p.Review != nil && (p.Review.OrderID != p.Payment.OrderID || p.Review.OrderNo != p.Payment.OrderNo):
		return FieldError("review", "is of order %s, not of the payment's %s", p.Review.OrderNo, p.Payment.OrderNo)
	case p.Transition != nil && p.Transition.OrderID != p.Payment.OrderID:
		return FieldError("transition", "is of order %d, not of the payment's %d", p.Transition.OrderID, p.Payment.OrderID)
	case p.Transition != nil && (len(p.Outbox) > 0 || p.Review != nil):
		return FieldError("transition", "carries the events of a payment that makes one; the payment has no events or review of its own")
	case p.Transition != nil:
		return p.Transition.Validate()
	}
	return ValidateOutbox(p.Outbox)
}

// Validate reports a payment change that no store may be given, as an
// EINVALID error naming the field: a review of no order, and events that
// ValidateOutbox refuses.
func (p *PaymentUpdateParams) Validate() error {
	if p.Review != nil && (p.Review.OrderID <= 0 || p.Review.OrderNo == "") {
		return FieldError("review", "is of no order")
	}
	return ValidateOutbox(p.Outbox)
}
