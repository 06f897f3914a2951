package mysql

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
	at := column.Micros(p.At)
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
	return &lapse.Coupon{Code: p.Code, Status: lapse.CouponAvailable, CreatedAt: column.Time(at), UpdatedAt: column.Time(at)}, nil
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

// couponMoveSQL is the guarded update of a lapse.CouponChange: its
// arguments are the status, holder and order id it leaves, the time, the
// code, and the status and holder it needs.
const couponMoveSQL = `UPDATE coupons SET status = ?, order_no = ?, order_id = ?, updated_at = ?
	WHERE code = ? AND status = ? AND order_no = ?`

// CouponMove applies the change p.Change() to coupon p.Code and journals the
// move, in one transaction (a savepoint inside Tx), and returns the coupon
// as updated. When the coupon is not as the change needs, it writes nothing
// and returns lapse.CouponRefusal of what it found.
func (s *Store) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	ch, _ := p.Change()
	at := column.Micros(p.At)
	c, err := write(ctx, s, func(w *Store) (*lapse.Coupon, error) {
		res, err := w.exec(ctx, couponMoveSQL, string(ch.To), ch.ToHolder, nullInt64(ch.ToOrderID), at,
			p.Code, string(ch.From), ch.FromHolder)
		if err != nil {
			return nil, err
		}
		c, err := scanCoupon(w.queryRow(ctx, `SELECT `+couponCols+` FROM coupons WHERE code = ?`, p.Code))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil, lapse.CouponRefusal(p, nil)
		case err != nil:
			return nil, err
		case affected(res) == 0:
			return nil, lapse.CouponRefusal(p, c)
		}
		if _, err := w.exec(ctx, `INSERT INTO coupon_moves (code, order_id, order_no, kind, created_at) VALUES (?, ?, ?, ?, ?)`,
			p.Code, p.OrderID, p.OrderNo, string(p.Kind), at); err != nil {
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, fail(err, "%s coupon %q for order %s", p.Kind, p.Code, p.OrderNo)
	}
	return c, nil
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
		m.OrderID, m.CreatedAt = orderID.Int64, column.Time(at)
		return &m, nil
	}, `SELECT id, code, order_id, order_no, kind, created_at FROM coupon_moves WHERE code = ? ORDER BY id`, code)
	if err != nil {
		return nil, fmt.Errorf("mysql: list moves of coupon %q: %w", code, err)
	}
	return ms, nil
}

// CouponCountLocked returns how many coupons are locked by an order.
func (s *Store) CouponCountLocked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.queryRow(ctx, `SELECT count(*) FROM coupons WHERE status = ?`, string(lapse.CouponLocked)).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count locked coupons: %w", err)
	}
	return n, nil
}
