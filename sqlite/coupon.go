package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const couponCols = `code, status, order_no, created_at, updated_at`

func scanCoupon(r scanner) (*lapse.Coupon, error) {
	var c lapse.Coupon
	var created, updated int64
	if err := r.Scan(&c.Code, (*string)(&c.Status), &c.OrderNo, &created, &updated); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt = column.Time(created), column.Time(updated)
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
			RETURNING `+couponCols, p.Code, string(lapse.CouponAvailable), column.Micros(p.At), column.Micros(p.At)))
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

// couponMoveSQL is the guarded update of a lapse.CouponChange: ?1 to ?3 the
// status, holder and order id it leaves, ?4 the time, ?5 the code, ?6 and ?7
// the status and holder it needs.
const couponMoveSQL = `UPDATE coupons SET status = ?1, order_no = ?2, order_id = ?3, updated_at = ?4
	WHERE code = ?5 AND status = ?6 AND order_no = ?7
	RETURNING ` + couponCols

// CouponMove applies the change p.Change() to coupon p.Code, journals the
// move, and returns the coupon as updated. When the coupon is not as the
// change needs, it writes nothing and returns lapse.CouponRefusal of what it
// found.
func (s *Store) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	ch, _ := p.Change()
	var c *lapse.Coupon
	err := s.write(ctx, func(w *writeTx) error {
		at := column.Micros(p.At)
		var err error
		c, err = scanCoupon(w.tx.QueryRowContext(ctx, couponMoveSQL, string(ch.To), ch.ToHolder, nullInt64(ch.ToOrderID), at,
			p.Code, string(ch.From), ch.FromHolder))
		if errors.Is(err, sql.ErrNoRows) {
			found, err := scanCoupon(w.tx.QueryRowContext(ctx, `SELECT `+couponCols+` FROM coupons WHERE code = ?`, p.Code))
			if errors.Is(err, sql.ErrNoRows) {
				return lapse.CouponRefusal(p, nil)
			}
			if err != nil {
				return err
			}
			return lapse.CouponRefusal(p, found)
		}
		if err != nil {
			return err
		}
		_, err = w.tx.ExecContext(ctx, `INSERT INTO coupon_moves (code, order_id, order_no, kind, created_at)
			VALUES (?, ?, ?, ?, ?)`, p.Code, p.OrderID, p.OrderNo, string(p.Kind), at)
		return err
	})
	if err != nil {
		return nil, fail(err, "coupon %s %s for order %s", p.Kind, p.Code, p.OrderNo)
	}
	return c, nil
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

// CouponCountLocked returns how many coupons are locked by an order.
func (s *Store) CouponCountLocked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db().QueryRowContext(ctx, `SELECT count(*) FROM coupons WHERE status = ?`, string(lapse.CouponLocked)).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: coupon count locked: %w", err)
	}
	return n, nil
}

func scanCouponMove(r scanner) (*lapse.CouponMove, error) {
	var m lapse.CouponMove
	var orderID sql.NullInt64
	var at int64
	if err := r.Scan(&m.ID, &m.Code, &orderID, &m.OrderNo, (*string)(&m.Kind), &at); err != nil {
		return nil, err
	}
	m.OrderID, m.CreatedAt = orderID.Int64, column.Time(at)
	return &m, nil
}
