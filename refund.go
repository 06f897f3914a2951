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
	Failure   string            `json:"failure,omitempty"`   // why it failed, as the provider or the port said
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// OrderRefundStatus is where a merchant refund stands.
type OrderRefundStatus string

// Merchant refund statuses. The refund subscriber moves a requested refund
// to succeeded or failed as the provider answers; so does the refund's
// callback.
const (
	OrderRefundRequested OrderRefundStatus = "requested"
	OrderRefundSucceeded OrderRefundStatus = "succeeded"
	OrderRefundFailed    OrderRefundStatus = "failed"
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
}
