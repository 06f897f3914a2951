package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

func stockOf(t *testing.T, s lapse.Store, sku string) *lapse.Stock {
	t.Helper()
	st, err := s.StockGet(ctxT(t), sku)
	if err != nil {
		t.Fatalf("StockGet(%s): %v", sku, err)
	}
	return st
}

func move(s lapse.Store, t *testing.T, orderID int64, kind lapse.StockMoveKind, lines ...lapse.Item) error {
	return s.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: orderID, Kind: kind, Lines: lines, At: base})
}

func testStock(t *testing.T, s lapse.Store) {
	if _, err := s.StockGet(ctxT(t), "tea"); !errors.Is(err, lapse.ErrStockNotFound) {
		t.Errorf("StockGet(missing) = %v", err)
	}
	st, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tea", OnHand: 10, At: base})
	if err != nil || st.SKU != "tea" || st.OnHand != 10 || st.Reserved != 0 || !st.UpdatedAt.Equal(base) {
		t.Fatalf("StockSet = %+v, %v", st, err)
	}
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "cup", OnHand: 3, At: base}); err != nil {
		t.Fatal(err)
	}
	o1 := mustCreate(t, s, "ST-1", base.Add(time.Hour), base)
	o2 := mustCreate(t, s, "ST-2", base.Add(time.Hour), base)

	if err := move(s, t, o1.ID, lapse.StockReserve, lapse.Item{SKU: "cup", Qty: 2}, lapse.Item{SKU: "tea", Qty: 4}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if tea := stockOf(t, s, "tea"); tea.Reserved != 4 || tea.OnHand != 10 || tea.Available() != 6 {
		t.Errorf("tea after reserve: %+v", tea)
	}
	// All or nothing: cup is short, so tea is not reserved either.
	err = move(s, t, o2.ID, lapse.StockReserve, lapse.Item{SKU: "cup", Qty: 2}, lapse.Item{SKU: "tea", Qty: 1})
	if !errors.Is(err, lapse.ErrStockShort) || !strings.Contains(lapse.ErrorMessage(err), "cup") || lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("short reserve = %v (message %q), want ErrStockShort naming cup", err, lapse.ErrorMessage(err))
	}
	if tea := stockOf(t, s, "tea"); tea.Reserved != 4 {
		t.Errorf("a refused reserve moved tea to %d reserved", tea.Reserved)
	}
	err = move(s, t, o2.ID, lapse.StockReserve, lapse.Item{SKU: "nope", Qty: 1})
	if !errors.Is(err, lapse.ErrStockNotFound) || !strings.Contains(lapse.ErrorMessage(err), "nope") {
		t.Errorf("reserve of an unknown sku = %v", err)
	}
	// On-hand cannot go below what is reserved.
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tea", OnHand: 3, At: base}); !errors.Is(err, lapse.ErrStockReserved) ||
		lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(lapse.ErrorMessage(err), "tea") {
		t.Errorf("on-hand below reserved = %v, want ErrStockReserved naming tea", err)
	}
	if tea := stockOf(t, s, "tea"); tea.OnHand != 10 || !tea.UpdatedAt.Equal(base) {
		t.Errorf("a refused StockSet changed tea to %+v", tea)
	}
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tea", OnHand: 12, At: base.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}

	// Release gives back; consume takes from on-hand; neither goes below zero.
	if err := move(s, t, o1.ID, lapse.StockRelease, lapse.Item{SKU: "cup", Qty: 2}); err != nil {
		t.Fatal(err)
	}
	if err := move(s, t, o1.ID, lapse.StockConsume, lapse.Item{SKU: "tea", Qty: 4}); err != nil {
		t.Fatal(err)
	}
	if tea, cup := stockOf(t, s, "tea"), stockOf(t, s, "cup"); tea.OnHand != 8 || tea.Reserved != 0 || cup.OnHand != 3 || cup.Reserved != 0 {
		t.Errorf("after release and consume: tea %+v cup %+v", tea, cup)
	}
	if err := move(s, t, o1.ID, lapse.StockRelease, lapse.Item{SKU: "cup", Qty: 1}); !errors.Is(err, lapse.ErrStockShort) {
		t.Errorf("release of more than reserved = %v, want ErrStockShort", err)
	}
	if err := move(s, t, o1.ID, lapse.StockConsume, lapse.Item{SKU: "tea", Qty: 1}); !errors.Is(err, lapse.ErrStockShort) {
		t.Errorf("consume of more than reserved = %v, want ErrStockShort", err)
	}
	journal, err := s.StockMoveList(ctxT(t), o1.ID)
	if err != nil || len(journal) != 4 {
		t.Fatalf("StockMoveList = %d, %v; want 4 lines", len(journal), err)
	}
	if j := journal[0]; j.SKU != "cup" || j.Qty != 2 || j.Kind != lapse.StockReserve || !j.CreatedAt.Equal(base) || j.ID == 0 {
		t.Errorf("journal[0] = %+v", j)
	}
	if j := journal[3]; j.SKU != "tea" || j.Kind != lapse.StockConsume {
		t.Errorf("journal[3] = %+v", j)
	}
	if other, _ := s.StockMoveList(ctxT(t), o2.ID); len(other) != 0 {
		t.Errorf("refused moves journaled: %+v", other)
	}
}

