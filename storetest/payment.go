package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// newPayment builds a late payment of o, with its payment.late event fanned
// out to the refund subscriber.
func newPayment(o *lapse.Order, txn string, at time.Time) *lapse.PaymentCreateParams {
	p := &lapse.Payment{Provider: "sandbox", TxnID: txn, OrderID: o.ID, OrderNo: o.OrderNo, Amount: o.Amount,
		Currency: o.Currency, Merchant: "m-1", PaidAt: at.Add(-time.Second), Status: lapse.PaymentLate,
		Reason: "order closed", Raw: []byte(`{"txn_id":"` + txn + `"}`), CreatedAt: at, UpdatedAt: at}
	ev := lapse.NewPaymentEvent(lapse.EventPaymentLate, o, p)
	ev.Subscribers = []string{"refund"}
	return &lapse.PaymentCreateParams{Payment: p, Outbox: []lapse.OutboxEvent{ev}}
}

func testPaymentCreate(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "PAY-1", base.Add(time.Hour), base)
	p := newPayment(o, "txn-1", base.Add(time.Minute))
	got, created, err := s.PaymentCreate(ctxT(t), p)
	if err != nil || !created {
		t.Fatalf("PaymentCreate = %v, %v", created, err)
	}
	want := *p.Payment
	want.ID = got.ID
	if got.ID == 0 || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("PaymentCreate returned\n%+v\nwant\n%+v", *got, want)
	}
	read, err := s.PaymentGet(ctxT(t), "sandbox", "txn-1")
	if err != nil || fmt.Sprint(*read) != fmt.Sprint(*got) {
		t.Errorf("PaymentGet = %+v, %v; want %+v", read, err, got)
	}
	_, evs := counts(t, s, o)
	ds, _ := s.DeliveryList(ctxT(t), o.ID)
	if evs != 2 || len(ds) != 1 || ds[0].Subscriber != "refund" || ds[0].EventType != lapse.EventPaymentLate {
		t.Errorf("after PaymentCreate: %d events, deliveries %+v; want order.created, payment.late, and its delivery to refund", evs, ds)
	}
	if ev, _ := s.OutboxList(ctxT(t), o.ID); len(ev) == 2 {
		if pp, err := lapse.EventPayment(ev[1]); err != nil || pp.TxnID != "txn-1" {
			t.Errorf("payment.late payload: %+v, %v", pp, err)
		}
	}

	// The same transaction again: nothing written, the first one returned.
	again := newPayment(o, "txn-1", base.Add(2*time.Minute))
	again.Payment.Amount = 1
	dup, created, err := s.PaymentCreate(ctxT(t), again)
	if err != nil || created || dup.ID != got.ID || dup.Amount != got.Amount {
		t.Errorf("PaymentCreate again = %+v, %v, %v; want the first payment, not created", dup, created, err)
	}
	if _, evs := counts(t, s, o); evs != 2 {
		t.Errorf("a duplicate payment wrote events: %d, want 2", evs)
	}
	// Another provider's transaction of the same id is another payment.
	other := newPayment(o, "txn-1", base.Add(time.Minute))
	other.Payment.Provider = "stripe"
	if _, created, err := s.PaymentCreate(ctxT(t), other); err != nil || !created {
		t.Errorf("same txn id, other provider: created %v, %v", created, err)
	}
	if _, err := s.PaymentGet(ctxT(t), "sandbox", "nope"); !errors.Is(err, lapse.ErrPaymentNotFound) {
		t.Errorf("PaymentGet(nope) = %v, want ErrPaymentNotFound", err)
	}
}

func testPaymentCreateConcurrent(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "PAY-C", base.Add(time.Hour), base)
	var wg sync.WaitGroup
	var created atomic.Int32
	ids := make([]int64, 8)
	for i := range ids {
		wg.Go(func() {
			got, c, err := s.PaymentCreate(ctxT(t), newPayment(o, "txn-c", base.Add(time.Minute)))
			if err != nil {
				t.Errorf("PaymentCreate: %v", err)
				return
			}
			if c {
				created.Add(1)
			}
			ids[i] = got.ID
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d concurrent creators created, want exactly 1", created.Load())
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Errorf("creators saw payments %v, want one", ids)
			break
		}
	}
	if _, evs := counts(t, s, o); evs != 2 {
		t.Errorf("%d events, want order.created and one payment.late", evs)
	}
}

