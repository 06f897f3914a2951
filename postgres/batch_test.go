package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

var batchBase = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// batchOrders creates n UNPAID checkout orders B-0… due in an hour.
func batchOrders(t *testing.T, s *postgres.Store, n int) []*lapse.Order {
	t.Helper()
	var out []*lapse.Order
	for i := range n {
		deadline := batchBase.Add(time.Hour)
		o := &lapse.Order{OrderNo: fmt.Sprintf("B-%d", i), Flow: "checkout", State: flows.Unpaid, DeadlineAt: &deadline,
			Amount: 2500, Currency: "CNY", UserID: "u", Version: 1, CreatedAt: batchBase, UpdatedAt: batchBase, FiredBy: lapse.FiredByApp}
		got, created, err := s.OrderCreate(context.Background(), &lapse.OrderCreateParams{Order: o,
			Log:    lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByApp, CreatedAt: batchBase},
			Outbox: []lapse.OutboxEvent{lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)}})
		if err != nil || !created {
			t.Fatalf("OrderCreate(%s) = %v, %v", o.OrderNo, created, err)
		}
		out = append(out, got)
	}
	return out
}

// applied is the payment txn of o applied, as the engine plans it.
func applied(t *testing.T, o *lapse.Order, txn string) *lapse.PaymentCreateParams {
	t.Helper()
	at := batchBase.Add(time.Minute)
	tr, err := flows.Checkout().Plan(o, lapse.Firing{Event: flows.Pay, Now: at, At: at, FiredBy: lapse.FiredByPayment,
		Actor: "hmac", Reason: "payment " + txn})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.Outbox {
		tr.Outbox[i].Subscribers = []string{"notify"}
	}
	return &lapse.PaymentCreateParams{Transition: tr, Payment: &lapse.Payment{Provider: "hmac", TxnID: txn, OrderID: o.ID,
		OrderNo: o.OrderNo, Amount: o.Amount, Currency: o.Currency, Merchant: "m-1", PaidAt: at, Status: lapse.PaymentApplied,
		Raw: []byte(`{"txn":"` + txn + `"}`), CreatedAt: at, UpdatedAt: at}}
}

// answer is what one PaymentCreate returned.
type answer struct {
	pay     *lapse.Payment
	created bool
	err     error
}

