package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestUpgradePaymentWrites starts from the schema before 0026 with paid
// orders in it, migrates, and checks that no payment changed, that payments
// have no foreign key left, and that the store still applies payments, in a
// batch and alone, and still refuses one whose order moved on, writing
// nothing.
func TestUpgradePaymentWrites(t *testing.T) {
	t.Parallel()
	s, dsn := storeAt(t, 25)
	ctx := context.Background()
	conn := connect(t, dsn)
	dropStandIn := relayStandIn(t, conn)
	os := batchOrders(t, s, 6)
	for i, txn := range []string{"old-0", "old-1"} {
		if _, created, err := s.PaymentCreate(ctx, applied(t, os[i], txn)); err != nil || !created {
			t.Fatalf("PaymentCreate(%s) before the upgrade = %v, %v", txn, created, err)
		}
	}
	dropStandIn()
	snapshot := func() string {
		t.Helper()
		var sum string
		if err := conn.QueryRow(ctx, `SELECT count(*) || ':' || md5(string_agg(p::text, '|' ORDER BY id)) FROM payments p`).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	before := snapshot()

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("payments after the upgrade = %s, before %s; want them unchanged", after, before)
	}
	var keys int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'payments'::regclass AND contype = 'f'`).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("%d foreign keys on payments after the upgrade, %v; want none", keys, err)
	}
	checkPaid(t, s, os[0], "old-0")
	checkPaid(t, s, os[1], "old-1")

	// Three payments in one batch with a fourth whose plan is stale (its
	// order was paid before the upgrade), then one alone.
	got := queueAll(t, s, []*lapse.PaymentCreateParams{applied(t, os[2], "new-2"), applied(t, os[3], "new-3"),
		applied(t, os[4], "new-4"), applied(t, os[0], "stale-0")})
	for i, a := range got[:3] {
		if a.err != nil || !a.created || a.pay.OrderID != os[i+2].ID {
			t.Errorf("payment %d of the batch = %+v, %v, %v; want it created for order %d", i, a.pay, a.created, a.err, os[i+2].ID)
		}
	}
	if a := got[3]; !errors.Is(a.err, lapse.ErrStale) {
		t.Errorf("a payment of an order paid already = %+v, %v, %v; want ErrStale", a.pay, a.created, a.err)
	}
	if _, created, err := s.PaymentCreate(ctx, applied(t, os[5], "new-5")); err != nil || !created {
		t.Fatalf("PaymentCreate(new-5) alone = %v, %v", created, err)
	}
	for i, txn := range []string{"old-0", "old-1", "new-2", "new-3", "new-4", "new-5"} {
		checkPaid(t, s, os[i], txn)
	}
}
