package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// Reviews are created by DeliveryFinish, when a delivery dies, by
// PaymentCreate and PaymentUpdate, when a payment goes to review, by
// GroupMemberUpdate, when a member's charge does, and by OrderRefundUpdate,
// once per order, delivery and reason while open (lapse.Review); and
// resolved by ReviewResolve.

const reviewCols = `id, order_id, order_no, reason, delivery_id, order_refund_id, created_at, resolved_at, resolved_by, note`

// review inserts r, open, unless an open review of its order and delivery
// has its reason (reviews_open_once_key): that one stands for it. A
// DeliveryID or OrderRefundID of zero is stored as none.
func (w *writeTx) review(ctx context.Context, r *lapse.Review) error {
	_, err := w.tx.ExecContext(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, order_refund_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, r.OrderID, r.OrderNo, r.Reason, nullInt64(r.DeliveryID),
		nullInt64(r.OrderRefundID), column.Micros(r.CreatedAt))
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	return nil
}

// ReviewCreate inserts r, open, and returns it with its id; when an open
// review of its order and delivery has its reason (reviews_open_once_key),
// it inserts nothing and returns that one.
func (s *Store) ReviewCreate(ctx context.Context, r *lapse.Review) (*lapse.Review, error) {
	var got *lapse.Review
	err := s.write(ctx, func(w *writeTx) error {
		if err := w.review(ctx, r); err != nil {
			return err
		}
		var err error
		got, err = scanReview(w.tx.QueryRowContext(ctx, `SELECT `+reviewCols+` FROM reviews
			WHERE order_id = ? AND coalesce(delivery_id, 0) = ? AND reason = ? AND resolved_at IS NULL`,
			r.OrderID, r.DeliveryID, r.Reason))
		return err
	})
	if err != nil {
		return nil, fail(err, "review create of order %s", r.OrderNo)
	}
	return got, nil
}

// ReviewList returns the reviews that match p, newest first (created_at,
// then id, descending), at most p.Limit of them; a Limit of zero or less does
// not limit. p.Before bounds them by (created_at, id).
func (s *Store) ReviewList(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	var where []string
	var args []any
	if p.OrderID != 0 {
		where, args = append(where, "order_id = ?"), append(args, p.OrderID)
	}
	if p.Open {
		where = append(where, "resolved_at IS NULL") // the condition of reviews_open_idx
	}
	if !p.Since.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, column.Micros(p.Since))
	}
	if p.Before != nil {
		where, args = append(where, "(created_at, id) < (?, ?)"), append(args, column.Micros(p.Before.CreatedAt), p.Before.ID)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + reviewCols + ` FROM reviews`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC LIMIT ?")
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rs, err := queryAll(ctx, s.db(), scanReview, q.String(), append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: review list: %w", err)
	}
	return rs, nil
}

// ReviewGet returns the review with id, or lapse.ErrReviewNotFound.
func (s *Store) ReviewGet(ctx context.Context, id int64) (*lapse.Review, error) {
	r, err := scanReview(s.db().QueryRowContext(ctx, `SELECT `+reviewCols+` FROM reviews WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrReviewNotFound, "no review with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: review get %d: %w", id, err)
	}
	return r, nil
}

// ReviewResolve resolves the open reviews p names in one UPDATE and returns
// them by id. By p.ID, when it resolves none, it tells a missing review
// (lapse.ErrReviewNotFound) from a resolved one (lapse.ErrReviewResolved).
func (s *Store) ReviewResolve(ctx context.Context, p *lapse.ReviewResolveParams) ([]*lapse.Review, error) {
	var match string
	var key int64
	switch {
	case p.ID != 0:
		match, key = "id = ?4", p.ID
	case p.DeliveryID != 0: // a review that holds a refund stays open
		match, key = "delivery_id = ?4 AND order_refund_id IS NULL", p.DeliveryID
	default:
		match, key = "order_id = ?4 AND order_refund_id IS NULL", p.OrderID
	}
	var got []*lapse.Review
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = queryAll(ctx, w.tx, scanReview, `UPDATE reviews SET resolved_at = ?1, resolved_by = ?2, note = ?3
			WHERE `+match+` AND resolved_at IS NULL RETURNING `+reviewCols,
			column.Micros(p.At), p.By, p.Note, key)
		if err != nil || len(got) > 0 || p.ID == 0 {
			return err
		}
		var at sql.NullInt64
		var by string
		err = w.tx.QueryRowContext(ctx, `SELECT resolved_at, resolved_by FROM reviews WHERE id = ?`, p.ID).Scan(&at, &by)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return lapse.Refine(lapse.ErrReviewNotFound, "no review with id %d", p.ID)
		case err != nil:
			return err
		case !at.Valid: // cannot be: the UPDATE resolves an open review
			return lapse.Errorf(lapse.EINTERNAL, "review %d is open but was not resolved", p.ID)
		}
		return lapse.Refine(lapse.ErrReviewResolved, "review %d already resolved at %s by %s",
			p.ID, column.Time(at.Int64).Format(time.RFC3339Nano), by)
	})
	if err != nil {
		return nil, fail(err, "review resolve")
	}
	// RETURNING promises no order.
	slices.SortFunc(got, func(a, b *lapse.Review) int { return cmp.Compare(a.ID, b.ID) })
	return got, nil
}

func scanReview(r scanner) (*lapse.Review, error) {
	var (
		rv                   lapse.Review
		deliveryID, refundID sql.NullInt64
		created              int64
		resolved             sql.NullInt64
	)
	if err := r.Scan(&rv.ID, &rv.OrderID, &rv.OrderNo, &rv.Reason, &deliveryID, &refundID, &created, &resolved, &rv.ResolvedBy,
		&rv.Note); err != nil {
		return nil, err
	}
	rv.DeliveryID, rv.OrderRefundID = deliveryID.Int64, refundID.Int64
	rv.CreatedAt, rv.ResolvedAt = column.Time(created), column.NullTime(resolved)
	return &rv, nil
}
