package payment_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/storetest"
)

// The store in memory passes the conformance suite of the built-in stores.
func TestMemorySandboxStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.RunSandbox(t, func(t *testing.T) (lapse.SandboxStore, lapse.SandboxStore) {
		s := payment.NewMemorySandboxStore()
		return s, s
	})
}

// Two sandboxes on one store are one gateway, as two processes on one
// database are: what a customer paid through one is refunded, queried,
// closed and redelivered through the other, whose callbacks go to its own
// URL, and each counts its own calls.
func TestSandboxesSharingAStore(t *testing.T) {
	t.Parallel()
	store := payment.NewMemorySandboxStore()
	rcA, rcB := newCallbackReceiver(t, lapse.NewManualClock(sandboxStart)), newCallbackReceiver(t, lapse.NewManualClock(sandboxStart))
	a, _ := newSandbox(t, payment.SandboxConfig{Store: store, CallbackURL: rcA.URL})
	b, _ := newSandbox(t, payment.SandboxConfig{Store: store, CallbackURL: rcB.URL})
	ctx := context.Background()

	p, err := a.Pay(ctx, "S-1", 1000, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if q, err := b.Query(ctx, "S-1"); err != nil || *q != *p {
		t.Errorf("B's Query of A's payment = %+v, %v; want %+v", q, err, p)
	}
	rf, err := b.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "r-1", TxnID: p.TxnID, OrderNo: "S-1", Amount: 600, Currency: "USD"})
	if err != nil || rf.Amount != 600 {
		t.Fatalf("B's Refund of A's payment = %+v, %v", rf, err)
	}
	if _, err := a.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "r-2", TxnID: p.TxnID, Amount: 401}); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("A refunding more than B left: %v; want ErrRefused", err)
	}
	if again, err := a.RefundQuery(ctx, "r-1"); err != nil || *again != *rf {
		t.Errorf("A's RefundQuery of B's refund = %+v, %v; want %+v", again, err, rf)
	}
	if got := rcB.received(t); len(got) != 1 || got[0].Kind != lapse.NoticeRefunded || got[0].TxnID != p.TxnID {
		t.Errorf("B's receiver got %+v, want the refund's callback", got)
	}
	// B sends the latest callback about A's payment again, to B's URL.
	if err := b.Redeliver(ctx, p.TxnID); err != nil {
		t.Fatalf("B's Redeliver of A's payment: %v", err)
	}
	if got := rcB.received(t); len(got) != 2 || got[1].RefundID != "r-1" {
		t.Errorf("after B's Redeliver, B's receiver got %+v", got)
	}
	if got := rcA.received(t); len(got) != 1 || got[0].Kind != lapse.NoticePaid {
		t.Errorf("A's receiver got %+v, want only the paid callback", got)
	}

	// Closed through B: A takes no payment for it.
	if _, err := b.Close(ctx, "S-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pay(ctx, "S-2", 1000, "USD"); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("A's Pay of an order B closed: %v; want ErrRefused", err)
	}
	if len(a.Payments()) != 2 || len(b.Refunds()) != 1 {
		t.Errorf("payments %+v, refunds %+v; want 2 and 1, the same through both", a.Payments(), b.Refunds())
	}
	if ca, cb := a.Calls(), b.Calls(); ca.Pay != 2 || ca.Refund != 1 || cb.Refund != 1 || cb.Close != 1 || cb.Pay != 0 {
		t.Errorf("calls of A %+v and of B %+v: each its own", ca, cb)
	}

	// Another gateway on the same store does not see them.
	other := payment.NewSandbox(payment.SandboxConfig{Provider: "other", Secret: sandboxSecret, Store: store})
	if _, err := other.Query(ctx, "S-1"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("another gateway's Query: %v; want ErrProviderNotFound", err)
	}
}

// Processes that start without a secret sign with the one the store keeps:
// the first draws it; a given secret is used, and kept when none was.
func TestSandboxSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := payment.NewMemorySandboxStore()
	first, kept, err := payment.SandboxSecret(ctx, store, "sandbox", nil)
	if err != nil || len(first) < 16 || string(kept) != string(first) {
		t.Fatalf("the first secret: %q, kept %q, %v", first, kept, err)
	}
	if again, kept, err := payment.SandboxSecret(ctx, store, "sandbox", nil); err != nil || string(again) != string(first) || string(kept) != string(first) {
		t.Errorf("a second process without a secret: %q, kept %q, %v; want %q", again, kept, err, first)
	}
	if use, kept, err := payment.SandboxSecret(ctx, store, "sandbox", []byte("given")); err != nil || string(use) != "given" || string(kept) != string(first) {
		t.Errorf("a given secret after one was kept: %q, kept %q, %v; want it used, the first kept", use, kept, err)
	}
	if use, kept, err := payment.SandboxSecret(ctx, store, "other", []byte("given")); err != nil || string(use) != "given" || string(kept) != "given" {
		t.Errorf("a given secret first: %q, kept %q, %v; want it used and kept", use, kept, err)
	}
	if use, _, err := payment.SandboxSecret(ctx, store, "other", nil); err != nil || string(use) != "given" {
		t.Errorf("no secret after a given one was kept: %q, %v; want the given one", use, err)
	}
}
