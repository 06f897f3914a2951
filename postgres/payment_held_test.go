package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// A batch of applied payments leaves out a payment whose transaction is
// held without its order for another order (lapse.HeldTakes): that call is
// lapse.ErrPaymentHeld, its order unmoved, and the others are written in
// the batch's one statement.
func TestPaymentBatchHeld(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 4)
	ctx := context.Background()
	if _, _, err := s.HeldPaymentCreate(ctx, &lapse.HeldPayment{Provider: "hmac", TxnID: "H-1", OrderNo: "ELSEWHERE", Amount: 2500,
		Currency: "CNY", PaidAt: batchBase, Status: lapse.HeldWaiting, Raw: []byte(`{}`), CreatedAt: batchBase}); err != nil {
		t.Fatal(err)
	}
	ps := []*lapse.PaymentCreateParams{applied(t, os[0], "H-0"), applied(t, os[1], "H-1"), applied(t, os[2], "H-2"), applied(t, os[3], "H-3")}
	got := queueAll(t, s, ps)
	for i, a := range got {
		if i == 1 {
			if !errors.Is(a.err, lapse.ErrPaymentHeld) || a.created {
				t.Errorf("payment of a transaction held for another order: %+v; want ErrPaymentHeld", a)
			}
			checkUnpaid(t, s, os[1])
			continue
		}
		if a.err != nil || !a.created {
			t.Errorf("payment %d: %+v; want it created", i, a)
		}
		checkPaid(t, s, os[i], ps[i].Payment.TxnID)
	}
	if n := xmins(t, s); n != 1 {
		t.Errorf("the batch's 3 payments were written by %d transactions; want 1", n)
	}
}
