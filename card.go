package lapse

import (
	"context"
	"time"
)

// Card is a benefit issued for a paid membership order: a count card when
// Visits > 0 (so many visits), otherwise a card that grants its product for
// as long as it is active. A bundle is several cards of one order.
type Card struct {
	ID      int64  `json:"id"`
	OrderID int64  `json:"-"`
	OrderNo string `json:"order_no"`
	UserID  string `json:"user_id"`
	Product string `json:"product"`
	Visits  int    `json:"visits"` // 0: not a count card
	Used    int    `json:"used"`
	// Deducted is the visits taken back when the card was revoked: those
	// still unused then.
	Deducted  int        `json:"deducted"`
	Status    CardStatus `json:"status"`
	IssuedAt  time.Time  `json:"issued_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// CardStatus is whether a card may be used.
type CardStatus string

// Card statuses: a revoked card is voided, its unused visits deducted.
const (
	CardActive CardStatus = "active"
	CardVoided CardStatus = "voided"
)

// CardIssueParams issues the cards of one order.
type CardIssueParams struct {
	OrderID int64
	Cards   []*Card // each of order OrderID, issued active in this order; ID, Status, Used, Deducted and RevokedAt are the store's
}

// Validate reports an issue that no store may be given, as an EINVALID
// error naming cards: no order, no cards, a nil card, a card of another
// order, and a negative number of visits.
func (p *CardIssueParams) Validate() error {
	switch {
	case p.OrderID <= 0:
		return FieldError("cards", "cards are issued for an order")
	case len(p.Cards) == 0:
		return FieldError("cards", "no cards to issue")
	}
	for i, c := range p.Cards {
		switch {
		case c == nil:
			return FieldError("cards", "card %d to issue is nil", i)
		case c.OrderID != p.OrderID:
			return FieldError("cards", "card %d is of order %d, not %d: cards of one order are issued together", i, c.OrderID, p.OrderID)
		case c.Visits < 0:
			return FieldError("cards", "card %d has %d visits; a count card has some, any other 0", i, c.Visits)
		}
	}
	return nil
}

// CardVisit is one visit counted on a card, kept with the idempotency key
// the caller counted it under, if any, so that a retry of the call finds it
// and counts nothing.
type CardVisit struct {
	ID     int64     `json:"id"`
	CardID int64     `json:"card_id"`
	Key    string    `json:"idempotency_key,omitempty"` // "" when the caller gave none
	Used   int       `json:"used"`                      // the card's visits used once this one was counted
	At     time.Time `json:"at"`
}

// CardUseParams counts one visit of a card.
type CardUseParams struct {
	CardID int64
	Key    string    // the caller's idempotency key, or ""
	At     time.Time // when the visit is counted
}

// maxCardVisitKey is the longest idempotency key of a visit a store keeps.
const maxCardVisitKey = 255

// Validate reports a visit that no store may be given, as an EINVALID error:
// no card, a key longer than 255 bytes, no time.
func (p *CardUseParams) Validate() error {
	switch {
	case p.CardID <= 0:
		return FieldError("id", "must be a card id, a positive integer")
	case len(p.Key) > maxCardVisitKey:
		return FieldError("Idempotency-Key", "must be at most %d bytes", maxCardVisitKey)
	case p.At.IsZero():
		return Errorf(EINVALID, "a visit is counted at a time")
	}
	return nil
}

// ErrCardNotFound: no card with that id.
var ErrCardNotFound = &Error{Code: ENOTFOUND, Message: "card not found"}

// ErrCardVisitExists: a visit was counted under that idempotency key.
var ErrCardVisitExists = &Error{Code: ECONFLICT, Message: "a visit was counted under that idempotency key"}

// ErrCardVisitNotFound: no visit was counted under that idempotency key.
var ErrCardVisitNotFound = &Error{Code: ENOTFOUND, Message: "no visit was counted under that idempotency key"}

// ErrCardsRevoked: the order's cards were revoked (a refund started, or
// they are voided), and issuing is idempotent per order, so issuing again
// could only bring them back voided. Nothing records such an order as
// issued, and an operator's retry of its issuing is refused.
var ErrCardsRevoked = &Error{Code: ECONFLICT, Message: "the order's cards were revoked"}

// CardIssuer is the port that issues and revokes the benefits of paid
// orders: the built-in card ledger, or a merchant's own service over HTTP.
type CardIssuer interface {
	// Issue issues the cards r asks for. The same IdempotencyKey (one per
	// order) returns the cards issued the first time, revoked or not:
	// issuing again never grants twice.
	Issue(ctx context.Context, r *CardIssueRequest) ([]*Card, error)
	// Revoke voids every card of the order, deducting the visits count
	// cards have left. Revoking an order with no cards, or revoked cards,
	// changes nothing and is not an error.
	Revoke(ctx context.Context, r *CardRevokeRequest) ([]*Card, error)
}

// CardIssueRequest asks for the cards of one order.
type CardIssueRequest struct {
	IdempotencyKey string     `json:"idempotency_key"`
	OrderNo        string     `json:"order_no"`
	UserID         string     `json:"user_id"`
	Cards          []CardSpec `json:"cards"`
}

// CardSpec is one card to issue: a count card of Visits visits, or, when
// Visits is 0, a card that grants Product while it is active.
type CardSpec struct {
	Product string `json:"product"`
	Visits  int    `json:"visits,omitempty"`
}

// CardRevokeRequest asks for every card of an order to be revoked.
type CardRevokeRequest struct {
	IdempotencyKey string `json:"idempotency_key"`
	OrderNo        string `json:"order_no"`
}
