package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
// has its reason (reviews_open_once_key, the only key an insert can meet):
// that one stands for it, unchanged. A DeliveryID or OrderRefundID of zero
// is stored as none.
func (w *Store) review(ctx context.Context, r *lapse.Review) error {
	if _, err := w.exec(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, order_refund_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id`, r.OrderID, r.OrderNo, r.Reason, nullInt64(r.DeliveryID),
		nullInt64(r.OrderRefundID), column.Micros(r.CreatedAt)); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	return nil
}

// ReviewCreate inserts r, open, and returns it with its id; when an open
// review of its order and delivery has its reason (reviews_open_once_key),
// it inserts nothing and returns that one.
func (s *Store) ReviewCreate(ctx context.Context, r *lapse.Review) (*lapse.Review, error) {
	got, err := write(ctx, s, func(w *Store) (*lapse.Review, error) {
		if err := w.review(ctx, r); err != nil {
			return nil, err
		}
		// By the key the insert met, computed as migration 0024's column
		// is: reason is TEXT, whose = would take 'a' for 'a ' (PAD SPACE)
		// and find another reason's review.
		return scanReview(w.queryRow(ctx, `SELECT `+reviewCols+` FROM reviews
			WHERE open_key = UNHEX(SHA2(CONCAT_WS(':', ?, ?, ?), 256))`,
			r.OrderID, r.DeliveryID, r.Reason))
	})
	if err != nil {
		return nil, fail(err, "create review of order %s", r.OrderNo)
	}
	return got, nil
}

// ReviewList returns the reviews that match p, newest first (created_at,
// then id, descending), at most p.Limit of them; a Limit of zero or less does
// not limit. p.Before bounds them by (created_at, id).
func (s *Store) ReviewList(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	q, args := reviewListQuery(p)
	rs, err := queryAll(ctx, s, scanReview, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list reviews: %w", err)
	}
	return rs, nil
}

// reviewListQuery is the statement of ReviewList and its arguments.
func reviewListQuery(p *lapse.ReviewListParams) (string, []any) {
	var where []string
	var args []any
	if p.OrderID != 0 {
		where, args = append(where, "order_id = ?"), append(args, p.OrderID)
	}
	if p.Open {
		where = append(where, "resolved_at IS NULL")
	}
	if !p.Since.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, column.Micros(p.Since))
	}
	from := "reviews"
	if p.Before != nil {
		// Spelled out, as OrderList does, so that the range optimizer makes
		// it a range of reviews_open_idx (resolved_at, created_at, and the
		// id InnoDB appends).
		at := column.Micros(p.Before.CreatedAt)
		where, args = append(where, "(created_at < ? OR (created_at = ? AND id < ?))"), append(args, at, at, p.Before.ID)
		if p.Open && p.OrderID == 0 {
			// MariaDB plans the open queue as a look-up of resolved_at
			// NULL read backwards from the newest, and would read every
			// open review newer than the cursor to find the page; forced,
			// it seeks to the cursor (TestReviewPageIndex).
			from = "reviews FORCE INDEX (reviews_open_idx)"
		}
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + reviewCols + ` FROM ` + from)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	return q.String(), args
}

// ReviewGet returns the review with id, or lapse.ErrReviewNotFound.
func (s *Store) ReviewGet(ctx context.Context, id int64) (*lapse.Review, error) {
	r, err := scanReview(s.queryRow(ctx, `SELECT `+reviewCols+` FROM reviews WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrReviewNotFound, "no review with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get review %d: %w", id, err)
	}
	return r, nil
}

// ReviewResolve resolves the open reviews p names and returns them by id.
// MariaDB's UPDATE returns no rows, so it locks them first (FOR UPDATE,
// which reads what committed last: a concurrent resolver waits for this
// one and then finds them resolved), then updates exactly those. By p.ID,
// when none is open, it tells a missing review (lapse.ErrReviewNotFound)
// from a resolved one (lapse.ErrReviewResolved).
func (s *Store) ReviewResolve(ctx context.Context, p *lapse.ReviewResolveParams) ([]*lapse.Review, error) {
	match, key := "order_id", p.OrderID
	switch {
	case p.ID != 0:
		match, key = "id", p.ID
	case p.DeliveryID != 0:
		match, key = "delivery_id", p.DeliveryID
	}
	got, err := write(ctx, s, func(w *Store) ([]*lapse.Review, error) {
		open := "resolved_at IS NULL"
		if p.ID == 0 { // by delivery or order: a review that holds a refund stays open
			open += " AND order_refund_id IS NULL"
		}
		ids, err := queryAll(ctx, w, scanInt64, `SELECT id FROM reviews WHERE `+match+` = ? AND `+open+` ORDER BY id FOR UPDATE`, key)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			if p.ID == 0 {
				return nil, nil
			}
			var at sql.NullInt64
			var by string
			err := w.queryRow(ctx, `SELECT resolved_at, resolved_by FROM reviews WHERE id = ?`, p.ID).Scan(&at, &by)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return nil, lapse.Refine(lapse.ErrReviewNotFound, "no review with id %d", p.ID)
			case err != nil:
				return nil, err
			case !at.Valid: // cannot be: the locking read found it resolved
				return nil, lapse.Errorf(lapse.EINTERNAL, "review %d is open but was not resolved", p.ID)
			}
			return nil, lapse.Refine(lapse.ErrReviewResolved, "review %d already resolved at %s by %s",
				p.ID, column.Time(at.Int64).Format(time.RFC3339Nano), by)
		}
		if _, err := w.exec(ctx, `UPDATE reviews SET resolved_at = ?, resolved_by = ?, note = ? WHERE id IN (`+marks(len(ids))+`)`,
			append([]any{column.Micros(p.At), p.By, p.Note}, int64Args(ids)...)...); err != nil {
			return nil, err
		}
		return queryAll(ctx, w, scanReview, `SELECT `+reviewCols+` FROM reviews WHERE id IN (`+marks(len(ids))+`) ORDER BY id`, int64Args(ids)...)
	})
	if err != nil {
		return nil, fail(err, "resolve reviews (%s %d)", match, key)
	}
	return got, nil
}

func scanReview(r scanner) (*lapse.Review, error) {
	var (
		rv                             lapse.Review
		deliveryID, refundID, resolved sql.NullInt64
		created                        int64
	)
	if err := r.Scan(&rv.ID, &rv.OrderID, &rv.OrderNo, &rv.Reason, &deliveryID, &refundID, &created, &resolved, &rv.ResolvedBy,
		&rv.Note); err != nil {
		return nil, err
	}
	rv.DeliveryID, rv.OrderRefundID = deliveryID.Int64, refundID.Int64
	rv.CreatedAt, rv.ResolvedAt = column.Time(created), column.NullTime(resolved)
	return &rv, nil
}
