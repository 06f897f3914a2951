package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestStockMoveRefusedInTx checks that a refused move, being one statement
// that decides before it writes, leaves the caller's transaction usable:
// PostgreSQL would abort it after a failed statement.
func TestStockMoveRefusedInTx(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 1})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	err := s.Tx(ctx, func(tx lapse.Store) error {
		err := tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: 1, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 2}}, At: now})
		if !errors.Is(err, lapse.ErrStockShort) {
			t.Errorf("reserve of 2 = %v, want ErrStockShort", err)
		}
		return tx.StockMove(ctx, &lapse.StockMoveParams{OrderID: 1, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "tea", Qty: 1}}, At: now})
	})
	if err != nil {
		t.Fatalf("Tx after a refused move = %v", err)
	}
	if st, _ := s.StockGet(ctx, "tea"); st.Reserved != 1 {
		t.Errorf("reserved %d, want 1", st.Reserved)
	}
	for _, bad := range [][]lapse.Item{{{SKU: "tea", Qty: 0}}, {{SKU: "tea", Qty: 1}, {SKU: "tea", Qty: 1}}} {
		if err := s.StockMove(ctx, &lapse.StockMoveParams{OrderID: 1, Kind: lapse.StockRelease, Lines: bad, At: now}); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("move of %v = %v, want EINVALID", bad, err)
		}
	}
	if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: -1, At: now}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("negative on-hand = %v, want EINVALID", err)
	}
}

// TestStockMoveConcurrentLines reserves two SKUs from many goroutines, half
// of them listing the lines in reverse: none deadlocks and every reserve
// counts.
func TestStockMoveConcurrentLines(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, sku := range []string{"a", "b"} {
		if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: sku, OnHand: 100, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 40 {
		lines := []lapse.Item{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}}
		if i%2 == 1 {
			lines[0], lines[1] = lines[1], lines[0]
		}
		wg.Go(func() {
			err := s.StockMove(ctx, &lapse.StockMoveParams{OrderID: int64(i), Kind: lapse.StockReserve, Lines: lines, At: now})
			if err != nil {
				t.Errorf("reserve %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for _, sku := range []string{"a", "b"} {
		if st, _ := s.StockGet(ctx, sku); st.Reserved != 40 {
			t.Errorf("%s reserved %d, want 40", sku, st.Reserved)
		}
	}
}
