package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
)

const couponCols = `code, status, order_no, created_at, updated_at`

func scanCoupon(r scanner) (*lapse.Coupon, error) {
	var c lapse.Coupon
	var created, updated int64
	if err := r.Scan(&c.Code, (*string)(&c.Status), &c.OrderNo, &created, &updated); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &c, nil
}

// CouponCreate adds the coupon p.Code, available, and returns it, or an
// error that is lapse.ErrCouponExists and writes nothing.
func (s *Store) CouponCreate(ctx context.Context, p *lapse.CouponCreateParams) (*lapse.Coupon, error) {
	var c *lapse.Coupon
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		c, err = scanCoupon(w.tx.QueryRowContext(ctx, `INSERT INTO coupons (code, status, created_at, updated_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (code) DO NOTHING
			RETURNING `+couponCols, p.Code, string(lapse.CouponAvailable), micros(p.At), micros(p.At)))
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.Refine(lapse.ErrCouponExists, "coupon %q already exists", p.Code)
		}
		return err
	})
	if err != nil {
		return nil, fail(err, "coupon create %s", p.Code)
	}
	return c, nil
}

// CouponGet returns the coupon code, or an error that is
// lapse.ErrCouponNotFound.
func (s *Store) CouponGet(ctx context.Context, code string) (*lapse.Coupon, error) {
	c, err := scanCoupon(s.db().QueryRowContext(ctx, `SELECT `+couponCols+` FROM coupons WHERE code = ?`, code))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCouponNotFound, "coupon %q not found", code)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: coupon get %s: %w", code, err)
	}
	return c, nil
}

// couponMoves are the guarded updates of each kind of move: ?1 is the
// code, ?2 the order_no, ?3 the order id, ?4 the time. A lock needs the
// coupon available; an unlock or a consume needs it locked by the order
// (order_no ?2).
var couponMoves = map[lapse.CouponMoveKind]string{
	lapse.CouponLock: `UPDATE coupons SET status = 'locked', order_no = ?2, order_id = ?3, updated_at = ?4
		WHERE code = ?1 AND status = 'available'`,
	lapse.CouponUnlock: `UPDATE coupons SET status = 'available', order_no = '', order_id = NULL, updated_at = ?4
		WHERE code = ?1 AND status = 'locked' AND order_no = ?2`,
	lapse.CouponConsume: `UPDATE coupons SET status = 'used', updated_at = ?4
		WHERE code = ?1 AND status = 'locked' AND order_no = ?2`,
}

// CouponMove applies the move p.Kind to coupon p.Code for order p.OrderNo,
// journals it, and returns the coupon as updated. A lock needs the coupon
// available; an unlock or a consume needs it locked by p.OrderNo. Otherwise
// it writes nothing and returns an error that is lapse.ErrCouponNotFound or
// lapse.ErrCouponUnavailable and names the coupon. An unknown kind is an
// EINVALID error.
func (s *Store) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	update, ok := couponMoves[p.Kind]
	if !ok {
		return nil, lapse.FieldError("kind", "a coupon move is lock, unlock or consume, not %q", p.Kind)
	}
	var c *lapse.Coupon
	err := s.write(ctx, func(w *writeTx) error {
		at := micros(p.At)
		var err error
		c, err = scanCoupon(w.tx.QueryRowContext(ctx, update+` RETURNING `+couponCols,
			p.Code, p.OrderNo, nullInt64(p.OrderID), at))
		if errors.Is(err, sql.ErrNoRows) {
			return couponUnavailable(ctx, w, p)
		}
		if err != nil {
			return err
		}
		_, err = w.tx.ExecContext(ctx, `INSERT INTO coupon_moves (code, order_id, order_no, kind, created_at)
			VALUES (?, ?, ?, ?, ?)`, p.Code, nullInt64(p.OrderID), p.OrderNo, string(p.Kind), at)
		return err
	})
	if err != nil {
		return nil, fail(err, "coupon %s %s for order %s", p.Kind, p.Code, p.OrderNo)
	}
	return c, nil
}

// couponUnavailable explains why the move p changed nothing.
func couponUnavailable(ctx context.Context, w *writeTx, p *lapse.CouponMoveParams) error {
	var status lapse.CouponStatus
	var holder string
	err := w.tx.QueryRowContext(ctx, `SELECT status, order_no FROM coupons WHERE code = ?`, p.Code).
		Scan((*string)(&status), &holder)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return lapse.Refine(lapse.ErrCouponNotFound, "coupon %q not found", p.Code)
	case err != nil:
		return err
	case status == lapse.CouponAvailable:
		return lapse.Refine(lapse.ErrCouponUnavailable, "coupon %q is not locked", p.Code)
	case holder != p.OrderNo:
		return lapse.Refine(lapse.ErrCouponUnavailable, "coupon %q is %s by another order", p.Code, status)
	default:
		return lapse.Refine(lapse.ErrCouponUnavailable, "coupon %q is %s", p.Code, status)
	}
}

// CouponMoveList returns the journal of coupon code, oldest first.
func (s *Store) CouponMoveList(ctx context.Context, code string) ([]*lapse.CouponMove, error) {
	ms, err := queryAll(ctx, s.db(), scanCouponMove, `SELECT id, code, order_id, order_no, kind, created_at
		FROM coupon_moves WHERE code = ? ORDER BY id`, code)
	if err != nil {
		return nil, fmt.Errorf("sqlite: coupon move list %s: %w", code, err)
	}
	return ms, nil
}

func scanCouponMove(r scanner) (*lapse.CouponMove, error) {
	var m lapse.CouponMove
	var orderID sql.NullInt64
	var at int64
	if err := r.Scan(&m.ID, &m.Code, &orderID, &m.OrderNo, (*string)(&m.Kind), &at); err != nil {
		return nil, err
	}
	m.OrderID, m.CreatedAt = orderID.Int64, fromMicros(at)
	return &m, nil
}
