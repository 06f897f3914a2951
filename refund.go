package lapse

import "time"

// OrderRefund is a merchant's refund of a paid order, or of part of it,
// through the provider of the payment that paid it.
type OrderRefund struct {
	ID        int64             `json:"id"`
	OrderID   int64             `json:"-"`
	OrderNo   string            `json:"order_no"`
	PaymentID int64             `json:"payment_id"`
	Provider  string            `json:"provider"`
	TxnID     string            `json:"txn_id"`
	Amount    int64             `json:"amount"`
	Currency  string            `json:"currency"`
	Reason    string            `json:"reason"`
	Key       string            `json:"idempotency_key"` // the provider's idempotency key: the same key is the same refund
	Status    OrderRefundStatus `json:"status"`
	RefundID  string            `json:"refund_id,omitempty"` // the provider's
	Failure   string            `json:"failure,omitempty"`   // why it failed, as the provider, the port or an operator said
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// OrderRefundStatus is where a merchant refund stands.
type OrderRefundStatus string

// Merchant refund statuses. The refund subscriber moves a requested refund
// to succeeded or failed as the provider answers; so does the refund's
// callback. A report about a refund that disagrees with it (another amount,
// currency or payment than Lapse asked for, or done when Lapse recorded it
// failed) moves it to review instead, and the payment path records a
// refund the provider reports but Lapse never asked for (one made in the
// provider's dashboard) in review too. Only an operator moves a refund out
// of review, to succeeded or failed (engine.SettleReview): no later report
// does, however well it matches.
const (
	OrderRefundRequested OrderRefundStatus = "requested"
	OrderRefundSucceeded OrderRefundStatus = "succeeded"
	OrderRefundFailed    OrderRefundStatus = "failed"
	OrderRefundReview    OrderRefundStatus = "review"
)

// RefundEvents name the events of a flow's merchant refund path: Start
// moves a paid order to refunding; Done ends it refunded, once all it
// captured went back; Partial returns it to paid after a partial refund (or
// one the provider refused).
type RefundEvents struct {
	Start, Done, Partial Event
}

// ErrOrderRefundExists: a refund with that idempotency key exists for
// another amount or order.
var ErrOrderRefundExists = &Error{Code: ECONFLICT, Message: "a refund with that idempotency key exists"}

// OrderRefundUpdateParams is a guarded change of a refund's status.
type OrderRefundUpdateParams struct {
	ID       int64
	From, To OrderRefundStatus
	RefundID string // kept unless set
	Failure  string // kept unless set
	At       time.Time
	// Review, when set, is created open with the change, holding the
	// refund (its OrderRefundID is ID): a refund that goes to review.
	Review *Review
}

// Validate reports a refund change that no store may be given, as an
// EINVALID error naming the field: a review of no order, or one that holds
// another refund.
func (p *OrderRefundUpdateParams) Validate() error {
	switch {
	case p.Review == nil:
	case p.Review.OrderID <= 0 || p.Review.OrderNo == "":
		return FieldError("review", "is of no order")
	case p.Review.OrderRefundID != 0 && p.Review.OrderRefundID != p.ID:
		return FieldError("review", "holds refund %d, not the refund %d it is written with", p.Review.OrderRefundID, p.ID)
	}
	return nil
}
