package lapse

import (
	"time"
	"unicode/utf8"
)

// HeldPaymentStatus is where a payment held without its order stands.
type HeldPaymentStatus string

// Held payment statuses, with who moves a held payment out of each.
const (
	// HeldWaiting: a verified callback reported a capture for an order
	// Lapse does not have (it may have overtaken the order's creation).
	// The engine's HeldMatcher applies it through the payment path once the
	// order exists (to HeldApplied), or after its window puts it in review.
	// Its provider's refund callback, in full, moves it to HeldRefunded.
	HeldWaiting HeldPaymentStatus = "held"
	// HeldReview: no order appeared within the window, or a report
	// contradicted it (another order, amount or currency for its
	// transaction). An operator refunds it (to HeldRefunding), applies it to
	// its order once that exists (to HeldApplied) or dismisses it (to
	// HeldDismissed). Its provider's refund callback, in full, moves
	// it to HeldRefunded.
	HeldReview HeldPaymentStatus = "review"
	// HeldApplied: its order appeared and it went through the payment path
	// (the matcher's, or an operator's apply),
	// where it is now a Payment (applied, late or in review) under the same
	// provider and transaction. Final.
	HeldApplied HeldPaymentStatus = "applied"
	// HeldRefunding: an operator asked its provider to refund it; the
	// provider's answer, or the HeldMatcher asking again, moves it to
	// HeldRefunded, or back to HeldReview when the refund was refused.
	HeldRefunding HeldPaymentStatus = "refunding"
	// HeldRefunded: the money went back: refunded by an operator, or by
	// its provider without Lapse (its refund callback said so). Final.
	HeldRefunded HeldPaymentStatus = "refunded"
	// HeldDismissed: an operator took it off the desk with a note (the
	// money was dealt with outside Lapse). Final.
	HeldDismissed HeldPaymentStatus = "dismissed"
)

// HeldPayment is a captured payment that a verified callback reported for
// an order Lapse does not have: one row per provider transaction, kept
// apart from payments (whose rows stand on an order) until its order
// appears or an operator settles it.
type HeldPayment struct {
	ID       int64             `json:"id"`
	Provider string            `json:"provider"`
	TxnID    string            `json:"txn_id"`
	OrderNo  string            `json:"order_no"` // as the callback named it; no such order existed
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Merchant string            `json:"merchant"`
	PaidAt   time.Time         `json:"paid_at"`         // the provider's time, or when the callback came if it gave none
	Doubt    string            `json:"doubt,omitempty"` // the callback's own reason for review (PaymentNotice.Review)
	Status   HeldPaymentStatus `json:"status"`
	Reason   string            `json:"reason,omitempty"`    // why in review, or what became of it
	RefundID string            `json:"refund_id,omitempty"` // the provider's, once refunding
	By       string            `json:"by,omitempty"`        // the operator who refunded or dismissed it
	Note     string            `json:"note,omitempty"`      // what they said, as written
	Raw      []byte            `json:"-"`                   // the callback as received
	// CreatedAt is when the callback was received: the window before
	// review runs from it.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Validate reports a held payment that no store may create, as an
// EINVALID error naming the field.
func (h *HeldPayment) Validate() error {
	switch {
	case h.Provider == "" || h.TxnID == "":
		return FieldError("txn_id", "a held payment is of a provider's transaction")
	case h.OrderNo == "":
		return FieldError("order_no", "is required")
	case h.Amount <= 0:
		return FieldError("amount", "must be a positive number of minor units")
	case h.Currency == "":
		return FieldError("currency", "is required")
	case h.Status != HeldWaiting && h.Status != HeldReview:
		return FieldError("status", "a held payment is created held or in review, not %q", h.Status)
	case h.CreatedAt.IsZero() || h.PaidAt.IsZero():
		return FieldError("created_at", "and paid_at are required")
	}
	return nil
}

// HeldPaymentListParams filters held payments.
type HeldPaymentListParams struct {
	// Provider and TxnID, when TxnID is set, select the one held payment
	// of that transaction.
	Provider, TxnID string
	Statuses        []HeldPaymentStatus // empty: every status
	AfterID         int64               // exclusive; 0 from the start
	Limit           int                 // 0: no limit
}

// HeldPaymentUpdateParams is a guarded change of a held payment's status.
type HeldPaymentUpdateParams struct {
	ID       int64
	From, To HeldPaymentStatus
	Reason   string // kept unless set
	RefundID string // kept unless set
	By       string // kept unless set
	Note     string // kept unless set
	At       time.Time
}

// Validate reports a change that no store may be given, as an EINVALID
// error naming the field.
func (p *HeldPaymentUpdateParams) Validate() error {
	switch {
	case p.ID <= 0:
		return FieldError("id", "must be a held payment id, a positive integer")
	case p.From == "" || p.To == "":
		return FieldError("status", "from and to are required")
	case p.At.IsZero():
		return FieldError("at", "is required")
	case len(p.Note) > MaxNoteLen || !utf8.ValidString(p.Note):
		return FieldError("note", "must be UTF-8 text of at most %d bytes", MaxNoteLen)
	}
	return nil
}

// ErrHeldPaymentNotFound: no held payment has that id.
var ErrHeldPaymentNotFound = &Error{Code: ENOTFOUND, Message: "held payment not found"}

// ErrPaymentHeld: a payment cannot be recorded because its provider
// transaction is held without its order and the held payment takes it
// (HeldTakes). Nothing was written.
var ErrPaymentHeld = &Error{Code: ECONFLICT, Message: "the payment's transaction is held without its order"}

// HeldTakes reports whether h, the payment held under a transaction,
// keeps a payment of that transaction for order orderNo, of amount in
// currency, from being recorded (ErrPaymentHeld): unless h is held or in
// review, or applied, for that same order, amount and currency, the
// transaction's money is h's already (being refunded, refunded, dismissed
// by an operator, or held for another order, amount or currency), and
// recording it as a payment too would count one capture twice (S3). The
// stores check the same in the SQL of their payment writes.
func HeldTakes(h *HeldPayment, orderNo string, amount int64, currency string) bool {
	switch h.Status {
	case HeldWaiting, HeldReview, HeldApplied:
		return h.OrderNo != orderNo || h.Amount != amount || h.Currency != currency
	}
	return true
}
