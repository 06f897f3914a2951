package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// newHeld builds a payment held without its order, as the engine records it.
func newHeld(txn, orderNo string, at time.Time) *lapse.HeldPayment {
	return &lapse.HeldPayment{Provider: "sandbox", TxnID: txn, OrderNo: orderNo, Amount: 1999, Currency: "CNY", Merchant: "m-1",
		PaidAt: at.Add(-time.Second), Doubt: "names no seller", Status: lapse.HeldWaiting, Reason: "no order " + orderNo + " exists",
		Raw: []byte(`{"txn_id":"` + txn + `"}`), CreatedAt: at, UpdatedAt: at}
}

func testHeldPayment(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	in := newHeld("txn-h1", "NOPE-1", base)
	got, created, err := s.HeldPaymentCreate(ctx, in)
	if err != nil || !created {
		t.Fatalf("HeldPaymentCreate = %v, %v", created, err)
	}
	want := *in
	want.ID = got.ID
	if got.ID == 0 || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("HeldPaymentCreate returned\n%+v\nwant\n%+v", *got, want)
	}
	read, err := s.HeldPaymentGet(ctx, got.ID)
	if err != nil || fmt.Sprint(*read) != fmt.Sprint(*got) {
		t.Errorf("HeldPaymentGet = %+v, %v; want %+v", read, err, got)
	}
	if _, err := s.HeldPaymentGet(ctx, got.ID+1000); !errors.Is(err, lapse.ErrHeldPaymentNotFound) {
		t.Errorf("HeldPaymentGet of a missing one = %v, want ErrHeldPaymentNotFound", err)
	}

	// The same transaction again, whatever it says: nothing written, the
	// first one returned.
	again := newHeld("txn-h1", "NOPE-2", base.Add(time.Minute))
	again.Amount = 1
	dup, created, err := s.HeldPaymentCreate(ctx, again)
	if err != nil || created || dup.ID != got.ID || dup.Amount != 1999 || dup.OrderNo != "NOPE-1" {
		t.Errorf("HeldPaymentCreate again = %+v, %v, %v; want the first, not created", dup, created, err)
	}
	// Another provider's transaction of the same id is another payment.
	other := newHeld("txn-h1", "NOPE-1", base)
	other.Provider, other.Raw = "stripe", nil
	o2, created, err := s.HeldPaymentCreate(ctx, other)
	if err != nil || !created || o2.ID == got.ID || len(o2.Raw) != 0 {
		t.Errorf("HeldPaymentCreate of another provider's = %+v, %v, %v", o2, created, err)
	}
	h3, _, err := s.HeldPaymentCreate(ctx, newHeld("txn-h3", "NOPE-3", base))
	if err != nil {
		t.Fatal(err)
	}

	// Guarded moves: the fields set are set, the others kept.
	at := base.Add(time.Hour)
	up, err := s.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: got.ID, From: lapse.HeldWaiting, To: lapse.HeldReview,
		Reason: "no order within 24h", At: at})
	if err != nil || up.Status != lapse.HeldReview || up.Reason != "no order within 24h" || !up.UpdatedAt.Equal(at) ||
		!up.CreatedAt.Equal(base) || up.RefundID != "" || up.By != "" || up.Note != "" || up.Doubt != in.Doubt {
		t.Fatalf("HeldPaymentUpdate held → review = %+v, %v", up, err)
	}
	if _, err := s.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: got.ID, From: lapse.HeldWaiting, To: lapse.HeldApplied,
		Reason: "x", At: at}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("stale HeldPaymentUpdate = %v, want ErrStale", err)
	}
	if _, err := s.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: got.ID + 1000, From: lapse.HeldWaiting, To: lapse.HeldApplied,
		At: at}); !errors.Is(err, lapse.ErrHeldPaymentNotFound) {
		t.Errorf("HeldPaymentUpdate of a missing one = %v, want ErrHeldPaymentNotFound", err)
	}
	up, err = s.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: got.ID, From: lapse.HeldReview, To: lapse.HeldRefunding,
		RefundID: "key-1", By: "operator:alice", At: at})
	if err != nil || up.Status != lapse.HeldRefunding || up.RefundID != "key-1" || up.By != "operator:alice" || up.Reason != "no order within 24h" {
		t.Fatalf("HeldPaymentUpdate review → refunding = %+v, %v", up, err)
	}
	up, err = s.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: got.ID, From: lapse.HeldRefunding, To: lapse.HeldRefunded,
		RefundID: "re-1", Note: "line one\nline two", At: at.Add(time.Second)})
	if err != nil || up.Status != lapse.HeldRefunded || up.RefundID != "re-1" || up.By != "operator:alice" || up.Note != "line one\nline two" {
		t.Fatalf("HeldPaymentUpdate refunding → refunded = %+v, %v", up, err)
	}

	// Lists: by id, by status, by transaction, paged.
	ids := func(p *lapse.HeldPaymentListParams) []int64 {
		t.Helper()
		hs, err := s.HeldPaymentList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, h := range hs {
			out = append(out, h.ID)
		}
		return out
	}
	for _, c := range []struct {
		p    *lapse.HeldPaymentListParams
		want []int64
	}{
		{&lapse.HeldPaymentListParams{}, []int64{got.ID, o2.ID, h3.ID}},
		{&lapse.HeldPaymentListParams{Statuses: []lapse.HeldPaymentStatus{lapse.HeldWaiting}}, []int64{o2.ID, h3.ID}},
		{&lapse.HeldPaymentListParams{Statuses: []lapse.HeldPaymentStatus{lapse.HeldWaiting, lapse.HeldRefunded}}, []int64{got.ID, o2.ID, h3.ID}},
		{&lapse.HeldPaymentListParams{Statuses: []lapse.HeldPaymentStatus{lapse.HeldReview}}, nil},
		{&lapse.HeldPaymentListParams{Provider: "sandbox", TxnID: "txn-h1"}, []int64{got.ID}},
		{&lapse.HeldPaymentListParams{Provider: "stripe", TxnID: "txn-h1"}, []int64{o2.ID}},
		{&lapse.HeldPaymentListParams{Provider: "sandbox", TxnID: "txn-none"}, nil},
		{&lapse.HeldPaymentListParams{AfterID: got.ID, Limit: 1}, []int64{o2.ID}},
	} {
		if g := ids(c.p); fmt.Sprint(g) != fmt.Sprint(c.want) {
			t.Errorf("HeldPaymentList(%+v) = %v, want %v", *c.p, g, c.want)
		}
	}
}

