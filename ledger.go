package lapse

import "time"

// Stock is the built-in ledger line of one SKU. Available is OnHand −
// Reserved; neither OnHand nor Reserved is ever negative, and Reserved never
// exceeds OnHand.
type Stock struct {
	SKU       string    `json:"sku"`
	OnHand    int64     `json:"on_hand"`
	Reserved  int64     `json:"reserved"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Available is what new orders may still reserve.
func (s *Stock) Available() int64 { return s.OnHand - s.Reserved }

// StockMoveKind says what a stock move does.
type StockMoveKind string

// Stock moves. For every order, reserved − released − consumed = 0 once it
// has ended.
const (
	StockReserve StockMoveKind = "reserve" // an order holds qty: reserved += qty (needs available ≥ qty)
	StockRelease StockMoveKind = "release" // the order gives it back: reserved −= qty
	StockConsume StockMoveKind = "consume" // the order was paid: on_hand −= qty, reserved −= qty
)

// StockMove is one line of the stock journal.
type StockMove struct {
	ID        int64         `json:"id"`
	OrderID   int64         `json:"-"`
	SKU       string        `json:"sku"`
	Qty       int64         `json:"qty"`
	Kind      StockMoveKind `json:"kind"`
	CreatedAt time.Time     `json:"created_at"`
}

// CouponStatus is where a coupon stands.
type CouponStatus string

// Coupon statuses. At most one live order holds a coupon.
const (
	CouponAvailable CouponStatus = "available" // may be locked by a new order
	CouponLocked    CouponStatus = "locked"    // held by OrderNo until it is paid (used) or closed (available)
	CouponUsed      CouponStatus = "used"      // consumed by a paid order; terminal
)

// Coupon is a line of the built-in coupon ledger.
type Coupon struct {
	Code      string       `json:"code"`
	Status    CouponStatus `json:"status"`
	OrderNo   string       `json:"order_no"` // the order holding or having used it; "" when available
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
}

// CouponMoveKind says what a coupon move does.
type CouponMoveKind string

// Coupon moves.
const (
	CouponLock    CouponMoveKind = "lock"    // available → locked by the order
	CouponUnlock  CouponMoveKind = "unlock"  // locked by the order → available
	CouponConsume CouponMoveKind = "consume" // locked by the order → used
)

// CouponMove is one line of the coupon journal.
type CouponMove struct {
	ID        int64          `json:"id"`
	Code      string         `json:"code"`
	OrderID   int64          `json:"-"`
	OrderNo   string         `json:"order_no"`
	Kind      CouponMoveKind `json:"kind"`
	CreatedAt time.Time      `json:"created_at"`
}

// Ledger errors.
var (
	ErrStockNotFound     = &Error{Code: ENOTFOUND, Message: "no stock record for that sku"}
	ErrStockShort        = &Error{Code: ECONFLICT, Message: "not enough stock"}
	ErrCouponNotFound    = &Error{Code: ENOTFOUND, Message: "coupon not found"}
	ErrCouponExists      = &Error{Code: ECONFLICT, Message: "coupon already exists"}
	ErrCouponUnavailable = &Error{Code: ECONFLICT, Message: "coupon is not available"}
)
