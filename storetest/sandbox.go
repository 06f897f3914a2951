package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/payment"
)

// SandboxFactory opens two handles on one fresh, migrated, empty database
// for one test, as two processes would hold them: each with connections of
// its own. A store held in memory returns itself twice. Both are closed
// when the test ends.
type SandboxFactory func(t *testing.T) (a, b lapse.SandboxStore)

// RunSandbox runs the conformance tests of lapse.SandboxStore against the
// handles made by open: the records, transactions, the order lock, and the
// sandbox gateway's rules holding across two handles.
func RunSandbox(t *testing.T, open SandboxFactory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b lapse.SandboxStore)
	}{
		{"SandboxRecords", testSandboxRecords},
		{"SandboxTxRollback", testSandboxTxRollback},
		{"SandboxOrderLock", testSandboxOrderLock},
		{"SandboxSecretKeep", testSandboxSecretKeep},
		{"SandboxRefundsConcurrent", testSandboxRefundsConcurrent},
		{"SandboxPayOrClose", testSandboxPayOrClose},
		{"SandboxKeyOfTwoOrders", testSandboxKeyOfTwoOrders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := open(t)
			tt.fn(t, a, b)
		})
	}
}

func sandboxPayment(txn, orderNo string, status lapse.ProviderPaymentStatus) *lapse.SandboxPayment {
	return &lapse.SandboxPayment{Gateway: "sandbox", ProviderPayment: lapse.ProviderPayment{TxnID: txn, OrderNo: orderNo,
		Status: status, Amount: 1000, Currency: "CNY", Merchant: "m-1"}}
}

func sameSandboxPayment(a, b *lapse.SandboxPayment) bool {
	return a.Gateway == b.Gateway && a.ProviderPayment == b.ProviderPayment && a.Refunded == b.Refunded &&
		bytes.Equal(a.Callback, b.Callback) && (a.Callback == nil) == (b.Callback == nil)
}

func txnIDs(ps []*lapse.SandboxPayment) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.TxnID)
	}
	return out
}

