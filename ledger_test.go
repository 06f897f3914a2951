package lapse_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

var at = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestStockLines(t *testing.T) {
	got, err := lapse.StockLines([]lapse.Item{{SKU: "b", Qty: 1}, {SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}, {SKU: "B", Qty: 1}})
	if want := []lapse.Item{{SKU: "B", Qty: 1}, {SKU: "a", Qty: 2}, {SKU: "b", Qty: 4}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("StockLines = %v, %v; want one line per SKU in bytewise order, %v", got, err, want)
	}
	if p := (&lapse.StockMoveParams{OrderID: 1, Kind: lapse.StockReserve, Lines: got, At: at}); p.Validate() != nil {
		t.Errorf("the lines of StockLines do not validate: %v", p.Validate())
	}
	for _, bad := range [][]lapse.Item{
		{{SKU: "a", Qty: 0}},
		{{SKU: "a", Qty: math.MaxInt64}, {SKU: "a", Qty: 1}},
	} {
		if _, err := lapse.StockLines(bad); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("StockLines(%v) = %v, want invalid", bad, err)
		}
	}
}

func TestStockMoveParamsValidate(t *testing.T) {
	ok := lapse.StockMoveParams{OrderID: 1, Kind: lapse.StockConsume, Lines: []lapse.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}, At: at}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", ok, err)
	}
	for name, change := range map[string]func(p *lapse.StockMoveParams){
		"unknown kind": func(p *lapse.StockMoveParams) { p.Kind = "steal" },
		"no order":     func(p *lapse.StockMoveParams) { p.OrderID = 0 },
		"no lines":     func(p *lapse.StockMoveParams) { p.Lines = nil },
		"zero qty":     func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "a", Qty: 0}} },
		"negative qty": func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: -1}} },
		"empty sku":    func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "", Qty: 1}} },
		"control sku":  func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "a\x00", Qty: 1}} },
		"unsorted":     func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "b", Qty: 1}, {SKU: "a", Qty: 1}} },
		"repeated sku": func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}} },
		"locale order": func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "a", Qty: 1}, {SKU: "B", Qty: 1}} },
		"too long sku": func(p *lapse.StockMoveParams) {
			p.Lines = []lapse.Item{{SKU: strings.Repeat("x", lapse.MaxSKULen+1), Qty: 1}}
		},
		"invalid UTF-8": func(p *lapse.StockMoveParams) { p.Lines = []lapse.Item{{SKU: "\xff", Qty: 1}} },
	} {
		p := ok
		change(&p)
		if err := p.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s: Validate = %v, want invalid", name, err)
		}
	}
}

func TestStockSetParamsValidate(t *testing.T) {
	for _, c := range []struct {
		p     lapse.StockSetParams
		field string
	}{
		{lapse.StockSetParams{SKU: "tea", OnHand: 0, At: at}, ""},
		{lapse.StockSetParams{SKU: "tea", OnHand: -1, At: at}, "on_hand"},
		{lapse.StockSetParams{SKU: "", OnHand: 1, At: at}, "sku"},
		{lapse.StockSetParams{SKU: "t\nea", OnHand: 1, At: at}, "sku"},
	} {
		err := c.p.Validate()
		var e *lapse.Error
		if c.field == "" && err != nil || c.field != "" && (!errors.As(err, &e) || e.Code != lapse.EINVALID || e.Field != c.field) {
			t.Errorf("Validate(%+v) = %v, want an error about %q", c.p, err, c.field)
		}
	}
}

// TestStockDelta checks the move table against what each kind needs: a line
// that keeps 0 <= reserved <= on-hand after the delta is one the move may
// apply to, and no other.
func TestStockDelta(t *testing.T) {
	needs := map[lapse.StockMoveKind]func(st lapse.Stock, qty int64) bool{
		lapse.StockReserve: func(st lapse.Stock, qty int64) bool { return st.Available() >= qty },
		lapse.StockRelease: func(st lapse.Stock, qty int64) bool { return st.Reserved >= qty },
		lapse.StockConsume: func(st lapse.Stock, qty int64) bool { return st.Reserved >= qty && st.OnHand >= qty },
	}
	for kind, need := range needs {
		d, ok := kind.Delta()
		if !ok {
			t.Fatalf("%s has no delta", kind)
		}
		for onHand := int64(0); onHand <= 4; onHand++ {
			for reserved := int64(0); reserved <= onHand; reserved++ {
				for qty := int64(1); qty <= 5; qty++ {
					st := lapse.Stock{OnHand: onHand, Reserved: reserved}
					on, res := onHand+d.OnHand*qty, reserved+d.Reserved*qty
					if keeps := res >= 0 && res <= on; keeps != need(st, qty) {
						t.Errorf("%s of %d on %d/%d: the invariant says %v, the kind needs %v", kind, qty, reserved, onHand, keeps, !keeps)
					}
				}
			}
		}
	}
	if _, ok := lapse.StockMoveKind("steal").Delta(); ok {
		t.Error("an unknown kind has a delta")
	}
}

