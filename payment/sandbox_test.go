package payment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/payment"
)

// sandboxSecret signs every sandbox's callbacks and requests in these tests.
var sandboxSecret = []byte("sandbox-test-secret")

// sandboxStart is the time every sandbox test's clock starts at.
var sandboxStart = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// callbackReceiver is Lapse's end of the callbacks: it verifies each with
// the HMAC scheme and keeps what it verified.
type callbackReceiver struct {
	*httptest.Server
	fail atomic.Bool // answer 500 to every callback

	mu      sync.Mutex
	notices []*lapse.PaymentNotice
	errs    []error
}

func newCallbackReceiver(t *testing.T, clock lapse.Clock) *callbackReceiver {
	t.Helper()
	rc := &callbackReceiver{}
	verifier := &payment.HMAC{Provider: "sandbox", Secrets: [][]byte{sandboxSecret}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n, err := verifier.Verify(r.Header, body, clock.Now())
		rc.mu.Lock()
		if err != nil {
			rc.errs = append(rc.errs, err)
		} else {
			rc.notices = append(rc.notices, n)
		}
		rc.mu.Unlock()
		if err == nil && rc.fail.Load() {
			err = lapse.Errorf(lapse.EUNAVAILABLE, "receiver down")
		}
		verifier.Ack(w, err)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// received returns the callbacks verified so far, failing on any that did
// not verify.
func (rc *callbackReceiver) received(t *testing.T) []*lapse.PaymentNotice {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, err := range rc.errs {
		t.Errorf("a sandbox callback failed verification: %v", err)
	}
	return append([]*lapse.PaymentNotice(nil), rc.notices...)
}

// newSandbox returns a sandbox on a manual clock, with the defaults of cfg
// filled in for the tests.
func newSandbox(t *testing.T, cfg payment.SandboxConfig) (*payment.Sandbox, *lapse.ManualClock) {
	t.Helper()
	clock := lapse.NewManualClock(sandboxStart)
	cfg.Secret = sandboxSecret
	if cfg.Clock == nil {
		cfg.Clock = clock
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.NewPCG(1, 2)
	}
	return payment.NewSandbox(cfg), clock
}

func TestSandboxPaySendsVerifiedCallback(t *testing.T) {
	t.Parallel()
	clock := lapse.NewManualClock(sandboxStart)
	rc := newCallbackReceiver(t, clock)
	sb, _ := newSandbox(t, payment.SandboxConfig{Clock: clock, CallbackURL: rc.URL})
	ctx := context.Background()

	p, err := sb.Pay(ctx, "A-1", 1999, "USD")
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}
	if p.Status != lapse.ProviderPaid || p.OrderNo != "A-1" || p.Amount != 1999 || p.Currency != "USD" ||
		p.Merchant != "sandbox-merchant" || !p.PaidAt.Equal(sandboxStart) || p.TxnID == "" {
		t.Errorf("Pay returned %+v", p)
	}
	got := rc.received(t)
	if len(got) != 1 {
		t.Fatalf("%d callbacks received, want 1", len(got))
	}
	n := got[0]
	if n.Provider != "sandbox" || n.Kind != lapse.NoticePaid || n.TxnID != p.TxnID || n.OrderNo != "A-1" ||
		n.Amount != 1999 || n.Currency != "USD" || n.Merchant != p.Merchant || !n.PaidAt.Equal(p.PaidAt) {
		t.Errorf("callback %+v does not report payment %+v", n, p)
	}

	// The receiver fails: the payment stands, the callback is redelivered.
	rc.fail.Store(true)
	p2, err := sb.Pay(ctx, "A-2", 500, "EUR")
	if !errors.Is(err, payment.ErrSandboxCallback) || p2 == nil || p2.Status != lapse.ProviderPaid {
		t.Fatalf("Pay with the receiver down: %+v, %v; want the payment and ErrSandboxCallback", p2, err)
	}
	if c := sb.Calls(); c.Callbacks != 2 || c.CallbackFailures != 1 {
		t.Errorf("calls %+v; want 2 callbacks, 1 failed", c)
	}
	rc.fail.Store(false)
	clock.Advance(time.Hour) // a redelivery is signed anew, not replayed stale
	if err := sb.Redeliver(ctx, p2.TxnID); err != nil {
		t.Fatalf("Redeliver: %v", err)
	}
	if got := rc.received(t); len(got) != 3 || got[2].TxnID != p2.TxnID {
		t.Errorf("after Redeliver the receiver has %d callbacks, the last %+v", len(got), got[len(got)-1])
	}
	if err := sb.Redeliver(ctx, "sbx_nope"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("Redeliver of an unknown txn: %v; want ErrProviderNotFound", err)
	}
}

func TestSandboxCallbackReplayAndForgery(t *testing.T) {
	t.Parallel()
	sb, clock := newSandbox(t, payment.SandboxConfig{})
	p, err := sb.Pay(context.Background(), "A-1", 1999, "USD")
	if err != nil {
		t.Fatalf("Pay without a callback URL: %v", err)
	}
	body, sig := sb.Callback(p.TxnID)
	h := http.Header{}
	h.Set(payment.SignatureHeader, sig)
	n, err := sb.Verifier().Verify(h, body, clock.Now())
	if err != nil || n.TxnID != p.TxnID || n.Kind != lapse.NoticePaid {
		t.Fatalf("the sandbox's own callback: %+v, %v", n, err)
	}
	forged := []byte(string(body[:len(body)-1]) + `,"x":1}`)
	if _, err := sb.Verifier().Verify(h, forged, clock.Now()); !errors.Is(err, lapse.ErrSignature) {
		t.Errorf("a forged body verified: %v", err)
	}
	if body, sig := sb.Callback("sbx_nope"); body != nil || sig != "" {
		t.Errorf("Callback of an unknown txn: %q, %q", body, sig)
	}
	if c := sb.Calls(); c.Callbacks != 0 {
		t.Errorf("%d callbacks sent without a callback URL", c.Callbacks)
	}
}

func TestSandboxCloseThenPayRefused(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, payment.SandboxConfig{})
	ctx := context.Background()

	// An order with no payment yet: closing records the promise.
	p, err := sb.Close(ctx, "A-1")
	if err != nil || p.Status != lapse.ProviderClosed {
		t.Fatalf("Close of an unknown order: %+v, %v; want closed", p, err)
	}
	if _, err := sb.Pay(ctx, "A-1", 1999, "USD"); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Pay after Close: %v; want ErrRefused", err)
	}
	if _, err := sb.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k", OrderNo: "A-1", Amount: 1999, Currency: "USD", Method: "pm"}); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Charge after Close: %v; want ErrRefused", err)
	}

	// A started payment is closed, and stays the order's payment.
	started, err := sb.Start(ctx, "A-2", 1999, "USD")
	if err != nil || started.Status != lapse.ProviderPending {
		t.Fatalf("Start: %+v, %v", started, err)
	}
	if q, err := sb.Query(ctx, "A-2"); err != nil || q.Status != lapse.ProviderPending {
		t.Errorf("Query of a started payment: %+v, %v; want pending", q, err)
	}
	closed, err := sb.Close(ctx, "A-2")
	if err != nil || closed.Status != lapse.ProviderClosed || closed.TxnID != started.TxnID {
		t.Fatalf("Close of a started payment: %+v, %v; want %s closed", closed, err, started.TxnID)
	}
	if _, err := sb.Pay(ctx, "A-2", 1999, "USD"); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Pay after Close: %v; want ErrRefused", err)
	}
	if q, err := sb.Query(ctx, "A-2"); err != nil || q.Status != lapse.ProviderClosed {
		t.Errorf("Query after Close: %+v, %v; want closed", q, err)
	}
	if _, err := sb.Query(ctx, "A-3"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("Query of an unknown order: %v; want ErrProviderNotFound", err)
	}
}