// testStockLines moves the lines lapse.StockLines makes of items that name
// SKUs out of order and twice: one line per SKU, in SKU order (bytewise:
// "B" before "a"), journaled in that order, and a refusal names the first
// line in that order that fails.
func testStockLines(t *testing.T, s lapse.Store) {
	for _, sku := range []string{"B", "a", "b"} {
		if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: sku, OnHand: 10, At: base}); err != nil {
			t.Fatal(err)
		}
	}
	o := mustCreate(t, s, "SL-1", base.Add(time.Hour), base)
	lines, err := lapse.StockLines([]lapse.Item{{SKU: "b", Qty: 1}, {SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}, {SKU: "B", Qty: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := move(s, t, o.ID, lapse.StockReserve, lines...); err != nil {
		t.Fatalf("reserve %v: %v", lines, err)
	}
	journal, err := s.StockMoveList(ctxT(t), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range journal {
		got = append(got, fmt.Sprintf("%s %s %d", m.Kind, m.SKU, m.Qty))
	}
	if want := []string{"reserve B 1", "reserve a 2", "reserve b 4"}; !slices.Equal(got, want) {
		t.Errorf("journal = %q, want %q", got, want)
	}
	for sku, want := range map[string]int64{"B": 1, "a": 2, "b": 4} {
		if st := stockOf(t, s, sku); st.Reserved != want || st.OnHand != 10 {
			t.Errorf("%s = %+v, want %d reserved of 10", sku, st, want)
		}
	}

	// Both lines are short: the error names the first, and neither moves.
	o2 := mustCreate(t, s, "SL-2", base.Add(time.Hour), base)
	short, err := lapse.StockLines([]lapse.Item{{SKU: "b", Qty: 7}, {SKU: "a", Qty: 9}})
	if err != nil {
		t.Fatal(err)
	}
	err = move(s, t, o2.ID, lapse.StockReserve, short...)
	if !errors.Is(err, lapse.ErrStockShort) || !strings.Contains(lapse.ErrorMessage(err), `"a"`) {
		t.Errorf("short reserve of %v = %v (%q), want ErrStockShort naming a", short, err, lapse.ErrorMessage(err))
	}
	if st := stockOf(t, s, "b"); st.Reserved != 4 {
		t.Errorf("a refused move changed b to %+v", st)
	}
	// A consume of more than on-hand is short as well.
	err = move(s, t, o.ID, lapse.StockConsume, lapse.Item{SKU: "B", Qty: 1}, lapse.Item{SKU: "a", Qty: 3})
	if !errors.Is(err, lapse.ErrStockShort) || !strings.Contains(lapse.ErrorMessage(err), `"a"`) {
		t.Errorf("consume of more than reserved = %v, want ErrStockShort naming a", err)
	}
	if journal, _ := s.StockMoveList(ctxT(t), o.ID); len(journal) != 3 {
		t.Errorf("a refused consume was journaled: %d lines", len(journal))
	}
}

// testStockConcurrent reserves one unit from 30 goroutines against 10 on
// hand: exactly 10 succeed and nothing goes negative.
func testStockConcurrent(t *testing.T, s lapse.Store) {
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "hot", OnHand: 10, At: base}); err != nil {
		t.Fatal(err)
	}
	o := mustCreate(t, s, "SC-1", base.Add(time.Hour), base)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			err := move(s, t, o.ID, lapse.StockReserve, lapse.Item{SKU: "hot", Qty: 1})
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.Is(err, lapse.ErrStockShort):
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if st := stockOf(t, s, "hot"); ok.Load() != 10 || st.Reserved != 10 || st.OnHand != 10 {
		t.Errorf("%d reserves succeeded, stock %+v; want 10 and 10/10", ok.Load(), st)
	}
}

func testCoupon(t *testing.T, s lapse.Store) {
	c, err := s.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: "SAVE10", At: base})
	if err != nil || c.Code != "SAVE10" || c.Status != lapse.CouponAvailable || c.OrderNo != "" || !c.CreatedAt.Equal(base) {
		t.Fatalf("CouponCreate = %+v, %v", c, err)
	}
	if _, err := s.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: "SAVE10", At: base}); !errors.Is(err, lapse.ErrCouponExists) {
		t.Errorf("duplicate coupon = %v", err)
	}
	if _, err := s.CouponGet(ctxT(t), "NOPE"); !errors.Is(err, lapse.ErrCouponNotFound) {
		t.Errorf("CouponGet(missing) = %v", err)
	}
	o1 := mustCreate(t, s, "CP-1", base.Add(time.Hour), base)
	o2 := mustCreate(t, s, "CP-2", base.Add(time.Hour), base)
	mv := func(o *lapse.Order, code string, kind lapse.CouponMoveKind) (*lapse.Coupon, error) {
		return s.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: code, OrderID: o.ID, OrderNo: o.OrderNo, Kind: kind, At: base.Add(time.Second)})
	}
	if _, err := mv(o1, "NOPE", lapse.CouponLock); !errors.Is(err, lapse.ErrCouponNotFound) {
		t.Errorf("lock of a missing coupon = %v", err)
	}
	c, err = mv(o1, "SAVE10", lapse.CouponLock)
	if err != nil || c.Status != lapse.CouponLocked || c.OrderNo != "CP-1" || !c.UpdatedAt.Equal(base.Add(time.Second)) {
		t.Fatalf("lock = %+v, %v", c, err)
	}
	for _, k := range []lapse.CouponMoveKind{lapse.CouponLock, lapse.CouponUnlock, lapse.CouponConsume} {
		if _, err := mv(o2, "SAVE10", k); !errors.Is(err, lapse.ErrCouponUnavailable) {
			t.Errorf("%s by another order = %v, want ErrCouponUnavailable", k, err)
		}
	}
	if c, err = mv(o1, "SAVE10", lapse.CouponUnlock); err != nil || c.Status != lapse.CouponAvailable || c.OrderNo != "" {
		t.Errorf("unlock = %+v, %v", c, err)
	}
	if _, err := mv(o1, "SAVE10", lapse.CouponUnlock); !errors.Is(err, lapse.ErrCouponUnavailable) {
		t.Errorf("second unlock = %v", err)
	}
	if _, err := mv(o2, "SAVE10", lapse.CouponLock); err != nil {
		t.Fatal(err)
	}
	if c, err = mv(o2, "SAVE10", lapse.CouponConsume); err != nil || c.Status != lapse.CouponUsed || c.OrderNo != "CP-2" {
		t.Errorf("consume = %+v, %v", c, err)
	}
	if _, err := mv(o2, "SAVE10", lapse.CouponUnlock); !errors.Is(err, lapse.ErrCouponUnavailable) {
		t.Errorf("unlock of a used coupon = %v", err)
	}
	journal, err := s.CouponMoveList(ctxT(t), "SAVE10")
	if err != nil || len(journal) != 4 {
		t.Fatalf("CouponMoveList = %d, %v; want lock, unlock, lock, consume", len(journal), err)
	}
	if j := journal[1]; j.Kind != lapse.CouponUnlock || j.OrderNo != "CP-1" || j.Code != "SAVE10" || j.ID == 0 {
		t.Errorf("journal[1] = %+v", j)
	}

	// Ten orders race for one coupon: one wins.
	if _, err := s.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: "RACE", At: base}); err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 10 {
		o := mustCreate(t, s, orderNo("CPR", i), base.Add(time.Hour), base)
		wg.Go(func() {
			if _, err := mv(o, "RACE", lapse.CouponLock); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, lapse.ErrCouponUnavailable) {
				t.Errorf("lock: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Errorf("%d orders locked one coupon", wins.Load())
	}
}

// testCouponHolder checks that a coupon is held by the order_no of the move
// that locked it, that the journal keeps each move's order id and order_no,
// and that a refusal says what the coupon is.
func testCouponHolder(t *testing.T, s lapse.Store) {
	if _, err := s.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: "HOLD", At: base}); err != nil {
		t.Fatal(err)
	}
	o := mustCreate(t, s, "CH-1", base.Add(time.Hour), base)
	mv := func(orderID int64, orderNo string, kind lapse.CouponMoveKind, at time.Time) (*lapse.Coupon, error) {
		return s.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: "HOLD", OrderID: orderID, OrderNo: orderNo, Kind: kind, At: at})
	}
	if c, err := mv(o.ID, o.OrderNo, lapse.CouponLock, base.Add(time.Second)); err != nil || c.OrderNo != "CH-1" || c.Status != lapse.CouponLocked {
		t.Fatalf("lock = %+v, %v", c, err)
	}
	// The order_no holds the coupon: the same order id under another
	// order_no may not unlock it.
	_, err := mv(o.ID, "CH-other", lapse.CouponUnlock, base.Add(2*time.Second))
	if !errors.Is(err, lapse.ErrCouponUnavailable) || !strings.Contains(lapse.ErrorMessage(err), "HOLD") {
		t.Errorf("unlock under another order_no = %v, want ErrCouponUnavailable naming HOLD", err)
	}
	if c, err := s.CouponGet(ctxT(t), "HOLD"); err != nil || c.Status != lapse.CouponLocked || c.OrderNo != "CH-1" || !c.UpdatedAt.Equal(base.Add(time.Second)) {
		t.Errorf("after a refused unlock: %+v, %v", c, err)
	}
	if c, err := mv(o.ID, o.OrderNo, lapse.CouponConsume, base.Add(3*time.Second)); err != nil || c.Status != lapse.CouponUsed || c.OrderNo != "CH-1" {
		t.Fatalf("consume = %+v, %v", c, err)
	}
	if _, err := mv(o.ID, o.OrderNo, lapse.CouponLock, base.Add(4*time.Second)); !errors.Is(err, lapse.ErrCouponUnavailable) || !strings.Contains(lapse.ErrorMessage(err), "used") {
		t.Errorf("lock of a used coupon = %v, want ErrCouponUnavailable saying it is used", err)
	}
	journal, err := s.CouponMoveList(ctxT(t), "HOLD")
	if err != nil || len(journal) != 2 {
		t.Fatalf("CouponMoveList = %d, %v; want lock and consume", len(journal), err)
	}
	for i, kind := range []lapse.CouponMoveKind{lapse.CouponLock, lapse.CouponConsume} {
		if j := journal[i]; j.Kind != kind || j.OrderID != o.ID || j.OrderNo != "CH-1" || !j.CreatedAt.Equal(base.Add(time.Duration(2*i+1)*time.Second)) {
			t.Errorf("journal[%d] = %+v, want %s by order %d CH-1", i, j, kind, o.ID)
		}
	}
}

