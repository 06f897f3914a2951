package engine

import (
	"cmp"
	"context"

	"github.com/lapsehq/lapse"
)

// A review is an order automation gave up on (a dead delivery, a payment
// in review). It stays open until an operator resolves it (ResolveReview)
// or retries what gave up: RetryDelivery resolves the delivery's reviews,
// Retry the order's, each in the transaction of its retry.

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
// resolved already; EINVALID for a note that lapse.ReviewResolveParams
// refuses (longer than lapse.MaxNoteLen bytes, or with control characters
// other than newlines).
func (e *Engine) ResolveReview(ctx context.Context, id int64, note string, by Actor) (*lapse.Review, error) {
	if id <= 0 {
		return nil, lapse.FieldError("id", "must be a review id, a positive integer")
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