func TestSandboxCloseAfterPayReturnsPaid(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, payment.SandboxConfig{})
	ctx := context.Background()
	if _, err := sb.Start(ctx, "A-1", 1999, "USD"); err != nil {
		t.Fatal(err)
	}
	paid, err := sb.Pay(ctx, "A-1", 1999, "USD")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Close(ctx, "A-1")
	if err != nil || p.Status != lapse.ProviderPaid || p.TxnID != paid.TxnID {
		t.Fatalf("Close after Pay: %+v, %v; want %s paid, no error", p, err, paid.TxnID)
	}
	if len(sb.Payments()) != 1 {
		t.Errorf("Pay of a started payment made %d payments, want it captured", len(sb.Payments()))
	}

	// Nothing was closed: a customer who pays again makes a second payment,
	// and Query still reports the first.
	again, err := sb.Pay(ctx, "A-1", 1999, "USD")
	if err != nil || again.TxnID == paid.TxnID {
		t.Fatalf("second Pay: %+v, %v; want a distinct payment", again, err)
	}
	if q, err := sb.Query(ctx, "A-1"); err != nil || q.TxnID != paid.TxnID {
		t.Errorf("Query of a double-paid order: %+v, %v; want the first payment %s", q, err, paid.TxnID)
	}
}

func TestSandboxChargeIdempotentUnderConcurrency(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, payment.SandboxConfig{})
	ctx := context.Background()
	req := lapse.ChargeRequest{IdempotencyKey: "charge-1", OrderNo: "G-1", Amount: 990, Currency: "CNY", Method: "pm_1"}

	const callers = 50
	txns := make([]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			r := req
			p, err := sb.Charge(ctx, &r)
			if err != nil {
				t.Errorf("Charge %d: %v", i, err)
				return
			}
			txns[i] = p.TxnID
		})
	}
	wg.Wait()
	for i, txn := range txns {
		if txn != txns[0] {
			t.Fatalf("caller %d got payment %q, caller 0 %q", i, txn, txns[0])
		}
	}
	if ps := sb.Payments(); len(ps) != 1 || ps[0].Amount != 990 || ps[0].Status != lapse.ProviderPaid {
		t.Errorf("payments after %d charges under one key: %+v; want one of 990", callers, ps)
	}
	if c := sb.Calls(); c.Charge != callers {
		t.Errorf("%d charge calls counted, want %d", c.Charge, callers)
	}

	other := req
	other.Amount = 991
	if _, err := sb.Charge(ctx, &other); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("the key reused for another amount: %v; want ErrRefused", err)
	}
	declined := req
	declined.IdempotencyKey, declined.Method = "charge-2", "fail"
	if _, err := sb.Charge(ctx, &declined); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("Charge with method fail: %v; want ErrRefused", err)
	}
	if len(sb.Payments()) != 1 {
		t.Errorf("refused charges made payments: %+v", sb.Payments())
	}
}

