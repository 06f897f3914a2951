package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestStockMoveConcurrentLines reserves two SKUs from many goroutines, half
// of them listing the lines in reverse: none deadlocks and every reserve
// counts. The engine sends lines in SKU order only (StockMoveParams.Validate);
// the statement locks the rows in that order whatever order they come in,
// and the reversed lines show it.
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