func testSandboxRecords(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	if _, err := a.SandboxPaymentGet(ctx, "sandbox", "sbx_nope"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("SandboxPaymentGet of an unknown txn = %v, want ErrProviderNotFound", err)
	}
	if ps, err := a.SandboxPaymentList(ctx, "sandbox", "SB-1"); err != nil || len(ps) != 0 {
		t.Errorf("SandboxPaymentList of an unknown order = %v, %v", ps, err)
	}
	p1 := sandboxPayment("sbx_1", "SB-1", lapse.ProviderPending)
	p2 := sandboxPayment("sbx_2", "SB-2", lapse.ProviderClosed)
	p2.Amount, p2.Currency = 0, ""
	p3 := sandboxPayment("sbx_3", "SB-1", lapse.ProviderPaid)
	p3.PaidAt, p3.Refunded, p3.Callback = base, 400, []byte(`{"kind":"paid","txn_id":"sbx_3"}`)
	other := sandboxPayment("sbx_1", "SB-1", lapse.ProviderPaid) // another gateway's
	other.Gateway = "other"
	for _, p := range []*lapse.SandboxPayment{p1, p2, p3, other} {
		if err := a.SandboxPaymentPut(ctx, p); err != nil {
			t.Fatalf("SandboxPaymentPut %s of %s: %v", p.TxnID, p.Gateway, err)
		}
	}
	// A new version of p1 keeps its place.
	p1.Status, p1.Callback = lapse.ProviderClosed, []byte(`{}`)
	if err := a.SandboxPaymentPut(ctx, p1); err != nil {
		t.Fatalf("SandboxPaymentPut of a new version: %v", err)
	}
	for name, s := range map[string]lapse.SandboxStore{"a": a, "b": b} {
		for _, want := range []*lapse.SandboxPayment{p1, p2, p3, other} {
			got, err := s.SandboxPaymentGet(ctx, want.Gateway, want.TxnID)
			if err != nil || !sameSandboxPayment(got, want) {
				t.Errorf("%s: SandboxPaymentGet %s of %s = %+v, %v; want %+v", name, want.TxnID, want.Gateway, got, err, want)
			}
		}
		ps, err := s.SandboxPaymentList(ctx, "sandbox", "SB-1")
		if err != nil || fmt.Sprint(txnIDs(ps)) != "[sbx_1 sbx_3]" || !sameSandboxPayment(ps[1], p3) {
			t.Errorf("%s: SandboxPaymentList of SB-1 = %v, %v; want sbx_1, sbx_3", name, txnIDs(ps), err)
		}
		ps, err = s.SandboxPaymentList(ctx, "sandbox", "")
		if err != nil || fmt.Sprint(txnIDs(ps)) != "[sbx_1 sbx_2 sbx_3]" {
			t.Errorf("%s: SandboxPaymentList of every order = %v, %v; want sbx_1, sbx_2, sbx_3", name, txnIDs(ps), err)
		}
	}
	moved := *p3
	moved.OrderNo = "SB-9"
	if err := a.SandboxPaymentPut(ctx, &moved); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("SandboxPaymentPut moving a payment to another order = %v, want an invalid error", err)
	}

	if _, err := a.SandboxChargeGet(ctx, "sandbox", "k-1"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("SandboxChargeGet of an unknown key = %v, want ErrProviderNotFound", err)
	}
	c := &lapse.SandboxCharge{Gateway: "sandbox", Key: "k-1", OrderNo: "G-1", Amount: 990, Currency: "CNY", Method: "pm_1", TxnID: "sbx_3"}
	if created, err := a.SandboxChargeCreate(ctx, c); err != nil || !created {
		t.Fatalf("SandboxChargeCreate = %v, %v", created, err)
	}
	again := *c
	again.Amount, again.TxnID = 1, "sbx_1"
	if created, err := b.SandboxChargeCreate(ctx, &again); err != nil || created {
		t.Errorf("SandboxChargeCreate under a taken key = %v, %v; want not created", created, err)
	}
	if got, err := b.SandboxChargeGet(ctx, "sandbox", "k-1"); err != nil || *got != *c {
		t.Errorf("SandboxChargeGet = %+v, %v; want %+v", got, err, c)
	}
	if _, err := b.SandboxChargeGet(ctx, "other", "k-1"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("SandboxChargeGet of another gateway = %v, want ErrProviderNotFound", err)
	}

	if _, err := a.SandboxRefundGet(ctx, "sandbox", "r-1"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("SandboxRefundGet of an unknown key = %v, want ErrProviderNotFound", err)
	}
	r1 := &lapse.SandboxRefund{Gateway: "sandbox", Key: "r-2", TxnID: "sbx_3", OrderNo: "SB-1", Amount: 300, Currency: "CNY",
		Reason: "broken", RefundID: "r-2", Status: lapse.RefundSucceeded}
	r2 := &lapse.SandboxRefund{Gateway: "sandbox", Key: "r-1", TxnID: "sbx_3", Amount: 100, RefundID: "r-1", Status: lapse.RefundSucceeded}
	for _, r := range []*lapse.SandboxRefund{r1, r2} {
		if created, err := a.SandboxRefundCreate(ctx, r); err != nil || !created {
			t.Fatalf("SandboxRefundCreate %s = %v, %v", r.Key, created, err)
		}
	}
	dup := *r1
	dup.Amount = 1
	if created, err := b.SandboxRefundCreate(ctx, &dup); err != nil || created {
		t.Errorf("SandboxRefundCreate under a taken key = %v, %v; want not created", created, err)
	}
	if got, err := b.SandboxRefundGet(ctx, "sandbox", "r-2"); err != nil || *got != *r1 {
		t.Errorf("SandboxRefundGet = %+v, %v; want %+v", got, err, r1)
	}
	rs, err := b.SandboxRefundList(ctx, "sandbox")
	if err != nil || len(rs) != 2 || *rs[0] != *r1 || *rs[1] != *r2 {
		t.Errorf("SandboxRefundList = %+v, %v; want r-2 then r-1, in the order created", rs, err)
	}
	if rs, err := b.SandboxRefundList(ctx, "other"); err != nil || len(rs) != 0 {
		t.Errorf("SandboxRefundList of another gateway = %+v, %v", rs, err)
	}

	if err := a.SandboxOrderLock(ctx, "sandbox", "SB-1"); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("SandboxOrderLock outside a transaction = %v, want an invalid error", err)
	}
}

