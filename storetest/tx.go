package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// testTxNested checks that a nested Tx is a savepoint: an error from its fn
// undoes its writes and only those, even when a statement inside it failed,
// and the outer transaction goes on to commit the rest. Engine code relies
// on it to try a change inside a caller's transaction and go on without it.
func testTxNested(t *testing.T, s lapse.Store) {
	boom := errors.New("boom")
	first := newOrder("TN-1", base.Add(time.Minute), base)
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		if _, _, err := tx.OrderCreate(ctxT(t), first); err != nil {
			return err
		}
		err := tx.Tx(ctxT(t), func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-2", base.Add(time.Minute), base)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("nested Tx = %v, want fn's error", err)
		}
		// A failed statement inside the nested Tx (the event id is taken)
		// is undone with it, and leaves the outer transaction usable.
		clash := newOrder("TN-3", base.Add(time.Minute), base)
		clash.Outbox[0].ID = first.Outbox[0].ID
		err = tx.Tx(ctxT(t), func(tx lapse.Store) error {
			if _, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-4", base.Add(time.Minute), base)); err != nil {
				return err
			}
			_, _, err := tx.OrderCreate(ctxT(t), clash)
			return err
		})
		if err == nil {
			t.Error("nested Tx with a clashing event id succeeded")
		}
		if _, err := tx.OrderGet(ctxT(t), "TN-2"); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("inside the outer Tx, TN-2 of a failed nested Tx = %v, want not found", err)
		}
		// A nested Tx that succeeds keeps its writes.
		return tx.Tx(ctxT(t), func(tx lapse.Store) error {
			_, _, err := tx.OrderCreate(ctxT(t), newOrder("TN-5", base.Add(time.Minute), base))
			return err
		})
	})
	if err != nil {
		t.Fatalf("outer Tx = %v, want it to commit", err)
	}
	for _, no := range []string{"TN-1", "TN-5"} {
		mustGet(t, s, no)
	}
	for _, no := range []string{"TN-2", "TN-3", "TN-4"} {
		if _, err := s.OrderGet(ctxT(t), no); !errors.Is(err, lapse.ErrOrderNotFound) {
			t.Errorf("%s of a failed nested Tx = %v, want not found", no, err)
		}
	}
}

// testTxRefusals checks that the refusals methods document with a sentinel
// leave a transaction usable: the caller may go on and commit the rest.
// Each refusal writes nothing.
func testTxRefusals(t *testing.T, s lapse.Store) {
	if _, err := s.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tea", OnHand: 1, At: base}); err != nil {
		t.Fatal(err)
	}
	o := mustCreate(t, s, "TR-1", base.Add(time.Hour), base)
	refusals := []struct {
		name string
		want error
		call func(tx lapse.Store) error
	}{
		{"stock short", lapse.ErrStockShort, func(tx lapse.Store) error {
			return tx.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 2}}, At: base})
		}},
		{"stock not found", lapse.ErrStockNotFound, func(tx lapse.Store) error {
			return tx.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockRelease, Lines: []lapse.Item{{SKU: "nope", Qty: 1}}, At: base})
		}},
		{"stock reserved", lapse.ErrStockReserved, func(tx lapse.Store) error {
			if err := tx.StockMove(ctxT(t), &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}}, At: base}); err != nil {
				return err
			}
			_, err := tx.StockSet(ctxT(t), &lapse.StockSetParams{SKU: "tea", OnHand: 0, At: base})
			return err
		}},
		{"coupon exists", lapse.ErrCouponExists, func(tx lapse.Store) error {
			_, err := tx.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: "TAKEN", At: base})
			return err
		}},
		{"coupon not found", lapse.ErrCouponNotFound, func(tx lapse.Store) error {
			_, err := tx.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: "NOPE", OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponLock, At: base})
			return err
		}},
		{"coupon unavailable", lapse.ErrCouponUnavailable, func(tx lapse.Store) error {
			_, err := tx.CouponMove(ctxT(t), &lapse.CouponMoveParams{Code: "TAKEN", OrderID: o.ID, OrderNo: o.OrderNo, Kind: lapse.CouponUnlock, At: base})
			return err
		}},
	}
	if _, err := s.CouponCreate(ctxT(t), &lapse.CouponCreateParams{Code: "TAKEN", At: base}); err != nil {
		t.Fatal(err)
	}
	err := s.Tx(ctxT(t), func(tx lapse.Store) error {
		for _, r := range refusals {
			if err := r.call(tx); !errors.Is(err, r.want) {
				t.Errorf("%s = %v, want %v", r.name, err, r.want)
			}
		}
		_, _, err := tx.OrderCreate(ctxT(t), newOrder("TR-2", base.Add(time.Hour), base))
		return err
	})
	if err != nil {
		t.Fatalf("Tx after refusals = %v, want it to commit", err)
	}
	mustGet(t, s, "TR-2")
	if st := stockOf(t, s, "tea"); st.OnHand != 1 || st.Reserved != 1 {
		t.Errorf("tea = %+v, want the reserve that passed and no refused change", st)
	}
}