// queueAll sends every call of ps at once while s's batches are held, and
// lets them go once all are queued: they go in one batch, but for those a
// batch cannot hold together.
func queueAll(t *testing.T, s *postgres.Store, ps []*lapse.PaymentCreateParams, ctxs ...context.Context) []answer {
	t.Helper()
	queued, release := postgres.HoldPaymentBatches(s)
	out := make([]answer, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		ctx := context.Background()
		if i < len(ctxs) && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Go(func() {
			pay, created, err := s.PaymentCreate(ctx, p)
			out[i] = answer{pay, created, err}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(ps); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls queued", queued(), len(ps))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	return out
}

// xmins counts the transactions that wrote the payments of provider hmac.
func xmins(t *testing.T, s *postgres.Store) int {
	t.Helper()
	var n int
	if err := s.QueryRowForTest(context.Background(), `SELECT count(DISTINCT xmin::text) FROM payments WHERE provider = 'hmac'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkPaid checks that o is PAID by txn alone, with its one transition,
// event and delivery.
func checkPaid(t *testing.T, s *postgres.Store, o *lapse.Order, txn string) {
	t.Helper()
	ctx := context.Background()
	got, err := s.OrderGet(ctx, o.OrderNo)
	if err != nil || got.State != flows.Paid || got.Version != 2 || got.DeadlineAt != nil {
		t.Errorf("order %s after its payment: %+v, %v; want PAID at version 2 without a deadline", o.OrderNo, got, err)
	}
	trs, _ := s.TransitionList(ctx, o.ID)
	evs, _ := s.OutboxList(ctx, o.ID)
	ds, _ := s.DeliveryList(ctx, o.ID)
	ps, _ := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID})
	if len(trs) != 2 || trs[1].ToState != flows.Paid || len(evs) != 2 || len(ds) != 1 || len(ps) != 1 || ps[0].TxnID != txn {
		t.Errorf("order %s: %d transitions, %d events, %d deliveries, payments %+v; want 2, 2, 1 and %s", o.OrderNo,
			len(trs), len(evs), len(ds), ps, txn)
	}
}

// checkUnpaid checks that o is as created: UNPAID, no payment.
func checkUnpaid(t *testing.T, s *postgres.Store, o *lapse.Order) {
	t.Helper()
	ctx := context.Background()
	got, err := s.OrderGet(ctx, o.OrderNo)
	trs, _ := s.TransitionList(ctx, o.ID)
	ps, _ := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID})
	if err != nil || got.State != flows.Unpaid || got.Version != 1 || len(trs) != 1 || len(ps) != 0 {
		t.Errorf("order %s: %+v, %v, %d transitions, payments %+v; want it UNPAID as created", o.OrderNo, got, err, len(trs), ps)
	}
}

// Concurrent applied payments share one statement and one commit, each
// answered about its own payment: created, or stale when its order moved
// on (by a stale plan, or by the other payment of the same order, which
// waits for the next batch).
func TestPaymentBatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 10)
	var ps []*lapse.PaymentCreateParams
	for i := range 8 {
		ps = append(ps, applied(t, os[i], fmt.Sprintf("T-%d", i)))
	}
	stale := applied(t, os[8], "T-8")
	stale.Transition.FromVersion = 7
	ps = append(ps, stale, applied(t, os[9], "T-9a"), applied(t, os[9], "T-9b"))

	got := queueAll(t, s, ps)
	for i := range 8 {
		a := got[i]
		if a.err != nil || !a.created || a.pay.ID == 0 || a.pay.TxnID != ps[i].Payment.TxnID || a.pay.OrderID != os[i].ID ||
			a.pay.Status != lapse.PaymentApplied || string(a.pay.Raw) != string(ps[i].Payment.Raw) || !a.pay.PaidAt.Equal(ps[i].Payment.PaidAt) {
			t.Errorf("payment %d: %+v; want it created as given", i, a)
		}
		checkPaid(t, s, os[i], ps[i].Payment.TxnID)
	}
	if a := got[8]; !errors.Is(a.err, lapse.ErrStale) {
		t.Errorf("payment of a stale plan: %+v; want ErrStale", a)
	}
	checkUnpaid(t, s, os[8])
	a, b := got[9], got[10]
	if a.created == b.created || (!a.created && !errors.Is(a.err, lapse.ErrStale)) || (!b.created && !errors.Is(b.err, lapse.ErrStale)) {
		t.Errorf("two payments of one order: %+v and %+v; want one created, the other ErrStale", a, b)
	}
	winner := "T-9a"
	if b.created {
		winner = "T-9b"
	}
	checkPaid(t, s, os[9], winner)
	if n := xmins(t, s); n != 1 {
		t.Errorf("the batch's 9 payments were written by %d transactions; want 1", n)
	}
}

// A batch whose statement fails (a payment that exists meets the unique
// key) fails no one else: each call is decided alone, and the one whose
// payment exists is answered with it, its order unmoved.
func TestPaymentBatchStatementFails(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 6)
	first := applied(t, os[5], "T-X")
	first.Payment.OrderID, first.Payment.OrderNo = os[0].ID, os[0].OrderNo
	first.Payment.Status, first.Payment.Reason, first.Transition = lapse.PaymentLate, "order closed", nil
	exists, created, err := s.PaymentCreate(context.Background(), first)
	if err != nil || !created {
		t.Fatalf("PaymentCreate(T-X) = %v, %v", created, err)
	}
	var ps []*lapse.PaymentCreateParams
	for i := 1; i < 5; i++ {
		ps = append(ps, applied(t, os[i], fmt.Sprintf("T-%d", i)))
	}
	ps = append(ps, applied(t, os[5], "T-X"))
	got := queueAll(t, s, ps)
	for i := range 4 {
		if a := got[i]; a.err != nil || !a.created || a.pay.TxnID != ps[i].Payment.TxnID {
			t.Errorf("payment %d beside a payment that exists: %+v; want it created", i, a)
		}
		checkPaid(t, s, os[i+1], ps[i].Payment.TxnID)
	}
	if a := got[4]; a.err != nil || a.created || a.pay.ID != exists.ID || a.pay.OrderID != os[0].ID {
		t.Errorf("payment that exists: %+v; want the one recorded (id %d), not created", a, exists.ID)
	}
	checkUnpaid(t, s, os[5])
}

// A call whose context ends while it waits for its batch leaves, writing
// nothing, unavailable as a call that waited for a pool connection past its
// deadline is, and the batch goes on without it.
func TestPaymentBatchCancel(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 3)
	ctx, cancel := context.WithCancel(context.Background())
	ps := []*lapse.PaymentCreateParams{applied(t, os[0], "T-0"), applied(t, os[1], "T-1"), applied(t, os[2], "T-2")}
	queued, release := postgres.HoldPaymentBatches(s)
	var wg sync.WaitGroup
	var left error
	wg.Go(func() { _, _, left = s.PaymentCreate(ctx, ps[0]) })
	for queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	if !errors.Is(left, context.Canceled) || !errors.Is(left, lapse.ErrStoreUnavailable) {
		t.Errorf("PaymentCreate with its context ended while queued = %v; want context.Canceled, as ErrStoreUnavailable (it waited for capacity)", left)
	}
	if n := queued(); n != 0 {
		t.Errorf("%d calls queued after the only one left", n)
	}
	release()
	got := queueAll(t, s, ps[1:])
	for i, a := range got {
		if a.err != nil || !a.created {
			t.Errorf("payment %d after another left: %+v; want it created", i+1, a)
		}
		checkPaid(t, s, os[i+1], ps[i+1].Payment.TxnID)
	}
	checkUnpaid(t, s, os[0])
}

// Concurrent reads of orders share a statement, each answered with an
// order of its own: the same order twice is two orders, and one that does
// not exist is ErrOrderNotFound beside those that do.
func TestOrderGetBatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 4)
	nos := []string{"B-0", "B-1", "B-2", "B-3", "B-0", "B-9"}
	queued, release := postgres.HoldOrderReads(s)
	got := make([]*lapse.Order, len(nos))
	errs := make([]error, len(nos))
	var wg sync.WaitGroup
	for i, no := range nos {
		wg.Go(func() { got[i], errs[i] = s.OrderGet(context.Background(), no) })
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(nos); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads queued", queued(), len(nos))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for i, no := range nos[:5] {
		if errs[i] != nil || got[i].OrderNo != no || got[i].ID != os[i%4].ID || got[i].Version != 1 || got[i].State != flows.Unpaid {
			t.Errorf("OrderGet(%s) = %+v, %v; want it as created", no, got[i], errs[i])
		}
	}
	if got[0] == got[4] {
		t.Errorf("two reads of B-0 were answered with one *Order")
	}
	if !errors.Is(errs[5], lapse.ErrOrderNotFound) {
		t.Errorf("OrderGet(B-9) = %+v, %v; want ErrOrderNotFound", got[5], errs[5])
	}
}

// Concurrent reads of API keys share a statement, the same key many times
// over, each answered with a key of its own; a revoked key reads revoked,
// and one that does not exist is ErrAccessNotFound beside those that do.
func TestAPIKeyGetBatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	ctx := context.Background()
	for _, p := range []string{"k1", "k2"} {
		if _, err := s.APIKeyCreate(ctx, &lapse.APIKey{Prefix: p, Name: "key " + p, Scopes: []string{"orders:write", "orders:read"},
			Hash: []byte("hash-" + p), CreatedAt: batchBase, CreatedBy: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.APIKeyRevoke(ctx, "k2", batchBase.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	prefixes := []string{"k1", "k1", "k2", "k1", "nope"}
	queued, release := postgres.HoldKeyReads(s)
	got := make([]*lapse.APIKey, len(prefixes))
	errs := make([]error, len(prefixes))
	var wg sync.WaitGroup
	for i, p := range prefixes {
		wg.Go(func() { got[i], errs[i] = s.APIKeyGet(ctx, p) })
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(prefixes); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads queued", queued(), len(prefixes))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for _, i := range []int{0, 1, 3} {
		if k := got[i]; errs[i] != nil || k.Prefix != "k1" || string(k.Hash) != "hash-k1" || len(k.Scopes) != 2 || !k.RevokedAt.IsZero() {
			t.Errorf("APIKeyGet(k1) = %+v, %v; want it as created", k, errs[i])
		}
	}
	if got[0] == got[1] || &got[0].Scopes[0] == &got[1].Scopes[0] || &got[0].Hash[0] == &got[1].Hash[0] {
		t.Errorf("two reads of k1 share their key, its scopes or its hash")
	}
	if k := got[2]; errs[2] != nil || k.Prefix != "k2" || !k.RevokedAt.Equal(batchBase.Add(time.Minute)) {
		t.Errorf("APIKeyGet(k2) = %+v, %v; want it revoked", k, errs[2])
	}
	if !errors.Is(errs[4], lapse.ErrAccessNotFound) {
		t.Errorf("APIKeyGet(nope) = %+v, %v; want ErrAccessNotFound", got[4], errs[4])
	}
}

// creation is the creation of order no, as the engine plans it, with an
// event for the notify subscriber.
func creation(no string, deadline *time.Time, meta string, items []lapse.Item) *lapse.OrderCreateParams {
	o := &lapse.Order{OrderNo: no, Flow: "checkout", State: flows.Unpaid, DeadlineAt: deadline, Amount: 2500, Currency: "CNY",
		UserID: "u-" + no, Items: items, Version: 1, CreatedAt: batchBase, UpdatedAt: batchBase, FiredBy: lapse.FiredByAPI,
		RequestHash: "hash-" + no + meta}
	if meta != "" {
		o.Metadata = []byte(meta)
	}
	ev := lapse.NewOutboxEvent(lapse.EventOrderCreated, o, nil)
	ev.Subscribers = []string{"notify"}
	return &lapse.OrderCreateParams{Order: o, Outbox: []lapse.OutboxEvent{ev},
		Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByAPI,
			Actor: "key:" + no, Reason: "created", CreatedAt: batchBase}}
}

// Concurrent creations share one statement and one commit, each with its
// own rows: an order_no that exists is answered with the order there, not
// created, and a second creation of one order_no in the queue waits for the
// next batch and finds the first's.
func TestOrderCreateBatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	ctx := context.Background()
	old := batchOrders(t, s, 1)[0]
	deadline := batchBase.Add(time.Hour)
	cs := []*lapse.OrderCreateParams{
		creation("N-0", &deadline, `{"b": 1,  "a": [true, null]}`, []lapse.Item{{SKU: "s-1", Qty: 2}}),
		creation("N-1", nil, "", nil),
		creation("N-2", &deadline, "", []lapse.Item{{SKU: "s-2", Qty: 1}, {SKU: "s-3", Qty: 3}}),
		creation("N-3", &deadline, `"x"`, nil),
		creation("N-0", &deadline, `{"other": true}`, nil),
		creation(old.OrderNo, &deadline, "", nil),
	}
	queued, release := postgres.HoldOrderCreates(s)
	type answer struct {
		o       *lapse.Order
		created bool
		err     error
	}
	got := make([]answer, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			o, created, err := s.OrderCreate(ctx, c)
			got[i] = answer{o, created, err}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(cs); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d creations queued", queued(), len(cs))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	firstN0 := 0
	if !got[0].created {
		firstN0 = 4
	}
	for i := range 5 {
		a, want := got[i], cs[i].Order
		if i == 0 || i == 4 {
			if a.err != nil || a.o.RequestHash != cs[firstN0].Order.RequestHash {
				t.Errorf("creation %d of N-0: %+v; want the order of creation %d", i, a, firstN0)
			}
			if i != firstN0 {
				if a.created {
					t.Errorf("two creations of N-0 both created")
				}
				continue
			}
			want = cs[firstN0].Order
		}
		if a.err != nil || !a.created || a.o.ID == 0 || a.o.OrderNo != want.OrderNo || string(a.o.Metadata) != string(want.Metadata) ||
			fmt.Sprint(a.o.Items) != fmt.Sprint(want.Items) || fmt.Sprint(a.o.DeadlineAt) != fmt.Sprint(want.DeadlineAt) ||
			a.o.UserID != want.UserID || a.o.RequestHash != want.RequestHash || a.o.Version != 1 {
			t.Errorf("creation %d: %+v; want %s created as given", i, a, want.OrderNo)
			continue
		}
		read, err := s.OrderGet(ctx, want.OrderNo)
		trs, _ := s.TransitionList(ctx, a.o.ID)
		evs, _ := s.OutboxList(ctx, a.o.ID)
		ds, _ := s.DeliveryList(ctx, a.o.ID)
		if err != nil || fmt.Sprint(*read) != fmt.Sprint(*a.o) || len(trs) != 1 || trs[0].Actor != "key:"+want.OrderNo ||
			len(evs) != 1 || evs[0].ID != cs[i].Outbox[0].ID || len(ds) != 1 || ds[0].Subscriber != "notify" {
			t.Errorf("order %s: read %+v, %v; %d transitions, %d events, %d deliveries; want it as returned with 1 of each",
				want.OrderNo, read, err, len(trs), len(evs), len(ds))
		}
	}
	if a := got[5]; a.err != nil || a.created || a.o.ID != old.ID {
		t.Errorf("creation of an order_no that exists: %+v; want order %d, not created", a, old.ID)
	}
	var n int
	if err := s.QueryRowForTest(ctx, `SELECT count(DISTINCT xmin::text) FROM orders WHERE order_no IN ('N-1', 'N-2', 'N-3')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the batch's orders were written by %d transactions; want 1", n)
	}
	var dl int
	if err := s.QueryRowForTest(ctx, `SELECT count(*) FROM order_deadlines d JOIN orders o ON o.id = d.order_id
		WHERE o.order_no LIKE 'N-%'`).Scan(&dl); err != nil || dl != 3 {
		t.Errorf("%d deadline rows of the new orders, %v; want 3 (N-1 has no deadline)", dl, err)
	}
}

// An order that another transaction holds does not hold up its batch: the
// batch writes the others' payments, and the held order's payment is
// decided alone once the lock is let go.
func TestPaymentBatchSkipsLockedOrder(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 4)
	locked, unlock, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	letGo := func() { once.Do(func() { close(unlock) }) }
	t.Cleanup(letGo) // before the store closes, which waits for the transaction's connection
	go func() {
		held <- s.Tx(context.Background(), func(tx lapse.Store) error {
			if _, err := tx.OrderLock(context.Background(), os[3].OrderNo); err != nil {
				return err
			}
			close(locked)
			<-unlock
			return nil
		})
	}()
	<-locked
	var ps []*lapse.PaymentCreateParams
	for i := range 4 {
		ps = append(ps, applied(t, os[i], fmt.Sprintf("T-%d", i)))
	}
	queued, release := postgres.HoldPaymentBatches(s)
	done := make([]chan answer, len(ps))
	for i, p := range ps {
		done[i] = make(chan answer, 1)
		go func() {
			pay, created, err := s.PaymentCreate(context.Background(), p)
			done[i] <- answer{pay, created, err}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < len(ps); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls queued", queued(), len(ps))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	for i := range 3 {
		select {
		case a := <-done[i]:
			if a.err != nil || !a.created {
				t.Errorf("payment %d beside a held order: %+v; want it created", i, a)
			}
		case <-time.After(3 * time.Second): // within the store's 5 s lock timeout, which a wait would reach
			t.Fatalf("payment %d waited for another order's lock", i)
		}
	}
	select {
	case a := <-done[3]:
		t.Fatalf("the held order's payment was answered while its order was held: %+v", a)
	default:
	}
	letGo()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if a := <-done[3]; a.err != nil || !a.created {
		t.Errorf("the held order's payment after the lock was let go: %+v; want it created", a)
	}
	for i := range 4 {
		checkPaid(t, s, os[i], ps[i].Payment.TxnID)
	}
}

// A batch's payments are answered and written as given, every column: text
// beyond ASCII, an empty merchant, a refund time and none, raw bytes that
// are not text, empty, or nil (kept empty, as raw is never NULL); the
// answer is what PaymentGet reads.
func TestPaymentBatchColumns(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 4})
	os := batchOrders(t, s, 4)
	refunded := time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -5*3600))
	var ps []*lapse.PaymentCreateParams
	for i, o := range os {
		p := applied(t, o, fmt.Sprintf("T-ü%d-\"{,}\\", i))
		p.Payment.PaidAt = p.Payment.PaidAt.Add(123456789 * time.Nanosecond)
		ps = append(ps, p)
	}
	ps[0].Payment.Merchant, ps[0].Payment.Reason, ps[0].Payment.RefundID = "", "raison ünï", "R-é"
	ps[0].Payment.RefundedAt, ps[0].Payment.Raw = &refunded, []byte{0, 0xff, '\\', '"', ','}
	ps[1].Payment.Raw = nil
	ps[2].Payment.Raw, ps[2].Payment.Currency = []byte{}, "€UR"
	got := queueAll(t, s, ps)
	if n := xmins(t, s); n != 1 {
		t.Fatalf("the batch's %d payments were written by %d transactions; want 1", len(ps), n)
	}
	for i, a := range got {
		in := ps[i].Payment
		if a.err != nil || !a.created {
			t.Errorf("payment %d: %+v; want it created", i, a)
			continue
		}
		stored, err := s.PaymentGet(context.Background(), in.Provider, in.TxnID)
		if err != nil || !reflect.DeepEqual(a.pay, stored) {
			t.Errorf("payment %d answered %+v, PaymentGet reads %+v, %v", i, a.pay, stored, err)
		}
		p := a.pay
		wantRefunded := in.RefundedAt != nil && p.RefundedAt != nil && p.RefundedAt.Equal(in.RefundedAt.Truncate(time.Microsecond)) &&
			p.RefundedAt.Location() == time.UTC
		if p.Provider != in.Provider || p.TxnID != in.TxnID || p.OrderID != in.OrderID || p.OrderNo != in.OrderNo ||
			p.Amount != in.Amount || p.Currency != in.Currency || p.Merchant != in.Merchant ||
			!p.PaidAt.Equal(in.PaidAt.Truncate(time.Microsecond)) || p.Status != in.Status || p.Reason != in.Reason ||
			p.RefundID != in.RefundID || (in.RefundedAt == nil) != (p.RefundedAt == nil) || (in.RefundedAt != nil && !wantRefunded) ||
			!bytes.Equal(p.Raw, in.Raw) || p.Raw == nil || !p.CreatedAt.Equal(in.CreatedAt) || !p.UpdatedAt.Equal(in.CreatedAt) {
			t.Errorf("payment %d: %+v; want it as given, %+v", i, p, in)
		}
	}
}
