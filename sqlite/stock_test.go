package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lapsehq/lapse"
)

// Moves the store cannot express are refused as invalid, before anything is
// written, rather than reaching the ledger's checks.
func TestLedgerRefusesInvalidMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, filepath.Join(t.TempDir(), "lapse.db"))
	if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: -1, At: base}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("negative on-hand = %v", err)
	}
	if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: 5, At: base}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*lapse.StockMoveParams{
		{OrderID: 1, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "tea", Qty: -1}}, At: base},
		{OrderID: 1, Kind: lapse.StockRelease, Lines: []lapse.Item{{SKU: "tea", Qty: 0}}, At: base},
		{OrderID: 1, Kind: "steal", Lines: []lapse.Item{{SKU: "tea", Qty: 1}}, At: base},
	} {
		if err := s.StockMove(ctx, p); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("StockMove(%s %+v) = %v, want invalid", p.Kind, p.Lines, err)
		}
	}
	if st, err := s.StockGet(ctx, "tea"); err != nil || st.Reserved != 0 || st.OnHand != 5 {
		t.Errorf("tea after refused moves = %+v, %v", st, err)
	}
	if ms, _ := s.StockMoveList(ctx, 1); len(ms) != 0 {
		t.Errorf("refused moves journaled: %+v", ms)
	}
	if _, err := s.CouponMove(ctx, &lapse.CouponMoveParams{Code: "X", OrderNo: "O-1", Kind: "steal", At: base}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("CouponMove(steal) = %v, want invalid", err)
	}
}