func TestSandboxRefundOverCaptureRefused(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, payment.SandboxConfig{})
	ctx := context.Background()
	p, err := sb.Pay(ctx, "A-1", 1000, "USD")
	if err != nil {
		t.Fatal(err)
	}
	refund := func(key string, amount int64) error {
		_, err := sb.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: key, TxnID: p.TxnID, OrderNo: "A-1", Amount: amount, Currency: "USD"})
		return err
	}
	if err := refund("r1", 600); err != nil {
		t.Fatalf("refund 600 of 1000: %v", err)
	}
	if err := refund("r2", 401); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("refund 401 with 400 left: %v; want ErrRefused", err)
	}
	if err := refund("r3", 400); err != nil {
		t.Fatalf("refund the 400 left: %v", err)
	}
	if q, _ := sb.Query(ctx, "A-1"); q.Status != lapse.ProviderRefunded {
		t.Errorf("a payment refunded in full is %s, want refunded", q.Status)
	}
	if err := refund("r4", 1); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("refund of a payment refunded in full: %v; want ErrRefused", err)
	}
	var total int64
	for _, r := range sb.Refunds() {
		total += r.Amount
	}
	if total != 1000 || len(sb.Refunds()) != 2 {
		t.Errorf("refunds %+v total %d; want 2 totalling 1000", sb.Refunds(), total)
	}
	if _, err := sb.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "r5", TxnID: "sbx_nope", Amount: 1, Currency: "USD"}); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("refund of an unknown payment: %v; want ErrRefused", err)
	}
}

func TestSandboxRefundIdempotent(t *testing.T) {
	t.Parallel()
	clock := lapse.NewManualClock(sandboxStart)
	rc := newCallbackReceiver(t, clock)
	sb, _ := newSandbox(t, payment.SandboxConfig{Clock: clock, CallbackURL: rc.URL})
	ctx := context.Background()
	p, err := sb.Pay(ctx, "A-1", 1000, "USD")
	if err != nil {
		t.Fatal(err)
	}
	req := lapse.RefundRequest{IdempotencyKey: "refund-A-1", TxnID: p.TxnID, OrderNo: "A-1", Amount: 1000, Currency: "USD", Reason: "late"}
	clock.Advance(time.Minute)
	first, err := sb.Refund(ctx, &req)
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	second, err := sb.Refund(ctx, &req)
	if err != nil || *second != *first {
		t.Fatalf("Refund again under the same key: %+v, %v; want %+v", second, err, first)
	}
	if first.RefundID != req.IdempotencyKey || first.Status != lapse.RefundSucceeded || first.Amount != 1000 {
		t.Errorf("refund %+v", first)
	}
	if len(sb.Refunds()) != 1 {
		t.Errorf("%d refunds under one key", len(sb.Refunds()))
	}
	other := req
	other.Amount = 10
	if _, err := sb.Refund(ctx, &other); !errors.Is(err, lapse.ErrRefused) {
		t.Errorf("the key reused for another amount: %v; want ErrRefused", err)
	}
	if q, err := sb.RefundQuery(ctx, req.IdempotencyKey); err != nil || *q != *first {
		t.Errorf("RefundQuery: %+v, %v; want %+v", q, err, first)
	}
	if _, err := sb.RefundQuery(ctx, "nope"); !errors.Is(err, lapse.ErrProviderNotFound) {
		t.Errorf("RefundQuery of an unknown key: %v; want ErrProviderNotFound", err)
	}

	got := rc.received(t)
	if len(got) != 2 {
		t.Fatalf("%d callbacks, want paid and one refunded", len(got))
	}
	n := got[1]
	if n.Kind != lapse.NoticeRefunded || n.RefundID != req.IdempotencyKey || n.TxnID != p.TxnID ||
		n.Amount != 1000 || !n.PaidAt.Equal(sandboxStart.Add(time.Minute)) {
		t.Errorf("refund callback %+v", n)
	}
}

