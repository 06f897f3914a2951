package engine

import (
	"cmp"
	"context"

	"github.com/lapsehq/lapse"
)

// A review is an order automation gave up on (a dead delivery, a payment
// in review). It stays open until an operator resolves it (ResolveReview)
// or retries what gave up: RetryDelivery resolves the delivery's reviews,
// Retry the order's, each in the transaction of its retry. A review that
// holds a merchant refund in review is resolved only by settling that
// refund (SettleReview): resolving it alone would leave the refund, and
// its order, waiting for nobody.

// Reviews lists orders waiting for an operator, newest first.
func (e *Engine) Reviews(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	return e.store.ReviewList(ctx, p)
}

// Review returns the review with id, or lapse.ErrReviewNotFound.
func (e *Engine) Review(ctx context.Context, id int64) (*lapse.Review, error) {
	return e.store.ReviewGet(ctx, id)
}

// ResolveReview resolves the open review id now, by by, with note: the
// operator handled it, and the note says how (it may be empty). It returns
// the review as resolved. Errors: lapse.ErrReviewNotFound;
// lapse.ErrReviewResolved (ECONFLICT), saying when and by whom, when it is
// resolved already; ErrReviewHoldsRefund (ECONFLICT) for a review that
// holds a refund in review, which SettleReview resolves; EINVALID for a
// note that lapse.ReviewResolveParams refuses (longer than
// lapse.MaxNoteLen bytes, or with control characters other than newlines).
func (e *Engine) ResolveReview(ctx context.Context, id int64, note string, by Actor) (*lapse.Review, error) {
	if id <= 0 {
		return nil, lapse.FieldError("id", "must be a review id, a positive integer")
	}
	rv, err := e.store.ReviewGet(ctx, id)
	if err != nil {
		return nil, err
	}
	if rv.OrderRefundID != 0 && rv.ResolvedAt == nil {
		return nil, lapse.Refine(ErrReviewHoldsRefund, "review %d of order %s holds a refund in review: settle the refund as succeeded or failed, which resolves the review", id, rv.OrderNo)
	}
	rs, err := e.store.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: id, At: e.clock.Now(), By: by.resolver(), Note: note})
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, lapse.Errorf(lapse.EINTERNAL, "resolving review %d resolved %d reviews", id, len(rs))
	}
	return rs[0], nil
}

// resolver is who a's resolution is by: its name, or else its path.
func (a Actor) resolver() string { return cmp.Or(a.Name, string(a.FiredBy)) }

// Errors of a review resolved the wrong way: ECONFLICT, nothing changed.
// Errors that refine them name the review.
var (
	// ErrReviewHoldsRefund: ResolveReview was asked to resolve a review
	// that holds a refund in review, which only SettleReview resolves.
	ErrReviewHoldsRefund = &lapse.Error{Code: lapse.ECONFLICT, Message: "the review holds a refund in review, which is settled, not only resolved"}
	// ErrReviewHoldsNoRefund: SettleReview was asked to settle a review
	// that holds no refund, which ResolveReview resolves.
	ErrReviewHoldsNoRefund = &lapse.Error{Code: lapse.ECONFLICT, Message: "the review holds no refund to settle"}
)

// SettleReview has an operator settle the merchant refund in review that
// the open review id holds, as they found it at its provider: to is
// lapse.OrderRefundSucceeded (the money went back) or
// lapse.OrderRefundFailed (it did not; note is kept as the refund's
// failure). In one transaction it resolves the review, by by with note,
// moves the refund, and ends its order when that leaves the order refunding
// with no refund requested or in review: REFUNDED once all it captured went
// back, PAID again otherwise. An order that is not refunding (its refund
// was made at the provider without Lapse) does not move. It returns the
// review as resolved.
//
// Errors, with nothing changed: EINVALID for another status, or a note
// that is empty or that lapse.ReviewResolveParams refuses;
// lapse.ErrReviewNotFound; lapse.ErrReviewResolved (ECONFLICT) when it is
// resolved already; ErrReviewHoldsNoRefund (ECONFLICT).
func (e *Engine) SettleReview(ctx context.Context, id int64, to lapse.OrderRefundStatus, note string, by Actor) (*lapse.Review, error) {
	return e.feat.payments.settleReview(ctx, id, to, note, by)
}

// SettleStake is what SettleReview of the review id puts at stake, in
// minor units of its currency: the amount of the refund it holds. Errors:
// lapse.ErrReviewNotFound; ErrReviewHoldsNoRefund.
func (e *Engine) SettleStake(ctx context.Context, id int64) (amount int64, currency string, err error) {
	x, _, err := e.feat.payments.reviewRefund(ctx, id)
	if err != nil {
		return 0, "", err
	}
	return x.Amount, x.Currency, nil
}
