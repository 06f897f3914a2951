package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

func testOrderRefund(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "RF-1", base.Add(time.Hour), base)
	pp := newPayment(o, "txn-rf", base)
	pp.Payment.Status = lapse.PaymentApplied
	pay, _, err := s.PaymentCreate(ctxT(t), pp)
	if err != nil {
		t.Fatal(err)
	}
	newRefund := func(key string, amount int64) *lapse.OrderRefund {
		return &lapse.OrderRefund{OrderID: o.ID, OrderNo: o.OrderNo, PaymentID: pay.ID, Provider: pay.Provider, TxnID: pay.TxnID,
			Amount: amount, Currency: "CNY", Reason: "damaged", Key: key, Status: lapse.OrderRefundRequested, CreatedAt: base.Add(time.Minute)}
	}
	// Concurrent creators of one key: exactly one creates.
	var wg sync.WaitGroup
	var created atomic.Int32
	for range 6 {
		wg.Go(func() {
			_, c, err := s.OrderRefundCreate(ctxT(t), newRefund("key-1", 500))
			if err != nil {
				t.Errorf("OrderRefundCreate: %v", err)
			}
			if c {
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d creators of one key created, want 1", created.Load())
	}
	r2, c, err := s.OrderRefundCreate(ctxT(t), newRefund("key-2", 300))
	if err != nil || !c || r2.Amount != 300 || r2.Status != lapse.OrderRefundRequested || r2.PaymentID != pay.ID || !r2.CreatedAt.Equal(base.Add(time.Minute)) {
		t.Fatalf("OrderRefundCreate key-2 = %+v, %v, %v", r2, c, err)
	}
	list, err := s.OrderRefundList(ctxT(t), o.ID)
	if err != nil || len(list) != 2 || list[0].Key != "key-1" || list[1].Key != "key-2" {
		t.Fatalf("OrderRefundList = %+v, %v", list, err)
	}
	at := base.Add(2 * time.Minute)
	up, err := s.OrderRefundUpdate(ctxT(t), &lapse.OrderRefundUpdateParams{ID: r2.ID, From: lapse.OrderRefundRequested, To: lapse.OrderRefundSucceeded, RefundID: "re-9", At: at})
	if err != nil || up.Status != lapse.OrderRefundSucceeded || up.RefundID != "re-9" || !up.UpdatedAt.Equal(at) {
		t.Fatalf("OrderRefundUpdate = %+v, %v", up, err)
	}
	if _, err := s.OrderRefundUpdate(ctxT(t), &lapse.OrderRefundUpdateParams{ID: r2.ID, From: lapse.OrderRefundRequested, To: lapse.OrderRefundFailed, At: at}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("stale OrderRefundUpdate = %v, want ErrStale", err)
	}
	if _, err := s.OrderRefundUpdate(ctxT(t), &lapse.OrderRefundUpdateParams{ID: r2.ID + 100, From: lapse.OrderRefundRequested, To: lapse.OrderRefundFailed, At: at}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("OrderRefundUpdate of a missing refund = %v, want ErrStale", err)
	}
	// A failure's reason is kept, and kept by a later change that names none.
	failed, err := s.OrderRefundUpdate(ctxT(t), &lapse.OrderRefundUpdateParams{ID: list[0].ID, From: lapse.OrderRefundRequested, To: lapse.OrderRefundFailed,
		Failure: "card cancelled", At: at})
	if err != nil || failed.Status != lapse.OrderRefundFailed || failed.Failure != "card cancelled" {
		t.Fatalf("OrderRefundUpdate to failed = %+v, %v", failed, err)
	}
	again, err := s.OrderRefundUpdate(ctxT(t), &lapse.OrderRefundUpdateParams{ID: list[0].ID, From: lapse.OrderRefundFailed, To: lapse.OrderRefundFailed, At: at})
	if err != nil || again.Failure != "card cancelled" {
		t.Errorf("a change without a failure lost it: %+v, %v", again, err)
	}
}
