package engine

import (
	"context"
	"regexp"

	"github.com/lapsehq/lapse"
)

var couponPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// SetStock sets the on-hand quantity of a SKU in the built-in ledger. It
// cannot go below what live orders reserve (lapse.ErrStockReserved).
// Errors: EINVALID for a SKU or on-hand that lapse.StockSetParams.Validate
// refuses.
func (e *Engine) SetStock(ctx context.Context, sku string, onHand int64) (*lapse.Stock, error) {
	return e.store.StockSet(ctx, &lapse.StockSetParams{SKU: sku, OnHand: onHand, At: e.clock.Now()})
}

// Stock returns the ledger line of a SKU, or lapse.ErrStockNotFound.
func (e *Engine) Stock(ctx context.Context, sku string) (*lapse.Stock, error) {
	return e.store.StockGet(ctx, sku)
}

// CreateCoupon adds an available coupon to the built-in ledger, or returns
// lapse.ErrCouponExists.
func (e *Engine) CreateCoupon(ctx context.Context, code string) (*lapse.Coupon, error) {
	if !couponPattern.MatchString(code) {
		return nil, lapse.FieldError("code", "must be 1 to 64 letters, digits, . _ : or -, starting with a letter or digit")
	}
	return e.store.CouponCreate(ctx, &lapse.CouponCreateParams{Code: code, At: e.clock.Now()})
}

// Coupon returns a coupon and its journal, or lapse.ErrCouponNotFound.
func (e *Engine) Coupon(ctx context.Context, code string) (*lapse.Coupon, []*lapse.CouponMove, error) {
	c, err := e.store.CouponGet(ctx, code)
	if err != nil {
		return nil, nil, err
	}
	moves, err := e.store.CouponMoveList(ctx, code)
	return c, moves, err
}