func testHeldPaymentCreateConcurrent(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	var (
		wg      sync.WaitGroup
		creates atomic.Int32
		ids     sync.Map
	)
	for i := range 8 {
		wg.Go(func() {
			h, created, err := s.HeldPaymentCreate(ctx, newHeld("txn-c", "NOPE-C", base.Add(time.Duration(i)*time.Millisecond)))
			if err != nil {
				t.Error(err)
				return
			}
			if created {
				creates.Add(1)
			}
			ids.Store(h.ID, true)
		})
	}
	wg.Wait()
	n := 0
	ids.Range(func(any, any) bool { n++; return true })
	if creates.Load() != 1 || n != 1 {
		t.Errorf("8 concurrent creates of one transaction: %d created, %d ids; want 1 and 1", creates.Load(), n)
	}
}

// testPaymentHeld checks that a payment whose transaction a held payment
// takes (lapse.HeldTakes) is not recorded, with or without its order's
// transition: lapse.ErrPaymentHeld, nothing written, the order unmoved.
// One held for the same order, amount and currency, waiting or in review,
// does not take it.
func testPaymentHeld(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	at := base.Add(time.Minute)
	hold := func(txn, orderNo string, to lapse.HeldPaymentStatus) {
		t.Helper()
		h, created, err := s.HeldPaymentCreate(ctx, newHeld(txn, orderNo, base))
		if err != nil || !created {
			t.Fatalf("HeldPaymentCreate(%s) = %v, %v", txn, created, err)
		}
		if to != lapse.HeldWaiting {
			if _, err := s.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: lapse.HeldWaiting, To: to, At: at}); err != nil {
				t.Fatal(err)
			}
		}
	}
	unmoved := func(o *lapse.Order) {
		t.Helper()
		ps, err := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID})
		if trs, evs := counts(t, s, o); err != nil || len(ps) != 0 || trs != 1 || evs != 1 || mustGet(t, s, o.OrderNo).Version != 1 {
			t.Errorf("order %s after a payment a held payment takes: %d log rows, %d events, payments %+v, %v; want it as created",
				o.OrderNo, trs, evs, ps, err)
		}
	}

	// Held for another order: not applied, not recorded late.
	o := mustCreate(t, s, "PH-1", base.Add(time.Hour), base)
	hold("txn-ph1", "NOPE-PH1", lapse.HeldWaiting)
	if got, created, err := s.PaymentCreate(ctx, appliedPayment(t, o, "txn-ph1", at)); !errors.Is(err, lapse.ErrPaymentHeld) || created {
		t.Errorf("PaymentCreate with its transition of a transaction held for another order = %+v, %v, %v; want ErrPaymentHeld", got, created, err)
	}
	if got, created, err := s.PaymentCreate(ctx, newPayment(o, "txn-ph1", at)); !errors.Is(err, lapse.ErrPaymentHeld) || created {
		t.Errorf("PaymentCreate of a transaction held for another order = %+v, %v, %v; want ErrPaymentHeld", got, created, err)
	}
	err := s.Tx(ctx, func(tx lapse.Store) error {
		if _, _, err := tx.PaymentCreate(ctx, appliedPayment(t, o, "txn-ph1", at)); !errors.Is(err, lapse.ErrPaymentHeld) {
			t.Errorf("PaymentCreate in Tx of a transaction held for another order = %v; want ErrPaymentHeld", err)
		}
		_, err := tx.OrderGet(ctx, o.OrderNo) // the transaction goes on
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PaymentGet(ctx, "sandbox", "txn-ph1"); !errors.Is(err, lapse.ErrPaymentNotFound) {
		t.Errorf("a payment held for another order was recorded: %v", err)
	}
	unmoved(o)

	// Held for this order, but refunded, or of another amount: not applied.
	o2 := mustCreate(t, s, "PH-2", base.Add(time.Hour), base)
	hold("txn-ph2", "PH-2", lapse.HeldRefunded)
	if _, _, err := s.PaymentCreate(ctx, appliedPayment(t, o2, "txn-ph2", at)); !errors.Is(err, lapse.ErrPaymentHeld) {
		t.Errorf("PaymentCreate of a transaction held and refunded = %v; want ErrPaymentHeld", err)
	}
	other := appliedPayment(t, o2, "txn-ph2b", at)
	other.Payment.Amount++
	hold("txn-ph2b", "PH-2", lapse.HeldWaiting)
	if _, _, err := s.PaymentCreate(ctx, other); !errors.Is(err, lapse.ErrPaymentHeld) {
		t.Errorf("PaymentCreate of another amount than held = %v; want ErrPaymentHeld", err)
	}
	unmoved(o2)

	// Held for this order, amount and currency, waiting or in review: it
	// is that payment.
	for i, st := range []lapse.HeldPaymentStatus{lapse.HeldWaiting, lapse.HeldReview} {
		no, txn := fmt.Sprintf("PH-3%d", i), fmt.Sprintf("txn-ph3%d", i)
		o3 := mustCreate(t, s, no, base.Add(time.Hour), base)
		hold(txn, no, st)
		if got, created, err := s.PaymentCreate(ctx, appliedPayment(t, o3, txn, at)); err != nil || !created || got.OrderID != o3.ID {
			t.Errorf("PaymentCreate of the transaction held %s for its order = %+v, %v, %v; want created", st, got, created, err)
		}
	}

	// Recorded before it was held (a race the matcher settles): the
	// payment recorded is the answer, as for any payment that exists.
	o4 := mustCreate(t, s, "PH-4", base.Add(time.Hour), base)
	first, _, err := s.PaymentCreate(ctx, appliedPayment(t, o4, "txn-ph4", at))
	if err != nil {
		t.Fatal(err)
	}
	hold("txn-ph4", "NOPE-PH4", lapse.HeldWaiting)
	for _, p := range []*lapse.PaymentCreateParams{appliedPayment(t, o4, "txn-ph4", at), newPayment(o4, "txn-ph4", at)} {
		if got, created, err := s.PaymentCreate(ctx, p); err != nil || created || got.ID != first.ID {
			t.Errorf("PaymentCreate of a payment recorded, then held = %+v, %v, %v; want the payment, not created", got, created, err)
		}
	}
}
