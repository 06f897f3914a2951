package engine

import (
	"context"

	"github.com/lapsehq/lapse"
)

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
// lapse.ErrCouponExists; a code that lapse.CouponCreateParams.Validate
// refuses is EINVALID.
func (e *Engine) CreateCoupon(ctx context.Context, code string) (*lapse.Coupon, error) {
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
