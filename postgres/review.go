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

// Reviews are written by DeliveryFinish, PaymentCreate, PaymentUpdate,
// GroupMemberUpdate and OrderRefundUpdate, and resolved by ReviewResolve.

const reviewColumns = `id, order_id, order_no, reason, coalesce(delivery_id, 0), coalesce(order_refund_id, 0), created_at,
	resolved_at, resolved_by, note`

// reviewOpen is the test that a review is open, the predicate of
// reviews_open_idx and reviews_delivery_idx. reviewOpenByKey is the same
// test for a statement that finds reviews by id or order, spelled with IS
// TRUE so that the planner cannot match it to those predicates: with
// statistics taken while few reviews were open, reviews_open_idx looks
// empty, and a look-up by key that matched its predicate could be planned
// as a read of every open review (TestReviewByKeyProbe).
const (
	reviewOpen      = `resolved_at IS NULL`
	reviewOpenByKey = `(resolved_at IS NULL) IS TRUE`
)

// ReviewList returns reviews matching p, newest first (created_at, then id,
// descending), at most p.Limit of them; a Limit of zero or less does not
// limit. p.Before bounds them by (created_at, id).
func (s *Store) ReviewList(ctx context.Context, p *lapse.ReviewListParams) ([]*lapse.Review, error) {
	q, args := reviewListQuery(p)
	out, err := s.queryReviews(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list reviews: %w", err)
	}
	return out, nil
}

// reviewListQuery is the statement of ReviewList and its arguments.
func reviewListQuery(p *lapse.ReviewListParams) (string, []any) {
	var q strings.Builder
	var args []any
	q.WriteString(`SELECT ` + reviewColumns + ` FROM reviews WHERE true`)
	if p.OrderID != 0 {
		args = append(args, p.OrderID)
		q.WriteString(" AND order_id = $" + strconv.Itoa(len(args)))
	}
	switch {
	case p.Open && p.OrderID != 0:
		q.WriteString(" AND " + reviewOpenByKey) // by reviews_order_idx
	case p.Open:
		q.WriteString(" AND " + reviewOpen) // by reviews_open_idx
	}
	if !p.Since.IsZero() {
		args = append(args, p.Since)
		q.WriteString(" AND created_at >= $" + strconv.Itoa(len(args)))
	}
	if p.Before != nil {
		// A row comparison: reviews_open_idx, on created_at alone, serves
		// it as the range created_at <= the cursor's, and id settles ties.
		args = append(args, p.Before.CreatedAt, p.Before.ID)
		q.WriteString(" AND (created_at, id) < ($" + strconv.Itoa(len(args)-1) + ", $" + strconv.Itoa(len(args)) + ")")
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q.WriteString(" LIMIT $" + strconv.Itoa(len(args)))
	}
	return q.String(), args
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

// ReviewCreate inserts r, open, and returns it with its id; when an open
// review of its order and delivery has its reason (reviews_open_once_key),
// it inserts nothing and returns that one.
func (s *Store) ReviewCreate(ctx context.Context, r *lapse.Review) (*lapse.Review, error) {
	var got *lapse.Review
	err := s.Tx(ctx, func(tx lapse.Store) error {
		db := tx.(*Store)
		rs, err := db.queryReviews(ctx, `INSERT INTO reviews (order_id, order_no, reason, delivery_id, order_refund_id, created_at)
			VALUES ($1, $2, $3, nullif($4::bigint, 0), nullif($5::bigint, 0), $6) ON CONFLICT DO NOTHING RETURNING `+reviewColumns,
			r.OrderID, r.OrderNo, r.Reason, r.DeliveryID, r.OrderRefundID, r.CreatedAt)
		if err == nil && len(rs) == 0 {
			rs, err = db.queryReviews(ctx, `SELECT `+reviewColumns+` FROM reviews
				WHERE order_id = $1 AND coalesce(delivery_id, 0) = $2 AND reason = $3 AND resolved_at IS NULL`,
				r.OrderID, r.DeliveryID, r.Reason)
		}
		if err == nil && len(rs) == 0 {
			err = lapse.ErrStale // the open one was resolved in between
		}
		if err == nil {
			got = rs[0]
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: create review of order %s: %w", r.OrderNo, err)
	}
	return got, nil
}

// reviewResolveSQL resolves the open reviews whose column match is $4: id
// and order_id are found by their own indexes, delivery_id by
// reviews_delivery_idx, which holds only open reviews. By delivery or
// order, a review that holds a refund is left open.
func reviewResolveSQL(match string) string {
	open := reviewOpenByKey
	if match == "delivery_id" {
		open = reviewOpen
	}
	if match != "id" {
		open += " AND order_refund_id IS NULL"
	}
	return `UPDATE reviews SET resolved_at = $1, resolved_by = $2, note = $3
		WHERE ` + match + ` = $4 AND ` + open + ` RETURNING ` + reviewColumns
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
	got, err := s.queryReviews(ctx, reviewResolveSQL(match), p.At, p.By, p.Note, key)
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
		if err := row.Scan(&r.ID, &r.OrderID, &r.OrderNo, &r.Reason, &r.DeliveryID, &r.OrderRefundID, &r.CreatedAt, &r.ResolvedAt,
			&r.ResolvedBy, &r.Note); err != nil {
			return nil, err
		}
		r.CreatedAt, r.ResolvedAt = r.CreatedAt.UTC(), utcPtr(r.ResolvedAt)
		return &r, nil
	})
}
