package lapse

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Review is an order waiting for an operator because automation gave up on
// it, with the reason and what gave up. It is open until it is resolved:
// an operator handled it (with a note), or retried what gave up. A review
// that holds a merchant refund in review (OrderRefundID) is resolved only
// by an operator settling that refund, never with the other reviews of its
// order or delivery.
//
// An open review is one per order, delivery (or none) and reason: a store
// that is given a review to write with a change writes it only when no
// open review of its order and delivery has its reason, and otherwise
// makes the change without it, the open one standing for both. So the same
// thing said again, even by two reports at once, is on the desk once.
type Review struct {
	ID            int64      `json:"id"`
	OrderID       int64      `json:"-"`
	OrderNo       string     `json:"order_no"`
	Reason        string     `json:"reason"`
	DeliveryID    int64      `json:"delivery_id,omitempty"`
	OrderRefundID int64      `json:"order_refund_id,omitempty"` // the refund in review it holds, 0 for none
	CreatedAt     time.Time  `json:"created_at"`
	ResolvedAt    *time.Time `json:"resolved_at"`
	ResolvedBy    string     `json:"resolved_by,omitempty"` // who resolved it, "" while open
	Note          string     `json:"note,omitempty"`        // what they said, as written
}

// Validate reports a review that no store may create, as an EINVALID error
// naming the field: one of no order, without a reason or a time, or
// resolved already.
func (r *Review) Validate() error {
	switch {
	case r.OrderID <= 0 || r.OrderNo == "":
		return FieldError("order", "a review is of an order")
	case r.Reason == "":
		return FieldError("reason", "is required")
	case r.CreatedAt.IsZero():
		return FieldError("created_at", "is required")
	case r.ResolvedAt != nil:
		return FieldError("resolved_at", "a review is created open")
	}
	return nil
}

// ReviewListParams filters reviews.
type ReviewListParams struct {
	OrderID int64     // 0: every order
	Open    bool      // only unresolved ones
	Since   time.Time // only those created at or after it; zero: no bound
	// Before continues a listing: only reviews after this position in the
	// newest-first order, that is older than it by (created_at, id), are
	// returned; nil starts at the newest. A listing paged with the last
	// review of each page as the next Before sees every review that
	// matches once, even among reviews created at the same microsecond,
	// and a review resolved between pages does not move the others.
	Before *ReviewCursor
	Limit  int
}

// ReviewCursor is a position in a newest-first listing of reviews: a
// review's CreatedAt, as the store returned it, and its ID.
type ReviewCursor struct {
	CreatedAt time.Time
	ID        int64
}

// ReviewResolveParams resolves open reviews: the one with ID, or every open
// one of the delivery DeliveryID, or of the order OrderID, that holds no
// refund (exactly one of the three is set), at At, by By, with Note.
type ReviewResolveParams struct {
	ID         int64
	DeliveryID int64
	OrderID    int64
	At         time.Time
	By         string // who resolves: an operator, or the actor of a retry
	Note       string // what was done; may be empty
}

// MaxNoteLen bounds the note of a resolved review, in bytes.
const MaxNoteLen = 2000

// Validate reports a resolution that no store may be given, as an EINVALID
// error naming the field: not exactly one of ID, DeliveryID and OrderID set
// (and positive), no time, a By that is empty, longer than MaxReasonLen
// bytes, or not UTF-8 text without control characters, and a Note longer
// than MaxNoteLen bytes or not UTF-8 text without control characters other
// than newlines.
func (p *ReviewResolveParams) Validate() error {
	set := 0
	for _, id := range []int64{p.ID, p.DeliveryID, p.OrderID} {
		if id < 0 {
			return FieldError("id", "review, delivery and order ids are positive")
		}
		if id > 0 {
			set++
		}
	}
	switch {
	case set != 1:
		return FieldError("id", "name exactly one of a review, a delivery or an order, not %d", set)
	case p.At.IsZero():
		return FieldError("at", "is required")
	case p.By == "":
		return FieldError("by", "is required: who resolves the review")
	case len(p.By) > MaxReasonLen || !utf8.ValidString(p.By) || !textPattern.MatchString(p.By):
		return FieldError("by", "must be UTF-8 text of at most %d bytes without control characters", MaxReasonLen)
	case len(p.Note) > MaxNoteLen:
		return FieldError("note", "is longer than %d bytes", MaxNoteLen)
	case !utf8.ValidString(p.Note) || strings.ContainsFunc(p.Note, func(r rune) bool { return r != '\n' && unicode.IsControl(r) }):
		return FieldError("note", "must be UTF-8 text without control characters other than newlines")
	}
	return nil
}

// Review errors.
var (
	// ErrReviewNotFound: no review has that id.
	ErrReviewNotFound = &Error{Code: ENOTFOUND, Message: "review not found"}

	// ErrReviewResolved: the review was resolved already; a store refines it
	// with when and by whom.
	ErrReviewResolved = &Error{Code: ECONFLICT, Message: "review already resolved"}
)