// testLedgerCountHeld checks StockCountReserved and CouponCountLocked, by
// which an engine with a ledger switched off finds whether orders still hold
// what the ledger gave them: SKUs with stock reserved, coupons locked; not
// lines with nothing reserved, nor coupons available or used. Inside Tx
// they see the transaction's own moves.
func testLedgerCountHeld(t *testing.T, s lapse.Store) {
	counts := func(s lapse.Store, when string, skus, coupons int64) {
		t.Helper()
		if n, err := s.StockCountReserved(ctxT(t)); err != nil || n != skus {
			t.Errorf("%s: StockCountReserved = %d, %v; want %d", when, n, err, skus)
		}
		if n, err := s.CouponCountLocked(ctxT(t)); err != nil || n != coupons {
			t.Errorf("%s: CouponCountLocked = %d, %v; want %d", when, n, err, coupons)
		}
	}
	counts(s, "empty", 0, 0)
	for _, sku := range []string{"tea", "cup", "pot"} {
		if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: sku, OnHand: 5, At: base}); err != nil {
			t.Fatal(err)
		}
	}
	for _, code := range []string{"C1", "C2", "C3"} {
		if _, err := s.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: code, At: base}); err != nil {
			t.Fatal(err)
		}
	}
	counts(s, "nothing held", 0, 0)
	o1 := mustCreate(t, s, "LC-1", base.Add(time.Hour), base)
	o2 := mustCreate(t, s, "LC-2", base.Add(time.Hour), base)
	cmove := func(o *lapse.Order, code string, kind lapse.CouponMoveKind) {
		t.Helper()
		if _, err := s.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: code, OrderID: o.ID, OrderNo: o.OrderNo, Kind: kind, At: base}); err != nil {
			t.Fatalf("%s %s: %v", kind, code, err)
		}
	}
	if err := move(s, t, o1.ID, lapse.StockReserve, lapse.Item{SKU: "cup", Qty: 2}, lapse.Item{SKU: "tea", Qty: 1}); err != nil {
		t.Fatal(err)
	}
	if err := move(s, t, o2.ID, lapse.StockReserve, lapse.Item{SKU: "tea", Qty: 4}); err != nil {
		t.Fatal(err)
	}
	cmove(o1, "C1", lapse.CouponLock)
	cmove(o2, "C2", lapse.CouponLock)
	counts(s, "two orders hold", 2, 2)

	// o1 is paid: its stock and coupon are used up.
	if err := move(s, t, o1.ID, lapse.StockConsume, lapse.Item{SKU: "cup", Qty: 2}, lapse.Item{SKU: "tea", Qty: 1}); err != nil {
		t.Fatal(err)
	}
	cmove(o1, "C1", lapse.CouponConsume)
	counts(s, "o1 paid", 1, 1)

	// o2 closes inside a transaction, which sees its own moves.
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if err := tx.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: o2.ID, Kind: lapse.StockRelease, Lines: []lapse.Item{{SKU: "tea", Qty: 4}}, At: base}); err != nil {
			return err
		}
		if _, err := tx.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: "C2", OrderID: o2.ID, OrderNo: o2.OrderNo, Kind: lapse.CouponUnlock, At: base}); err != nil {
			return err
		}
		counts(tx, "o2 closing, in its transaction", 0, 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	counts(s, "o2 closed", 0, 0)
}

