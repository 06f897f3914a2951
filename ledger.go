package lapse

import (
	"cmp"
	"math"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"
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
	return validStockLines(p.Lines)
}

// Validate reports what no store may be given to create with: lines that
// StockMoveParams.Validate refuses, or a row of a close batch, which
// AuditAppend locks first (and a store writing creations together would
// not).
func (w *OrderCreateWith) Validate() error {
	if w.Audit != nil && w.Audit.Batch != 0 {
		return FieldError("audit", "the row of a creation belongs to no close batch")
	}
	if len(w.Reserve) == 0 {
		return nil
	}
	return validStockLines(w.Reserve)
}

// validStockLines reports lines that are not one per SKU, in SKU order,
// each with a valid SKU and a positive quantity.
func validStockLines(lines []Item) error {
	for i, l := range lines {
		switch {
		case !ValidSKU(l.SKU):
			return FieldError("lines", "line %d: sku must be UTF-8 text of at most %d bytes without control characters", i, MaxSKULen)
		case l.Qty <= 0:
			return FieldError("lines", "sku %q: the quantity of a stock move must be positive, not %d", l.SKU, l.Qty)
		case i > 0 && l.SKU <= lines[i-1].SKU:
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

// couponRule is what one kind of coupon move needs and does.
type couponRule struct {
	from, to CouponStatus
	held     bool // the coupon must be held by the moving order
}

var couponRules = map[CouponMoveKind]couponRule{
	CouponLock:    {from: CouponAvailable, to: CouponLocked},
	CouponUnlock:  {from: CouponLocked, to: CouponAvailable, held: true},
	CouponConsume: {from: CouponLocked, to: CouponUsed, held: true},
}

// CouponChange is the guarded update of one coupon move: a coupon in status
// From, held by the order numbered FromHolder ("" for none), becomes To,
// held by ToHolder and ToOrderID ("" and 0 once it is available again).
type CouponChange struct {
	From       CouponStatus
	FromHolder string
	To         CouponStatus
	ToHolder   string
	ToOrderID  int64
}

// Change returns the update that the move p makes, and false when p.Kind is
// not a coupon move. An available coupon is held by no order, so a lock is
// guarded by the holder "".
func (p *CouponMoveParams) Change() (CouponChange, bool) {
	r, ok := couponRules[p.Kind]
	if !ok {
		return CouponChange{}, false
	}
	c := CouponChange{From: r.from, To: r.to}
	if r.held {
		c.FromHolder = p.OrderNo
	}
	if r.to != CouponAvailable {
		c.ToHolder, c.ToOrderID = p.OrderNo, p.OrderID
	}
	return c, true
}

// couponPattern is what a new coupon's code may be.
var couponPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// Validate reports a code that no new coupon may have, as an EINVALID error
// naming code: 1 to 64 letters, digits, . _ : or -, starting with a letter or
// digit.
func (p *CouponCreateParams) Validate() error {
	if !couponPattern.MatchString(p.Code) {
		return FieldError("code", "must be 1 to 64 letters, digits, . _ : or -, starting with a letter or digit")
	}
	return nil
}

// Validate reports a move that no store may be given, as an EINVALID error
// naming the field: a kind that is not a coupon move, a code that no order
// may name (empty, longer than MaxOrderNoLen, or not text), and a move
// without its order: both OrderID and OrderNo, for the order_no is what
// holds the coupon.
func (p *CouponMoveParams) Validate() error {
	if _, ok := p.Change(); !ok {
		return FieldError("kind", "a coupon move is lock, unlock or consume, not %q", p.Kind)
	}
	switch {
	case p.Code == "" || len(p.Code) > MaxOrderNoLen || !utf8.ValidString(p.Code) || !textPattern.MatchString(p.Code):
		return FieldError("coupon", "must be UTF-8 text of 1 to %d bytes without control characters", MaxOrderNoLen)
	case p.OrderID <= 0:
		return FieldError("order_id", "a coupon move belongs to an order")
	case p.OrderNo == "":
		return FieldError("order_no", "is required to move a coupon: it holds the coupon")
	}
	return nil
}

// CouponRefusal is the error of the move p that did not apply, given the
// coupon c that it found (nil when there is none): ErrCouponNotFound, or
// ErrCouponUnavailable saying what the coupon is, each naming the code.
func CouponRefusal(p *CouponMoveParams, c *Coupon) error {
	ch, _ := p.Change()
	switch {
	case c == nil:
		return Refine(ErrCouponNotFound, "coupon %q not found", p.Code)
	case c.Status != ch.From:
		return Refine(ErrCouponUnavailable, "coupon %q is %s, not %s", p.Code, c.Status, ch.From)
	case c.OrderNo != ch.FromHolder:
		return Refine(ErrCouponUnavailable, "coupon %q is %s by another order", p.Code, c.Status)
	default:
		return Refine(ErrCouponUnavailable, "coupon %q was moved meanwhile", p.Code)
	}
}

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
