package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const couponColumns = "code, status, order_no, created_at, updated_at"

func scanCoupon(row pgx.Row, extra ...any) (*lapse.Coupon, error) {
	var c lapse.Coupon
	if err := row.Scan(append([]any{&c.Code, &c.Status, &c.OrderNo, &c.CreatedAt, &c.UpdatedAt}, extra...)...); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return &c, nil
}

// CouponCreate adds an available coupon, or returns lapse.ErrCouponExists
// (refined with the code) and writes nothing.
func (s *Store) CouponCreate(ctx context.Context, p *lapse.CouponCreateParams) (*lapse.Coupon, error) {
	c, err := scanCoupon(s.db.QueryRow(ctx, `INSERT INTO coupons (code, status, created_at, updated_at)
		VALUES ($1, $2, $3, $3) ON CONFLICT (code) DO NOTHING
		RETURNING `+couponColumns, p.Code, lapse.CouponAvailable, p.At))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCouponExists, "coupon %q already exists", p.Code)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: create coupon %q: %w", p.Code, err)
	}
	return c, nil
}

// CouponGet returns a coupon, or lapse.ErrCouponNotFound.
func (s *Store) CouponGet(ctx context.Context, code string) (*lapse.Coupon, error) {
	c, err := scanCoupon(s.db.QueryRow(ctx, "SELECT "+couponColumns+" FROM coupons WHERE code = $1", code))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCouponNotFound, "coupon %q not found", code)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get coupon %q: %w", code, err)
	}
	return c, nil
}

// couponMoveSQL is the guarded update of a lapse.CouponChange with its
// journal row. When the guard fails the second branch returns the coupon as
// the statement's snapshot has it, for lapse.CouponRefusal to say why; no
// row at all means there is no such coupon.
const couponMoveSQL = `WITH u AS (
	UPDATE coupons SET status = $2, order_no = $3, order_id = nullif($4::bigint, 0), updated_at = $5
	WHERE code = $1 AND status = $6 AND order_no = $7
	RETURNING ` + couponColumns + `
), m AS (
	INSERT INTO coupon_moves (code, order_id, order_no, kind, created_at)
	SELECT u.code, $8, $9, $10, $5 FROM u
)
SELECT ` + couponColumns + `, true FROM u
UNION ALL
SELECT ` + couponColumns + `, false FROM coupons WHERE code = $1 AND NOT EXISTS (SELECT FROM u)`

// CouponMove applies the change p.Change() to a coupon and journals the
// move, in one statement. When the coupon is not as the change needs, it
// writes nothing and returns lapse.CouponRefusal of what it found.
func (s *Store) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	ch, _ := p.Change()
	var moved bool
	c, err := scanCoupon(s.db.QueryRow(ctx, couponMoveSQL, p.Code, ch.To, ch.ToHolder, ch.ToOrderID, p.At, ch.From, ch.FromHolder,
		p.OrderID, p.OrderNo, p.Kind), &moved)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, lapse.CouponRefusal(p, nil)
	case err != nil:
		return nil, fmt.Errorf("postgres: %s coupon %q for order %s: %w", p.Kind, p.Code, p.OrderNo, err)
	case !moved:
		return nil, lapse.CouponRefusal(p, c)
	}
	return c, nil
}

// CouponMoveList returns the journal of a coupon, oldest first.
func (s *Store) CouponMoveList(ctx context.Context, code string) ([]*lapse.CouponMove, error) {
	rows, err := s.db.Query(ctx, `SELECT id, code, coalesce(order_id, 0), order_no, kind, created_at
		FROM coupon_moves WHERE code = $1 ORDER BY id`, code)
	if err != nil {
		return nil, fmt.Errorf("postgres: list moves of coupon %q: %w", code, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.CouponMove, error) {
		var m lapse.CouponMove
		if err := row.Scan(&m.ID, &m.Code, &m.OrderID, &m.OrderNo, &m.Kind, &m.CreatedAt); err != nil {
			return nil, err
		}
		m.CreatedAt = m.CreatedAt.UTC()
		return &m, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list moves of coupon %q: %w", code, err)
	}
	return out, nil
}

// CouponCountLocked returns how many coupons are locked by an order.
func (s *Store) CouponCountLocked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, "SELECT count(*) FROM coupons WHERE status = $1", string(lapse.CouponLocked)).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count locked coupons: %w", err)
	}
	return n, nil
}
