package lapse

import (
	"strings"
	"time"
)

// GroupMember is one participant of a group buy: a group is an order of a
// flow such as groupbuy, and each member is charged the group's price
// through the provider port once the group closes.
type GroupMember struct {
	ID       int64  `json:"id"`
	OrderID  int64  `json:"-"`
	GroupID  string `json:"group_id"` // the group's order_no
	UserID   string `json:"user_id"`
	Provider string `json:"provider"`
	// Method is what the provider charges: a card token, a wallet id. It
	// is a credential of the member's money: the engine charges with it,
	// and hands it out only masked (MaskMethod).
	Method   string `json:"method"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Key is the charge's idempotency key at the provider: the same key is
	// the same charge, however often it is sent.
	Key      string       `json:"idempotency_key"`
	Status   ChargeStatus `json:"status"`
	Attempts int          `json:"attempts"` // charge calls started
	TxnID    string       `json:"txn_id,omitempty"`
	// CapturedAmount and CapturedCurrency are what the provider reports it
	// took by TxnID: the member's amount once it is charged, or what Lapse
	// did not ask for when its charge failed so (the money is in review on
	// the group). Zero and empty until the provider reports a charge, and
	// in charges recorded before Lapse kept them.
	CapturedAmount   int64      `json:"captured_amount,omitempty"`
	CapturedCurrency string     `json:"captured_currency,omitempty"`
	LastError        string     `json:"last_error,omitempty"`
	JoinedAt         time.Time  `json:"joined_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	ChargedAt        *time.Time `json:"charged_at"`
}

// MaskMethod returns a payment method (a card token, a wallet id) as it may
// be shown back, as a payments engineer shows a card: its last 4 characters
// behind "****", and nothing but "****" when it has fewer than 8, whose last
// 4 would give away half of it or more. Whoever may read a group may tell
// members' methods apart by them, never charge with them.
func MaskMethod(method string) string {
	r := []rune(method)
	if len(r) < 8 {
		return "****"
	}
	return "****" + string(r[len(r)-4:])
}

// Masked returns a copy of m with its Method masked (MaskMethod).
func (m *GroupMember) Masked() *GroupMember {
	c := *m
	c.Method = MaskMethod(m.Method)
	return &c
}

// ChargeStatus is where a member's charge stands.
type ChargeStatus string

// Charge statuses. A member is claimed pending (or failed) → charging before
// the provider is called; a charging member found after a crash is asked
// about (query-back) before it is charged again, so none is charged twice.
const (
	ChargePending  ChargeStatus = "pending"
	ChargeCharging ChargeStatus = "charging"
	ChargeCharged  ChargeStatus = "charged"
	ChargeFailed   ChargeStatus = "failed"
	// ChargeRefunding: the group was abandoned, and the member's charge
	// is being refunded under its refund key (GroupRefundKey).
	ChargeRefunding ChargeStatus = "refunding"
	// ChargeRefunded: the member's charge went back. Final.
	ChargeRefunded ChargeStatus = "refunded"
	// ChargeReleased: the group was abandoned before the member was
	// charged: nothing was taken, and nothing will be. Final.
	ChargeReleased ChargeStatus = "released"
)

// GroupRefundKey is the idempotency key of the refund of the charge whose
// key is chargeKey: one refund per member charge, however often asked.
func GroupRefundKey(chargeKey string) string { return "lapse-group-refund-" + chargeKey }

// ChargeKeyPrefix begins every group member's charge key, and no order's
// number: the provider knows a member's charge by its key, as the order it
// charged, so a callback that names one is about the charge. The engine
// refuses it to order numbers, as it refuses ProbeOrderPrefix.
const ChargeKeyPrefix = "lapse-charge-"

// IsChargeKey reports whether s has the form of a member's charge key.
func IsChargeKey(s string) bool { return strings.HasPrefix(s, ChargeKeyPrefix) }

// ErrGroupMemberNotFound: no group member's charge has that idempotency
// key.
var ErrGroupMemberNotFound = &Error{Code: ENOTFOUND, Message: "group member not found"}

// GroupMemberUpdateParams is a guarded change of a member's charge. From
// and To may be the same status: the change then writes its fields and
// its Review, guarded by the member still being in it.
type GroupMemberUpdateParams struct {
	ID       int64
	From, To ChargeStatus
	// Attempt counts one more charge call.
	Attempt bool
	TxnID   string // kept unless set
	// CapturedAmount and CapturedCurrency are kept unless CapturedCurrency
	// is set.
	CapturedAmount   int64
	CapturedCurrency string
	Error            string     // the last error, replaced (cleared when empty)
	ChargedAt        *time.Time // kept unless set; the engine sets it when the member is charged
	At               time.Time
	Review           *Review // created, open, with the change when set (an operator must look at the charge)
}