func TestStockRefusal(t *testing.T) {
	line := lapse.Item{SKU: "tea", Qty: 3}
	if err := lapse.StockRefusal(lapse.StockReserve, line, nil); !errors.Is(err, lapse.ErrStockNotFound) || !strings.Contains(lapse.ErrorMessage(err), "tea") {
		t.Errorf("no line: %v", err)
	}
	st := &lapse.Stock{SKU: "tea", OnHand: 4, Reserved: 2}
	for _, k := range []lapse.StockMoveKind{lapse.StockReserve, lapse.StockRelease, lapse.StockConsume} {
		if err := lapse.StockRefusal(k, line, st); !errors.Is(err, lapse.ErrStockShort) || !strings.Contains(lapse.ErrorMessage(err), `"tea"`) {
			t.Errorf("%s: %v", k, err)
		}
	}
	if err := lapse.StockSetRefusal("tea", 1, 2); !errors.Is(err, lapse.ErrStockReserved) || lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("StockSetRefusal = %v", err)
	}
}

func TestCouponMoveParams(t *testing.T) {
	ok := lapse.CouponMoveParams{Code: "SAVE10", OrderID: 7, OrderNo: "O-7", Kind: lapse.CouponLock, At: at}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", ok, err)
	}
	for name, change := range map[string]func(p *lapse.CouponMoveParams){
		"unknown kind": func(p *lapse.CouponMoveParams) { p.Kind = "steal" },
		"no code":      func(p *lapse.CouponMoveParams) { p.Code = "" },
		"control code": func(p *lapse.CouponMoveParams) { p.Code = "SAVE\n10" },
		"long code":    func(p *lapse.CouponMoveParams) { p.Code = strings.Repeat("C", lapse.MaxOrderNoLen+1) },
		"no order_no":  func(p *lapse.CouponMoveParams) { p.OrderNo = "" },
		"no order id":  func(p *lapse.CouponMoveParams) { p.OrderID = 0 },
	} {
		p := ok
		change(&p)
		if err := p.Validate(); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("%s: Validate = %v, want invalid", name, err)
		}
	}

	// The move table: what each kind needs and leaves.
	for _, c := range []struct {
		kind lapse.CouponMoveKind
		want lapse.CouponChange
	}{
		{lapse.CouponLock, lapse.CouponChange{From: lapse.CouponAvailable, To: lapse.CouponLocked, ToHolder: "O-7", ToOrderID: 7}},
		{lapse.CouponUnlock, lapse.CouponChange{From: lapse.CouponLocked, FromHolder: "O-7", To: lapse.CouponAvailable}},
		{lapse.CouponConsume, lapse.CouponChange{From: lapse.CouponLocked, FromHolder: "O-7", To: lapse.CouponUsed, ToHolder: "O-7", ToOrderID: 7}},
	} {
		p := ok
		p.Kind = c.kind
		if got, ok := p.Change(); !ok || got != c.want {
			t.Errorf("%s: Change = %+v, %v; want %+v", c.kind, got, ok, c.want)
		}
	}
	if _, ok := (&lapse.CouponMoveParams{Kind: "steal"}).Change(); ok {
		t.Error("an unknown kind has a change")
	}

	unlock := ok
	unlock.Kind = lapse.CouponUnlock
	for _, c := range []struct {
		found *lapse.Coupon
		want  error
		says  string
	}{
		{nil, lapse.ErrCouponNotFound, "not found"},
		{&lapse.Coupon{Code: "SAVE10", Status: lapse.CouponAvailable}, lapse.ErrCouponUnavailable, "is available"},
		{&lapse.Coupon{Code: "SAVE10", Status: lapse.CouponLocked, OrderNo: "O-8"}, lapse.ErrCouponUnavailable, "another order"},
		{&lapse.Coupon{Code: "SAVE10", Status: lapse.CouponUsed, OrderNo: "O-7"}, lapse.ErrCouponUnavailable, "is used"},
	} {
		err := lapse.CouponRefusal(&unlock, c.found)
		if !errors.Is(err, c.want) || !strings.Contains(lapse.ErrorMessage(err), c.says) || !strings.Contains(lapse.ErrorMessage(err), "SAVE10") {
			t.Errorf("CouponRefusal(unlock, %+v) = %v, want %v saying %q", c.found, err, c.want, c.says)
		}
	}
}

func TestCouponCreateParams(t *testing.T) {
	for code, valid := range map[string]bool{"SAVE10": true, "a.b_c:d-e": true, "": false, "-x": false, "has space": false, strings.Repeat("x", 65): false} {
		if err := (&lapse.CouponCreateParams{Code: code, At: at}).Validate(); (err == nil) != valid {
			t.Errorf("Validate(%q) = %v, want valid %v", code, err, valid)
		}
	}
}