// testLedgerInTx checks that a ledger failure inside a transaction undoes the
// whole transaction, as order creation relies on.
func testLedgerInTx(t *testing.T, s lapse.Store) {
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tea", OnHand: 1, At: base}); err != nil {
		t.Fatal(err)
	}
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		o, _, err := tx.OrderCreate(ctxT(t), newOrder("LT-1", base.Add(time.Hour), base))
		if err != nil {
			return err
		}
		return tx.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 2}}, At: base})
	})
	if !errors.Is(err, lapse.ErrStockShort) {
		t.Fatalf("Tx = %v, want ErrStockShort", err)
	}
	if _, err := s.OrderGet(ctxT(t), "LT-1"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("the order of a refused reservation exists: %v", err)
	}
	err = s.Tx(ctxT(t), func(tx lapse.Store) error {
		o, _, err := tx.OrderCreate(ctxT(t), newOrder("LT-2", base.Add(time.Hour), base))
		if err != nil {
			return err
		}
		if err := tx.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}}, At: base}); err != nil {
			return err
		}
		_, err = tx.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: "MISSING", OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponLock, At: base})
		return err
	})
	if !errors.Is(err, lapse.ErrCouponNotFound) {
		t.Fatalf("Tx = %v, want ErrCouponNotFound", err)
	}
	if st := stockOf(t, s, "tea"); st.Reserved != 0 {
		t.Errorf("a rolled-back reservation left %d reserved", st.Reserved)
	}
}
