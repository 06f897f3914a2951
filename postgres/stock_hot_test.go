package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestUpgradeStockHOT starts from the schema before 0024 with a loaded
// stock ledger, migrates, and checks that no ledger row changed, that the
// ledger keeps room on its pages (fillfactor 50), that the reservations of
// SKUs loaded after the upgrade are HOT updates, and that the store still
// reserves the SKUs loaded before it.
func TestUpgradeStockHOT(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 23)
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	load := func(prefix string) {
		t.Helper()
		for i := range 200 {
			if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: fmt.Sprintf("%s-%03d", prefix, i), OnHand: 10, At: at}); err != nil {
				t.Fatal(err)
			}
		}
	}
	load("OLD")
	conn := connect(t, dsn)
	snapshot := func() string {
		t.Helper()
		var sum string
		if err := conn.QueryRow(ctx, `SELECT count(*) || ':' || md5(string_agg(s::text, '|' ORDER BY sku)) FROM stock s WHERE sku LIKE 'OLD-%'`).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	before := snapshot()

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("the ledger after the upgrade = %s, before %s; want it unchanged", after, before)
	}
	var opts string
	if err := conn.QueryRow(ctx, `SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'stock'::regclass`).Scan(&opts); err != nil || opts != "fillfactor=50" {
		t.Fatalf("stock reloptions = %q, %v; want fillfactor=50", opts, err)
	}

	// A ledger loaded now: each of its rows reserved, as a creation does,
	// in one transaction whose own statistics count the HOT updates. (Once:
	// a second update of a row in the same transaction needs the room the
	// first one's old version holds, which only its commit frees.)
	load("NEW")
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1, updated_at = $1 WHERE sku LIKE 'NEW-%'`, at); err != nil {
		t.Fatal(err)
	}
	var upd, hot int64
	if err := tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = 'stock'::regclass`).Scan(&upd, &hot); err != nil {
		t.Fatal(err)
	}
	if upd != 200 || hot != upd {
		t.Errorf("reserving 200 SKUs made %d updates, %d of them HOT; want 200, all HOT", upd, hot)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	mv := &lapse.StockMoveParams{OrderID: 1, Kind: lapse.StockReserve, Lines: []lapse.Item{{SKU: "OLD-007", Qty: 3}}, At: at}
	if err := s.StockMove(ctx, mv); err != nil {
		t.Fatal(err)
	}
	if st, err := s.StockGet(ctx, "OLD-007"); err != nil || st.Reserved != 3 || st.OnHand != 10 {
		t.Errorf("OLD-007 after a reservation of 3 = %+v, %v; want 3 of 10 reserved", st, err)
	}
}
