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

// testOrderRefundReview moves a refund to review with the review that holds
// it, in one transaction: a change that finds the refund moved on writes no
// review. Only by its id is such a review resolved, never with the other
// open reviews of its order or delivery.
func testOrderRefundReview(t *testing.T, s lapse.Store) {
	ctx := ctxT(t)
	o := createWithSubs(t, s, "RFR-1", base, "refund")
	ds, err := s.DeliveryList(ctx, o.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("DeliveryList = %d, %v", len(ds), err)
	}
	pp := newPayment(o, "txn-rfr", base)
	pp.Payment.Status = lapse.PaymentApplied
	pay, _, err := s.PaymentCreate(ctx, pp)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.OrderRefundCreate(ctx, &lapse.OrderRefund{OrderID: o.ID, OrderNo: o.OrderNo, PaymentID: pay.ID, Provider: pay.Provider,
		TxnID: pay.TxnID, Amount: 400, Currency: "CNY", Reason: "damaged", Key: "key-rfr", Status: lapse.OrderRefundRequested, CreatedAt: base})
	if err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Minute)
	review := &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "the provider reports 10.00 CNY", DeliveryID: ds[0].ID, CreatedAt: at}
	up, err := s.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: r.ID, From: lapse.OrderRefundRequested, To: lapse.OrderRefundReview,
		At: at, Review: review})
	if err != nil || up.Status != lapse.OrderRefundReview || !up.UpdatedAt.Equal(at) {
		t.Fatalf("OrderRefundUpdate to review = %+v, %v", up, err)
	}
	if _, err := s.OrderRefundUpdate(ctx, &lapse.OrderRefundUpdateParams{ID: r.ID, From: lapse.OrderRefundRequested, To: lapse.OrderRefundReview,
		At: at, Review: review}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("stale OrderRefundUpdate with a review = %v, want ErrStale", err)
	}
	rs, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || len(rs) != 1 {
		t.Fatalf("open reviews = %+v, %v; want the refund's one", rs, err)
	}
	rv := rs[0]
	if rv.OrderRefundID != r.ID || rv.OrderNo != o.OrderNo || rv.Reason != review.Reason || rv.DeliveryID != ds[0].ID || !rv.CreatedAt.Equal(at) {
		t.Errorf("the refund's review = %+v; want it holding refund %d", rv, r.ID)
	}
	if got, err := s.ReviewGet(ctx, rv.ID); err != nil || got.OrderRefundID != r.ID {
		t.Errorf("ReviewGet = %+v, %v", got, err)
	}

	other := addReview(t, s, o, 0, "amount differs", at)
	rs, err = s.ReviewResolve(ctx, &lapse.ReviewResolveParams{OrderID: o.ID, At: at, By: "api", Note: "retried"})
	if err != nil || len(rs) != 1 || rs[0].ID != other.ID {
		t.Errorf("ReviewResolve(order) = %+v, %v; want only review %d, not the refund's", rs, err, other.ID)
	}
	if rs, err := s.ReviewResolve(ctx, &lapse.ReviewResolveParams{DeliveryID: ds[0].ID, At: at, By: "api"}); err != nil || len(rs) != 0 {
		t.Errorf("ReviewResolve(delivery) = %+v, %v; want none: the refund's stays open", rs, err)
	}
	rs, err = s.ReviewResolve(ctx, &lapse.ReviewResolveParams{ID: rv.ID, At: at, By: "operator:alice", Note: "settled"})
	if err != nil || len(rs) != 1 || rs[0].ID != rv.ID || rs[0].OrderRefundID != r.ID || rs[0].ResolvedAt == nil {
		t.Errorf("ReviewResolve(id) = %+v, %v; want the refund's review resolved", rs, err)
	}
}
