package lapse

import (
	"cmp"
	"math"
	"slices"
	"time"
)

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

// StockDelta is what a stock move does to a ledger line, per unit moved: a
// move of qty adds OnHand×qty to the line's on-hand and Reserved×qty to what
// it has reserved. A move applies to a line only when the line keeps the
// ledger's invariant, 0 ≤ reserved ≤ on-hand, afterwards; that guard is the
// whole of what each kind needs (a reserve, available ≥ qty; a release,
// reserved ≥ qty; a consume, reserved ≥ qty and so on-hand ≥ qty), so a store
// writes the guard once, never a condition of its own per kind.
type StockDelta struct {
	OnHand, Reserved int64
}

var stockDeltas = map[StockMoveKind]StockDelta{
	StockReserve: {OnHand: 0, Reserved: 1},
	StockRelease: {OnHand: 0, Reserved: -1},
	StockConsume: {OnHand: -1, Reserved: -1},
}

// Delta returns what a move of kind k does to a line per unit, and false
// when k is not a stock move.
func (k StockMoveKind) Delta() (StockDelta, bool) {
	d, ok := stockDeltas[k]
	return d, ok
}

// StockLines returns items as one stock move takes them: one line per SKU,
// its quantities summed, in SKU order (bytewise, as Go compares strings), so
// that concurrent moves take the ledger's rows in one order and cannot
// deadlock. A quantity that is not positive, or a sum that does not fit in
// an int64, is an EINVALID error naming items.
func StockLines(items []Item) ([]Item, error) {
	out := make([]Item, 0, len(items))
	for _, it := range items {
		if it.Qty <= 0 {
			return nil, FieldError("items", "sku %q: qty must be a positive integer, not %d", it.SKU, it.Qty)
		}
		i := slices.IndexFunc(out, func(o Item) bool { return o.SKU == it.SKU })
		if i < 0 {
			out = append(out, it)
			continue
		}
		sum, ok := AddInt64(out[i].Qty, it.Qty)
		if !ok {
			return nil, FieldError("items", "the quantities of sku %q add up to more than %d", it.SKU, int64(math.MaxInt64))
		}
		out[i].Qty = sum
	}
	slices.SortFunc(out, func(a, b Item) int { return cmp.Compare(a.SKU, b.SKU) })
	return out, nil
}

// Validate reports what no store may be given to set: a SKU that ValidSKU
// refuses or a negative on-hand, as EINVALID errors naming the field.
func (p *StockSetParams) Validate() error {
	switch {
	case !ValidSKU(p.SKU):
		return FieldError("sku", "must be UTF-8 text of at most %d bytes without control characters", MaxSKULen)
	case p.OnHand < 0:
		return FieldError("on_hand", "must not be negative")
	}
	return nil
}

// Validate reports a move that no store may be given, as an EINVALID error
// naming the field: a kind that is not a stock move, no order, no lines, a
// line whose SKU ValidSKU refuses or whose quantity is not positive, and
// lines that are not in SKU order, one per SKU (what StockLines makes).
func (p *StockMoveParams) Validate() error {
	if _, ok := p.Kind.Delta(); !ok {
		return FieldError("kind", "a stock move is reserve, release or consume, not %q", p.Kind)
	}
	if p.OrderID <= 0 {
		return FieldError("order_id", "a stock move belongs to an order")
	}
	if len(p.Lines) == 0 {
		return FieldError("lines", "a stock move has at least one line")
	}
	for i, l := range p.Lines {
		switch {
		case !ValidSKU(l.SKU):
			return FieldError("lines", "line %d: sku must be UTF-8 text of at most %d bytes without control characters", i, MaxSKULen)
		case l.Qty <= 0:
			return FieldError("lines", "sku %q: the quantity of a stock move must be positive, not %d", l.SKU, l.Qty)
		case i > 0 && l.SKU <= p.Lines[i-1].SKU:
			return FieldError("lines", "sku %q: the lines of a stock move are in SKU order, one per SKU (see StockLines)", l.SKU)
		}
	}
	return nil
}

// StockRefusal is the error of a move of kind k that did not apply to line
// l, given the ledger line st that the move found (nil when the SKU has
// none): lapse.ErrStockNotFound, or lapse.ErrStockShort saying what the line
// has and what the move needed, each naming the SKU.
func StockRefusal(k StockMoveKind, l Item, st *Stock) error {
	switch {
	case st == nil:
		return Refine(ErrStockNotFound, "no stock record for sku %q", l.SKU)
	case k == StockReserve:
		return Refine(ErrStockShort, "not enough stock for sku %q: %d available, %d to reserve", l.SKU, st.Available(), l.Qty)
	case k == StockRelease:
		return Refine(ErrStockShort, "not enough stock for sku %q: %d reserved, %d to release", l.SKU, st.Reserved, l.Qty)
	default:
		return Refine(ErrStockShort, "not enough stock for sku %q: %d reserved and %d on hand, %d to %s", l.SKU, st.Reserved, st.OnHand, l.Qty, k)
	}
}

// StockSetRefusal is the error of setting the on-hand of sku to onHand while
// its line has reserved more: lapse.ErrStockReserved.
func StockSetRefusal(sku string, onHand, reserved int64) error {
	return Refine(ErrStockReserved, "sku %q has %d reserved, more than an on-hand of %d", sku, reserved, onHand)
}

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
	ErrStockReserved     = &Error{Code: ECONFLICT, Message: "the on-hand is below what orders have reserved"}
	ErrCouponNotFound    = &Error{Code: ENOTFOUND, Message: "coupon not found"}
	ErrCouponExists      = &Error{Code: ECONFLICT, Message: "coupon already exists"}
	ErrCouponUnavailable = &Error{Code: ECONFLICT, Message: "coupon is not available"}
)