func TestSandboxUnknownRateAppliesEffect(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, payment.SandboxConfig{UnknownRate: 1})
	ctx := context.Background()

	_, err := sb.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k1", OrderNo: "G-1", Amount: 990, Currency: "CNY", Method: "pm"})
	if !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Charge at UnknownRate 1: %v; want ErrUnknownOutcome", err)
	}
	p, err := sb.Query(ctx, "G-1")
	if err != nil || p.Status != lapse.ProviderPaid || p.Amount != 990 {
		t.Fatalf("Query after a charge with a lost answer: %+v, %v; want paid", p, err)
	}

	_, err = sb.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: "r1", TxnID: p.TxnID, Amount: 990, Currency: "CNY"})
	if !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Refund at UnknownRate 1: %v; want ErrUnknownOutcome", err)
	}
	if r, err := sb.RefundQuery(ctx, "r1"); err != nil || r.Status != lapse.RefundSucceeded {
		t.Errorf("RefundQuery after a refund with a lost answer: %+v, %v; want succeeded", r, err)
	}

	if _, err := sb.Close(ctx, "A-9"); !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Close at UnknownRate 1: %v; want ErrUnknownOutcome", err)
	}
	if q, err := sb.Query(ctx, "A-9"); err != nil || q.Status != lapse.ProviderClosed {
		t.Errorf("Query after a close with a lost answer: %+v, %v; want closed", q, err)
	}
}

func TestSandboxFailRateDoesNothing(t *testing.T) {
	t.Parallel()
	sb, _ := newSandbox(t, payment.SandboxConfig{FailRate: 1})
	ctx := context.Background()
	_, err := sb.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: "k1", OrderNo: "G-1", Amount: 990, Currency: "CNY", Method: "pm"})
	if err == nil || errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Charge at FailRate 1: %v; want a transient error", err)
	}
	if _, err := sb.Close(ctx, "A-1"); err == nil || errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Close at FailRate 1: %v; want a transient error", err)
	}
	if ps := sb.Payments(); len(ps) != 0 {
		t.Errorf("failed calls left payments: %+v", ps)
	}
}

func TestSandboxFailuresReplayFromTheSeed(t *testing.T) {
	t.Parallel()
	outcomes := func() string {
		sb, _ := newSandbox(t, payment.SandboxConfig{FailRate: 0.3, UnknownRate: 0.3, Rand: rand.NewPCG(7, 7)})
		s := ""
		defer func() {
			// Calls counts what was drawn, as the demo shows it.
			c := sb.Calls()
			if c.Charge != 40 || c.Failed != strings.Count(s, "x") || c.Lost != strings.Count(s, "?") {
				t.Errorf("Calls %+v after drawing %s", c, s)
			}
		}()
		for i := range 40 {
			_, err := sb.Charge(context.Background(), &lapse.ChargeRequest{IdempotencyKey: fmt.Sprint(i), OrderNo: fmt.Sprint("G-", i), Amount: 1, Currency: "CNY", Method: "pm"})
			switch {
			case err == nil:
				s += "."
			case errors.Is(err, lapse.ErrUnknownOutcome):
				s += "?"
			default:
				s += "x"
			}
		}
		return s
	}
	a, b := outcomes(), outcomes()
	if a != b {
		t.Errorf("the same seed drew %s, then %s", a, b)
	}
	for _, c := range ".?x" {
		if !strings.ContainsRune(a, c) {
			t.Errorf("40 calls at 30%% failures and 30%% lost answers drew %s: no %q", a, c)
		}
	}
}

func TestSandboxConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []payment.SandboxConfig{
		{},
		{Secret: sandboxSecret, FailRate: -0.1},
		{Secret: sandboxSecret, FailRate: 0.6, UnknownRate: 0.5},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("config %+v validated", cfg)
		}
	}
	if err := (payment.SandboxConfig{Secret: sandboxSecret, FailRate: 0.5, UnknownRate: 0.5}).Validate(); err != nil {
		t.Errorf("a valid config: %v", err)
	}
}