func testSandboxTxRollback(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	boom := errors.New("boom")
	err := a.SandboxTx(ctx, func(tx lapse.SandboxStore) error {
		if err := tx.SandboxOrderLock(ctx, "sandbox", "TX-1"); err != nil {
			return err
		}
		if err := tx.SandboxPaymentPut(ctx, sandboxPayment("sbx_tx", "TX-1", lapse.ProviderPaid)); err != nil {
			return err
		}
		// A SandboxTx inside runs in the same transaction.
		err := tx.SandboxTx(ctx, func(inner lapse.SandboxStore) error {
			if _, err := inner.SandboxPaymentGet(ctx, "sandbox", "sbx_tx"); err != nil {
				return fmt.Errorf("the transaction's own payment: %w", err)
			}
			_, err := inner.SandboxChargeCreate(ctx, &lapse.SandboxCharge{Gateway: "sandbox", Key: "k-tx", OrderNo: "TX-1", Amount: 1000, Currency: "CNY", TxnID: "sbx_tx"})
			return err
		})
		if err != nil {
			return err
		}
		if _, err := tx.SandboxRefundCreate(ctx, &lapse.SandboxRefund{Gateway: "sandbox", Key: "r-tx", TxnID: "sbx_tx", Amount: 1, RefundID: "r-tx", Status: lapse.RefundSucceeded}); err != nil {
			return err
		}
		if _, err := tx.SandboxSecretKeep(ctx, "sandbox", []byte("rolled back")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("SandboxTx = %v, want fn's error", err)
	}
	if _, err := b.SandboxPaymentGet(ctx, "sandbox", "sbx_tx"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("a rolled back payment: %v", err)
	}
	if _, err := b.SandboxChargeGet(ctx, "sandbox", "k-tx"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("a rolled back charge: %v", err)
	}
	if _, err := b.SandboxRefundGet(ctx, "sandbox", "r-tx"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("a rolled back refund: %v", err)
	}
	if ps, _ := b.SandboxPaymentList(ctx, "sandbox", ""); len(ps) != 0 {
		t.Errorf("payments after a rollback: %v", txnIDs(ps))
	}
	if s, err := b.SandboxSecretKeep(ctx, "sandbox", []byte("kept")); err != nil || string(s) != "kept" {
		t.Errorf("the secret after a rolled back keep = %q, %v; want the new one", s, err)
	}
}

// testSandboxOrderLock: read-modify-writes under the lock of one order, from
// two handles at once, lose no update.
func testSandboxOrderLock(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	if err := a.SandboxPaymentPut(ctx, sandboxPayment("sbx_lock", "LK-1", lapse.ProviderPaid)); err != nil {
		t.Fatal(err)
	}
	const workers = 16
	var wg sync.WaitGroup
	var made atomic.Int32
	for i := range workers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			err := s.SandboxTx(ctx, func(tx lapse.SandboxStore) error {
				if err := tx.SandboxOrderLock(ctx, "sandbox", "LK-1"); err != nil {
					return err
				}
				p, err := tx.SandboxPaymentGet(ctx, "sandbox", "sbx_lock")
				if err != nil || p.Amount-p.Refunded < 100 {
					return err
				}
				p.Refunded += 100
				if err := tx.SandboxPaymentPut(ctx, p); err != nil {
					return err
				}
				key := fmt.Sprint("lk-", i)
				created, err := tx.SandboxRefundCreate(ctx, &lapse.SandboxRefund{Gateway: "sandbox", Key: key, TxnID: p.TxnID,
					Amount: 100, RefundID: key, Status: lapse.RefundSucceeded})
				if err == nil && created {
					made.Add(1)
				}
				return err
			})
			if err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	p, err := b.SandboxPaymentGet(ctx, "sandbox", "sbx_lock")
	rs, _ := b.SandboxRefundList(ctx, "sandbox")
	if err != nil || p.Refunded != 1000 || made.Load() != 10 || len(rs) != 10 {
		t.Errorf("after %d locked refunds of 100 from two handles: refunded %d (%v), %d refunds made, %d kept; want 1000 and 10",
			workers, p.Refunded, err, made.Load(), len(rs))
	}
}

func testSandboxSecretKeep(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			secret, err := s.SandboxSecretKeep(ctx, "sandbox", fmt.Appendf(nil, "secret-%d", i))
			if err != nil {
				t.Errorf("SandboxSecretKeep %d: %v", i, err)
			}
			got[i] = string(secret)
		})
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] || got[i] == "" {
			t.Fatalf("concurrent keepers got secrets %q, want one", got)
		}
	}
	if s, err := b.SandboxSecretKeep(ctx, "sandbox", []byte("later")); err != nil || string(s) != got[0] {
		t.Errorf("a later keeper got %q, %v; want %q", s, err, got[0])
	}
	if s, err := b.SandboxSecretKeep(ctx, "other", []byte("other's")); err != nil || string(s) != "other's" {
		t.Errorf("another gateway's secret = %q, %v", s, err)
	}
}

// sandboxes returns two sandboxes of one gateway, one on each handle, as two
// processes on one database run them.
func sandboxes(a, b lapse.SandboxStore) (*payment.Sandbox, *payment.Sandbox) {
	cfg := payment.SandboxConfig{Secret: []byte("storetest-secret"), Clock: lapse.NewManualClock(base)}
	cfg.Store = a
	sa := payment.NewSandbox(cfg)
	cfg.Store = b
	return sa, payment.NewSandbox(cfg)
}