func testPaymentUpdate(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "PAY-U", base.Add(time.Hour), base)
	p, _, err := s.PaymentCreate(ctxT(t), newPayment(o, "txn-u", base))
	if err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Minute)
	up, err := s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: p.ID, From: lapse.PaymentLate, To: lapse.PaymentRefunding,
		RefundID: "re-1", At: at})
	if err != nil || up.Status != lapse.PaymentRefunding || up.RefundID != "re-1" || up.Reason != p.Reason || !up.UpdatedAt.Equal(at) || up.RefundedAt != nil {
		t.Fatalf("PaymentUpdate late → refunding = %+v, %v", up, err)
	}
	// Guarded: a second mover from late finds it moved on, and writes nothing.
	ev := lapse.NewPaymentEvent(lapse.EventPaymentReview, o, up)
	ev.Subscribers = []string{"notify"}
	if _, err := s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: p.ID, From: lapse.PaymentLate, To: lapse.PaymentReview,
		Reason: "x", At: at, Outbox: []lapse.OutboxEvent{ev}}); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("stale PaymentUpdate = %v, want ErrStale", err)
	}
	if _, evs := counts(t, s, o); evs != 2 {
		t.Errorf("a stale update wrote events: %d, want 2", evs)
	}
	if _, err := s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: p.ID + 1000, From: lapse.PaymentLate, To: lapse.PaymentReview, At: at}); !errors.Is(err, lapse.ErrPaymentNotFound) {
		t.Errorf("PaymentUpdate of a missing payment = %v, want ErrPaymentNotFound", err)
	}
	done := at.Add(time.Second)
	ev = lapse.NewPaymentEvent(lapse.EventPaymentRefunded, o, up)
	ev.Subscribers = []string{"notify"}
	up, err = s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: p.ID, From: lapse.PaymentRefunding, To: lapse.PaymentRefunded,
		RefundedAt: &done, At: done, Outbox: []lapse.OutboxEvent{ev}})
	if err != nil || up.Status != lapse.PaymentRefunded || up.RefundID != "re-1" || up.RefundedAt == nil || !up.RefundedAt.Equal(done) {
		t.Fatalf("PaymentUpdate refunding → refunded = %+v, %v", up, err)
	}
	ds, _ := s.DeliveryList(ctxT(t), o.ID)
	if _, evs := counts(t, s, o); evs != 3 || len(ds) != 2 || ds[1].Subscriber != "notify" {
		t.Errorf("after refunded: %d events, %d deliveries; want 3 and 2", evs, len(ds))
	}

	// A payment that goes to review puts a review of its order on the desk,
	// in the same change; a stale change writes none.
	q, _, err := s.PaymentCreate(ctxT(t), newPayment(o, "txn-u2", base))
	if err != nil {
		t.Fatal(err)
	}
	rv := &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "refund refused: card cancelled", CreatedAt: at}
	if _, err := s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: q.ID, From: lapse.PaymentRefunding, To: lapse.PaymentReview, At: at, Review: rv}); !errors.Is(err, lapse.ErrStale) {
		t.Fatalf("stale PaymentUpdate with a review = %v", err)
	}
	if _, err := s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: q.ID, From: lapse.PaymentLate, To: lapse.PaymentReview, Reason: rv.Reason, At: at, Review: rv}); err != nil {
		t.Fatal(err)
	}
	mm := newPayment(o, "txn-u3", base)
	mm.Payment.Status = lapse.PaymentReview
	mm.Review = &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "amount differs", CreatedAt: base}
	if _, created, err := s.PaymentCreate(ctxT(t), mm); err != nil || !created {
		t.Fatal(err)
	}
	if _, created, err := s.PaymentCreate(ctxT(t), mm); err != nil || created {
		t.Fatalf("PaymentCreate again = %v, %v", created, err)
	}
	rs, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || len(rs) != 2 || rs[0].Reason != "refund refused: card cancelled" || rs[1].Reason != "amount differs" ||
		rs[0].OrderNo != o.OrderNo || rs[0].DeliveryID != 0 || !rs[0].CreatedAt.Equal(at) {
		t.Errorf("reviews after two payments went to review: %+v, %v", rs, err)
	}
}

