package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// Reviews are written by DeliveryFinish, PaymentCreate and PaymentUpdate,
// and resolved by ReviewResolve.

const reviewColumns = `id, order_id, order_no, reason, coalesce(delivery_id, 0), created_at, resolved_at, resolved_by, note`

// ReviewList returns reviews matching p, newest first (created_at, then id,
// descending), at most p.Limit of them; a Limit of zero or less does not
// limit.
func (s *Store) ReviewList(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	var q strings.Builder
	var args []any
	q.WriteString(`SELECT ` + reviewColumns + ` FROM reviews WHERE true`)
	if p.OrderID != 0 {
		args = append(args, p.OrderID)
		q.WriteString(" AND order_id = $" + strconv.Itoa(len(args)))
	}
	if p.Open {
		q.WriteString(" AND resolved_at IS NULL") // the condition of reviews_open_idx
	}
	if !p.Since.IsZero() {
		args = append(args, p.Since)
		q.WriteString(" AND created_at >= $" + strconv.Itoa(len(args)))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q.WriteString(" LIMIT $" + strconv.Itoa(len(args)))
	}
	out, err := s.queryReviews(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list reviews: %w", err)
	}
	return out, nil
}

// ReviewGet returns the review with id, or lapse.ErrReviewNotFound.
func (s *Store) ReviewGet(ctx context.Context, id int64) (*lapse.Review, error) {
	rs, err := s.queryReviews(ctx, `SELECT `+reviewColumns+` FROM reviews WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("postgres: get review %d: %w", id, err)
	}
	if len(rs) == 0 {
		return nil, lapse.Refine(lapse.ErrReviewNotFound, "no review with id %d", id)
	}
	return rs[0], nil
}

// ReviewResolve resolves the open reviews p names in one UPDATE and returns
// them by id. A concurrent resolver's UPDATE waits for this one's row locks
// and then finds the reviews resolved. By p.ID, when it resolves none, a
// second statement, which sees what committed meanwhile, tells a missing
// review (lapse.ErrReviewNotFound) from a resolved one
// (lapse.ErrReviewResolved).
func (s *Store) ReviewResolve(ctx context.Context, p *lapse.ReviewResolveParams) ([]*lapse.Review, error) {
	match, key := "order_id", p.OrderID
	switch {
	case p.ID != 0:
		match, key = "id", p.ID
	case p.DeliveryID != 0:
		match, key = "delivery_id", p.DeliveryID
	}
	got, err := s.queryReviews(ctx, `UPDATE reviews SET resolved_at = $1, resolved_by = $2, note = $3
		WHERE `+match+` = $4 AND resolved_at IS NULL RETURNING `+reviewColumns, p.At, p.By, p.Note, key)
	if err != nil {
		return nil, fmt.Errorf("postgres: resolve reviews (%s %d): %w", match, key, err)
	}
	if len(got) > 0 || p.ID == 0 {
		// RETURNING promises no order.
		slices.SortFunc(got, func(a, b *lapse.Review) int { return cmp.Compare(a.ID, b.ID) })
		return got, nil
	}
	var at *time.Time
	var by string
	err = s.db.QueryRow(ctx, `SELECT resolved_at, resolved_by FROM reviews WHERE id = $1`, p.ID).Scan(&at, &by)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, lapse.Refine(lapse.ErrReviewNotFound, "no review with id %d", p.ID)
	case err != nil:
		return nil, fmt.Errorf("postgres: resolve review %d: %w", p.ID, err)
	case at == nil: // cannot be: an open review is resolved by the UPDATE
		return nil, lapse.Errorf(lapse.EINTERNAL, "review %d is open but was not resolved", p.ID)
	}
	return nil, lapse.Refine(lapse.ErrReviewResolved, "review %d already resolved at %s by %s", p.ID, at.UTC().Format(time.RFC3339Nano), by)
}

func (s *Store) queryReviews(ctx context.Context, query string, args ...any) ([]*lapse.Review, error) {
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Review, error) {
		var r lapse.Review
		if err := row.Scan(&r.ID, &r.OrderID, &r.OrderNo, &r.Reason, &r.DeliveryID, &r.CreatedAt, &r.ResolvedAt, &r.ResolvedBy, &r.Note); err != nil {
			return nil, err
		}
		r.CreatedAt, r.ResolvedAt = r.CreatedAt.UTC(), utcPtr(r.ResolvedAt)
		return &r, nil
	})
}
