package storetest

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// exactKeys are keys that differ only by a letter's case, a trailing blank,
// a composed or decomposed accent, or a character outside the Basic
// Multilingual Plane (which MySQL's utf8mb4_general_ci weighs all alike).
// A store keeps each as a key of its own and finds each by itself.
var exactKeys = []string{"a", "A", "a ", "a  ", "\u00e9", "e\u0301", "\U0001F600", "\U0001F601"}

// testKeysExact creates an order, a payment and a stock line for each of
// exactKeys and reads each back by its key: none is another's.
func testKeysExact(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	orders := map[string]int64{}
	for i, k := range exactKeys {
		no := "K-" + k
		p := newOrder(no, base.Add(time.Hour), base.Add(time.Duration(i)*time.Second))
		p.Order.UserID = "u-k" // newOrder's is the last byte of no
		o, created, err := s.OrderCreate(ctx, p)
		if err != nil || !created || o.OrderNo != no {
			t.Fatalf("OrderCreate(%q) = %+v, created %v, %v; want an order of its own", no, o, created, err)
		}
		orders[no] = o.ID
	}
	for no, id := range orders {
		if got := mustGet(t, s, no); got.ID != id {
			t.Errorf("OrderGet(%q) = order %d %q; want %d", no, got.ID, got.OrderNo, id)
		}
	}
	o := mustGet(t, s, "K-a")
	payments := map[string]int64{}
	for i, k := range exactKeys {
		txn := "T-" + k
		p, created, err := s.PaymentCreate(ctx, newPayment(o, txn, base.Add(time.Duration(i)*time.Minute)))
		if err != nil || !created || p.TxnID != txn {
			t.Fatalf("PaymentCreate(%q) = %+v, created %v, %v; want a payment of its own", txn, p, created, err)
		}
		payments[txn] = p.ID
	}
	for txn, id := range payments {
		if got, err := s.PaymentGet(ctx, "sandbox", txn); err != nil || got.ID != id {
			t.Errorf("PaymentGet(%q) = %+v, %v; want payment %d", txn, got, err, id)
		}
	}
	for i, k := range exactKeys {
		if _, err := s.StockSet(ctx, &lapse.StockSetParams{SKU: "S-" + k, OnHand: int64(i + 1), At: base}); err != nil {
			t.Fatalf("StockSet(%q): %v", "S-"+k, err)
		}
	}
	for i, k := range exactKeys {
		if st, err := s.StockGet(ctx, "S-"+k); err != nil || st.SKU != "S-"+k || st.OnHand != int64(i+1) {
			t.Errorf("StockGet(%q) = %+v, %v; want its own line, %d on hand", "S-"+k, st, err, i+1)
		}
	}
}