func testPaymentList(t *testing.T, s lapse.Store) {
	a := mustCreate(t, s, "PAY-LA", base.Add(time.Hour), base)
	b := mustCreate(t, s, "PAY-LB", base.Add(time.Hour), base)
	var ids []int64
	for i, o := range []*lapse.Order{a, b, a} {
		p := newPayment(o, fmt.Sprintf("txn-l%d", i), base)
		if i == 1 {
			p.Payment.Status = lapse.PaymentApplied
		}
		got, _, err := s.PaymentCreate(ctxT(t), p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got.ID)
	}
	list := func(p lapse.PaymentListParams) []int64 {
		t.Helper()
		ps, err := s.PaymentList(ctxT(t), &p)
		if err != nil {
			t.Fatalf("PaymentList(%+v): %v", p, err)
		}
		var out []int64
		for _, x := range ps {
			out = append(out, x.ID)
		}
		return out
	}
	for _, c := range []struct {
		p    lapse.PaymentListParams
		want []int64
	}{
		{lapse.PaymentListParams{}, ids},
		{lapse.PaymentListParams{OrderID: a.ID}, []int64{ids[0], ids[2]}},
		{lapse.PaymentListParams{Status: lapse.PaymentApplied}, []int64{ids[1]}},
		{lapse.PaymentListParams{AfterID: ids[0], Limit: 1}, []int64{ids[1]}},
	} {
		if got := list(c.p); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("PaymentList(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
}

// testPaymentReview checks that the review a payment change writes is the
// review given, field by field: the store takes neither its order nor its
// delivery from the payment.
func testPaymentReview(t *testing.T, s lapse.Store) {
	o := mustCreate(t, s, "PAY-R", base.Add(time.Hour), base)
	created := createWithSubs(t, s, "PAY-RD", base, "refund")
	ds, err := s.DeliveryList(ctxT(t), created.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("DeliveryList = %d, %v", len(ds), err)
	}
	p := newPayment(o, "txn-r", base.Add(time.Minute))
	p.Payment.Status = lapse.PaymentReview
	p.Review = &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "merchant differs", DeliveryID: ds[0].ID, CreatedAt: base.Add(2 * time.Minute)}
	pay, _, err := s.PaymentCreate(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	up := &lapse.Review{OrderID: o.ID, OrderNo: o.OrderNo, Reason: "refund refused", CreatedAt: base.Add(3 * time.Minute)}
	if _, err := s.PaymentUpdate(ctxT(t), &lapse.PaymentUpdateParams{ID: pay.ID, From: lapse.PaymentReview, To: lapse.PaymentReview,
		Reason: "refund refused", At: base.Add(3 * time.Minute), Review: up}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.ReviewList(ctxT(t), &lapse.ReviewListParams{OrderID: o.ID})
	if err != nil || len(rs) != 2 {
		t.Fatalf("ReviewList = %d reviews, %v; want 2", len(rs), err)
	}
	for i, want := range []*lapse.Review{up, p.Review} { // newest first
		got := rs[i]
		if got.ID == 0 || got.OrderID != want.OrderID || got.OrderNo != want.OrderNo || got.Reason != want.Reason ||
			got.DeliveryID != want.DeliveryID || !got.CreatedAt.Equal(want.CreatedAt) || got.ResolvedAt != nil {
			t.Errorf("review %d = %+v, want %+v", i, got, want)
		}
	}
}

// appliedPayment builds a payment of o that pays it, with the transition
// PAY of o planned at at, whose order.paid event fans out to notify.
func appliedPayment(t *testing.T, o *lapse.Order, txn string, at time.Time) *lapse.PaymentCreateParams {
	t.Helper()
	tr := plan(t, o, flows.Pay, at)
	for i := range tr.Outbox {
		tr.Outbox[i].Subscribers = []string{"notify"}
	}
	p := &lapse.Payment{Provider: "sandbox", TxnID: txn, OrderID: o.ID, OrderNo: o.OrderNo, Amount: o.Amount,
		Currency: o.Currency, Merchant: "m-1", PaidAt: at.Add(-time.Second), Status: lapse.PaymentApplied,
		Raw: []byte(`{"txn_id":"` + txn + `"}`), CreatedAt: at, UpdatedAt: at}
	return &lapse.PaymentCreateParams{Payment: p, Transition: tr}
}

func testPaymentApply(t *testing.T, s lapse.Store) {
	at := base.Add(time.Minute)
	o := mustCreate(t, s, "PA-1", base.Add(time.Hour), base)
	p := appliedPayment(t, o, "txn-a", at)
	got, created, err := s.PaymentCreate(ctxT(t), p)
	if err != nil || !created {
		t.Fatalf("PaymentCreate with its transition = %v, %v", created, err)
	}
	want := *p.Payment
	want.ID = got.ID
	if got.ID == 0 || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("PaymentCreate returned\n%+v\nwant\n%+v", *got, want)
	}
	paid := mustGet(t, s, "PA-1")
	trs, _ := s.TransitionList(ctxT(t), o.ID)
	evs, _ := s.OutboxList(ctxT(t), o.ID)
	ds, _ := s.DeliveryList(ctxT(t), o.ID)
	if paid.State != flows.Paid || paid.Version != 2 || len(trs) != 2 || trs[1].ToState != flows.Paid || trs[1].Version != 2 ||
		len(evs) != 2 || evs[1].ID != p.Transition.Outbox[0].ID || len(ds) != 1 || ds[0].Subscriber != "notify" {
		t.Errorf("after the payment: %+v, %d log rows, %d events, deliveries %+v; want PAID at 2 with its row, order.paid and its delivery",
			paid, len(trs), len(evs), ds)
	}

	// The same transaction again, planned from the order as it was: the
	// payment recorded, nothing written.
	dup, created, err := s.PaymentCreate(ctxT(t), appliedPayment(t, o, "txn-a", at.Add(time.Second)))
	if err != nil || created || dup.ID != got.ID {
		t.Errorf("PaymentCreate again = %+v, %v, %v; want the first payment, not created", dup, created, err)
	}
	if trs, evs := counts(t, s, o); trs != 2 || evs != 2 {
		t.Errorf("a duplicate wrote: %d log rows, %d events; want 2 and 2", trs, evs)
	}

	// The order moved on: nothing written.
	o2 := mustCreate(t, s, "PA-2", base.Add(time.Hour), base)
	stale := appliedPayment(t, o2, "txn-s", at)
	if _, err := s.OrderTransition(ctxT(t), plan(t, o2, flows.Cancel, at)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PaymentCreate(ctxT(t), stale); !errors.Is(err, lapse.ErrStale) {
		t.Errorf("PaymentCreate with a stale transition = %v, want ErrStale", err)
	}
	if _, err := s.PaymentGet(ctxT(t), "sandbox", "txn-s"); !errors.Is(err, lapse.ErrPaymentNotFound) {
		t.Errorf("a stale payment was recorded: %v", err)
	}
	if trs, evs := counts(t, s, o2); trs != 2 || evs != 2 {
		t.Errorf("a stale payment wrote: %d log rows, %d events; want 2 and 2", trs, evs)
	}

	// A payment recorded without moving its order (review), paid again by
	// the same transaction: the one recorded, the order not moved; inside
	// Tx the transaction stays usable.
	o3 := mustCreate(t, s, "PA-3", base.Add(time.Hour), base)
	rv, _, err := s.PaymentCreate(ctxT(t), newPayment(o3, "txn-r", at))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Tx(ctxT(t), func(tx lapse.Store) error {
		got, created, err := tx.PaymentCreate(ctxT(t), appliedPayment(t, o3, "txn-r", at))
		if err != nil || created || got.ID != rv.ID {
			return fmt.Errorf("PaymentCreate of a recorded payment in Tx = %+v, %v, %v; want it, not created", got, created, err)
		}
		_, err = tx.OrderTransition(ctxT(t), plan(t, o3, flows.Cancel, at))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "PA-3"); got.State != flows.Closed {
		t.Errorf("PA-3 is %s, want %s: the transaction went on after the recorded payment", got.State, flows.Closed)
	}
}

func testPaymentApplyConcurrent(t *testing.T, s lapse.Store) {
	at := base.Add(time.Minute)
	// One transaction sent eight times at once for one order, and one sent
	// for eight orders at once (a provider's mistake): one payment, one
	// order PAID, each PAID order by its own payment.
	one := mustCreate(t, s, "PAC-1", base.Add(time.Hour), base)
	var many []*lapse.Order
	for i := range 8 {
		many = append(many, mustCreate(t, s, orderNo("PAC-M", i), base.Add(time.Hour), base))
	}
	for _, c := range []struct {
		txn    string
		orders []*lapse.Order
	}{
		{"txn-one", slices.Repeat([]*lapse.Order{one}, 8)},
		{"txn-many", many},
	} {
		var wg sync.WaitGroup
		var created atomic.Int32
		for _, o := range c.orders {
			wg.Go(func() {
				_, cr, err := s.PaymentCreate(ctxT(t), appliedPayment(t, o, c.txn, at))
				if err != nil && !errors.Is(err, lapse.ErrStale) {
					t.Errorf("PaymentCreate %s of %s: %v", c.txn, o.OrderNo, err)
				}
				if cr {
					created.Add(1)
				}
			})
		}
		wg.Wait()
		if created.Load() != 1 {
			t.Errorf("%s: %d concurrent creators created, want exactly 1", c.txn, created.Load())
		}
		pay, err := s.PaymentGet(ctxT(t), "sandbox", c.txn)
		if err != nil {
			t.Fatal(err)
		}
		paid := 0
		for _, o := range slices.Compact(slices.Clone(c.orders)) {
			got := mustGet(t, s, o.OrderNo)
			switch {
			case got.State == flows.Paid && got.ID == pay.OrderID && got.Version == 2:
				paid++
			case got.State == flows.Paid:
				t.Errorf("%s: %s is PAID (version %d) without its payment", c.txn, got.OrderNo, got.Version)
			case got.Version != 1:
				t.Errorf("%s: %s moved to %s", c.txn, got.OrderNo, got.State)
			}
		}
		if paid != 1 {
			t.Errorf("%s: %d orders PAID by it, want 1", c.txn, paid)
		}
	}
}