// testSandboxRefundsConcurrent: refunds of one payment through two
// sandboxes on two handles never add up to more than was captured, and a
// refund sent to both under one key is made once.
func testSandboxRefundsConcurrent(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	sa, sb := sandboxes(a, b)
	p, err := sa.Pay(ctx, "RC-1", 1000, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	const refunds = 24 // of 100 each, 12 keys sent twice: 10 fit
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := map[string]lapse.ProviderRefund{}
	for i := range refunds {
		s := sa
		if i%2 == 1 {
			s = sb
		}
		wg.Go(func() {
			key := fmt.Sprint("rc-", i/2)
			rf, err := s.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: key, TxnID: p.TxnID, OrderNo: "RC-1", Amount: 100, Currency: "CNY"})
			switch {
			case errors.Is(err, lapse.ErrRefused):
			case err != nil:
				t.Errorf("refund %s: %v", key, err)
			default:
				mu.Lock()
				defer mu.Unlock()
				if prev, ok := made[key]; ok && prev != *rf {
					t.Errorf("refund %s made twice: %+v and %+v", key, prev, *rf)
				}
				made[key] = *rf
			}
		})
	}
	wg.Wait()
	var total int64
	for _, r := range sb.Refunds() {
		total += r.Amount
	}
	q, err := sb.Query(ctx, "RC-1")
	if len(made) != 10 || total != 1000 || len(sa.Refunds()) != 10 || err != nil || q.Status != lapse.ProviderRefunded {
		t.Errorf("%d refunds of 100 of a payment of 1000 through two handles: %d keys refunded, %d in all, refunds %+v, payment %+v (%v); want 10 of 100 and the payment refunded",
			refunds, len(made), total, sa.Refunds(), q, err)
	}
	// Each refund's callback is there for either sandbox to send again.
	if body, _ := sa.Callback(p.TxnID); !bytes.Contains(body, []byte(`"refunded"`)) {
		t.Errorf("the latest callback of a refunded payment: %s", body)
	}
}

// testSandboxPayOrClose: of a customer paying and the closer closing one
// order at once, through two handles, exactly one wins: a paid order is not
// closed, a closed one is not paid.
func testSandboxPayOrClose(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	sa, sb := sandboxes(a, b)
	for i := range 12 {
		no := fmt.Sprint("PC-", i)
		var (
			wg     sync.WaitGroup
			paid   *lapse.ProviderPayment
			payErr error
			closed *lapse.ProviderPayment
			cErr   error
		)
		wg.Go(func() { paid, payErr = sa.Pay(ctx, no, 500, "CNY") })
		wg.Go(func() { closed, cErr = sb.Close(ctx, no) })
		wg.Wait()
		switch {
		case cErr != nil:
			t.Fatalf("Close %s: %v", no, cErr)
		case payErr == nil && (closed.Status != lapse.ProviderPaid || closed.TxnID != paid.TxnID):
			t.Errorf("%s paid as %s, and Close answered %+v: want the paid payment", no, paid.TxnID, closed)
		case errors.Is(payErr, lapse.ErrRefused) && closed.Status != lapse.ProviderClosed:
			t.Errorf("%s: Pay refused (%v), and Close answered %+v: want closed", no, payErr, closed)
		case payErr != nil && !errors.Is(payErr, lapse.ErrRefused):
			t.Fatalf("Pay %s: %v", no, payErr)
		}
		if q, err := sa.Query(ctx, no); err != nil || q.Status != closed.Status {
			t.Errorf("%s: Query = %+v, %v; Close answered %s", no, q, err, closed.Status)
		}
	}
}

// testSandboxKeyOfTwoOrders: one idempotency key sent at once for charges
// of two orders, whose locks differ, makes one charge; the same charge sent
// through both handles is made once.
func testSandboxKeyOfTwoOrders(t *testing.T, a, b lapse.SandboxStore) {
	ctx := ctxT(t)
	sa, sb := sandboxes(a, b)
	for i := range 8 {
		key := fmt.Sprint("kt-", i)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, s := range []*payment.Sandbox{sa, sb} {
			wg.Go(func() {
				_, errs[j] = s.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: key, OrderNo: fmt.Sprintf("KT-%d-%d", i, j),
					Amount: 100, Currency: "CNY", Method: "pm"})
			})
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(cmpErr(errs[0], errs[1]), lapse.ErrRefused) {
			t.Errorf("key %s for two orders at once: %v and %v; want one charge and one refusal", key, errs[0], errs[1])
		}

		same := &lapse.ChargeRequest{IdempotencyKey: "same-" + key, OrderNo: "KS-" + key, Amount: 100, Currency: "CNY", Method: "pm"}
		txns := make([]string, 2)
		for j, s := range []*payment.Sandbox{sa, sb} {
			wg.Go(func() {
				r := *same
				p, err := s.Charge(ctx, &r)
				if err != nil {
					t.Errorf("charge %s: %v", r.IdempotencyKey, err)
					return
				}
				txns[j] = p.TxnID
			})
		}
		wg.Wait()
		if txns[0] != txns[1] {
			t.Errorf("one charge through two handles made payments %q", txns)
		}
	}
	if n := len(sa.Payments()); n != 16 {
		t.Errorf("%d payments, want 16: one per key", n)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
