package mysql

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
	at := micros(p.At)
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO coupons (code, status, created_at, updated_at) VALUES (?, ?, ?, ?)`,
			p.Code, string(lapse.CouponAvailable), at, at)
	})
	if isDuplicate(err) {
		return nil, lapse.Refine(lapse.ErrCouponExists, "coupon %q already exists", p.Code)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: create coupon %q: %w", p.Code, err)
	}
	return &lapse.Coupon{Code: p.Code, Status: lapse.CouponAvailable, CreatedAt: fromMicros(at), UpdatedAt: fromMicros(at)}, nil
}

// CouponGet returns the coupon code, or an error that is
// lapse.ErrCouponNotFound.
func (s *Store) CouponGet(ctx context.Context, code string) (*lapse.Coupon, error) {
	c, err := scanCoupon(s.queryRow(ctx, `SELECT `+couponCols+` FROM coupons WHERE code = ?`, code))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrCouponNotFound, "coupon %q not found", code)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get coupon %q: %w", code, err)
	}
	return c, nil
}

// couponMoves are the guarded updates of each kind of move; their arguments
// are the order_no, the order id, the time and the code, and for a move
// that needs the coupon held, the order_no again. A lock needs the coupon
// available; an unlock or a consume needs it locked by the order.
var couponMoves = map[lapse.CouponMoveKind]struct {
	update string
	held   bool
}{
	lapse.CouponLock: {update: `UPDATE coupons SET status = 'locked', order_no = ?, order_id = ?, updated_at = ?
		WHERE code = ? AND status = 'available'`},
	lapse.CouponUnlock: {update: `UPDATE coupons SET status = 'available', order_no = '', order_id = NULL, updated_at = ?
		WHERE code = ? AND status = 'locked' AND order_no = ?`, held: true},
	lapse.CouponConsume: {update: `UPDATE coupons SET status = 'used', updated_at = ?
		WHERE code = ? AND status = 'locked' AND order_no = ?`, held: true},
}

// CouponMove applies the move p.Kind to coupon p.Code for order p.OrderNo
// and journals it, in one transaction (a savepoint inside Tx), and returns
// the coupon as updated. A lock needs the coupon available; an unlock or a
// consume needs it locked by p.OrderNo. Otherwise it writes nothing and
// returns an error that is lapse.ErrCouponNotFound or
// lapse.ErrCouponUnavailable and names the coupon. An unknown kind is an
// EINVALID error.
func (s *Store) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	mv, ok := couponMoves[p.Kind]
	if !ok {
		return nil, lapse.FieldError("kind", "a coupon move is lock, unlock or consume, not %q", p.Kind)
	}
	at := micros(p.At)
	args := []any{p.OrderNo, nullInt64(p.OrderID), at, p.Code}
	if mv.held {
		args = []any{at, p.Code, p.OrderNo}
	}
	c, err := write(ctx, s, func(w *Store) (*lapse.Coupon, error) {
		res, err := w.exec(ctx, mv.update, args...)
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, couponUnavailable(ctx, w, p)
		}
		if _, err := w.exec(ctx, `INSERT INTO coupon_moves (code, order_id, order_no, kind, created_at) VALUES (?, ?, ?, ?, ?)`,
			p.Code, nullInt64(p.OrderID), p.OrderNo, string(p.Kind), at); err != nil {
			return nil, err
		}
		return scanCoupon(w.queryRow(ctx, `SELECT `+couponCols+` FROM coupons WHERE code = ?`, p.Code))
	})
	if err != nil {
		return nil, fail(err, "%s coupon %q for order %s", p.Kind, p.Code, p.OrderNo)
	}
	return c, nil
}

// couponUnavailable explains why the move p changed nothing.
func couponUnavailable(ctx context.Context, w *Store, p *lapse.CouponMoveParams) error {
	var status lapse.CouponStatus
	var holder string
	err := w.queryRow(ctx, `SELECT status, order_no FROM coupons WHERE code = ?`, p.Code).Scan((*string)(&status), &holder)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return lapse.Refine(lapse.ErrCouponNotFound, "coupon %q not found", p.Code)
	case err != nil:
		return err
	case p.Kind == lapse.CouponLock:
		return lapse.Refine(lapse.ErrCouponUnavailable, "coupon %q is not available", p.Code)
	case status == lapse.CouponLocked && holder != p.OrderNo:
		return lapse.Refine(lapse.ErrCouponUnavailable, "coupon %q is not locked by order %s", p.Code, p.OrderNo)
	default:
		return lapse.Refine(lapse.ErrCouponUnavailable, "coupon %q is %s", p.Code, status)
	}
}

// CouponMoveList returns the journal of coupon code, oldest first.
func (s *Store) CouponMoveList(ctx context.Context, code string) ([]*lapse.CouponMove, error) {
	ms, err := queryAll(ctx, s, func(r scanner) (*lapse.CouponMove, error) {
		var m lapse.CouponMove
		var orderID sql.NullInt64
		var at int64
		if err := r.Scan(&m.ID, &m.Code, &orderID, &m.OrderNo, (*string)(&m.Kind), &at); err != nil {
			return nil, err
		}
		m.OrderID, m.CreatedAt = orderID.Int64, fromMicros(at)
		return &m, nil
	}, `SELECT id, code, order_id, order_no, kind, created_at FROM coupon_moves WHERE code = ? ORDER BY id`, code)
	if err != nil {
		return nil, fmt.Errorf("mysql: list moves of coupon %q: %w", code, err)
	}
	return ms, nil
}
