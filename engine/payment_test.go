package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	lapsehttp "github.com/lapsehq/lapse/http"
	"github.com/lapsehq/lapse/payment"
)

// fakeProvider is a payment provider that refunds what it is asked to, once
// per idempotency key, and counts every refund it makes.
type fakeProvider struct {
	mu      sync.Mutex
	refunds map[string]*lapse.RefundRequest
	calls   int
	fail    error                      // returned by Refund when set
	status  lapse.ProviderRefundStatus // of new refunds; default succeeded
	// answer, when set, changes what the provider reports about a refund
	// (to Refund and RefundQuery alike): a provider at odds with Lapse.
	answer func(r *lapse.RefundRequest, ref *lapse.ProviderRefund)
	lose   map[string]bool // orders whose next refund answer is lost after the refund is made

	paidAt   map[string]time.Time // orders the customer paid at the provider, by order_no
	closeErr error                // returned by Close when set
	closes   int
	hold     chan struct{} // when set, Close waits for it to close
}

func (f *fakeProvider) Refund(_ context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return nil, f.fail
	}
	if f.refunds == nil {
		f.refunds = map[string]*lapse.RefundRequest{}
	}
	if _, ok := f.refunds[r.IdempotencyKey]; !ok {
		f.refunds[r.IdempotencyKey] = r
	}
	if f.lose[r.OrderNo] {
		delete(f.lose, r.OrderNo)
		return nil, fmt.Errorf("fake: refund %s: %w", r.IdempotencyKey, lapse.ErrUnknownOutcome)
	}
	return f.refund(r.IdempotencyKey), nil
}

func (f *fakeProvider) refund(key string) *lapse.ProviderRefund {
	r := f.refunds[key]
	st := f.status
	if st == "" {
		st = lapse.RefundSucceeded
	}
	ref := &lapse.ProviderRefund{RefundID: "re-" + key, TxnID: r.TxnID, Amount: r.Amount, Status: st}
	if f.answer != nil {
		f.answer(r, ref)
	}
	return ref
}

func (f *fakeProvider) RefundQuery(_ context.Context, key string) (*lapse.ProviderRefund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refunds[key] == nil {
		return nil, lapse.ErrProviderNotFound
	}
	return f.refund(key), nil
}

func (f *fakeProvider) Charge(context.Context, *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return nil, errors.New("fake: no charges")
}

func (f *fakeProvider) Query(context.Context, string) (*lapse.ProviderPayment, error) {
	return nil, lapse.ErrProviderNotFound
}

func (f *fakeProvider) Close(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	if f.closeErr != nil {
		return nil, f.closeErr
	}
	if at, ok := f.paidAt[orderNo]; ok {
		return &lapse.ProviderPayment{TxnID: "txn-" + orderNo, OrderNo: orderNo, Status: lapse.ProviderPaid, Amount: 1000,
			Currency: "CNY", Merchant: "m-1", PaidAt: at}, nil
	}
	return &lapse.ProviderPayment{OrderNo: orderNo, Status: lapse.ProviderClosed}, nil
}

func (f *fakeProvider) refunded() (n int, total int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.refunds {
		n++
		total += r.Amount
	}
	return n, total
}

func paymentEngine(t *testing.T, s lapse.Store, clk lapse.Clock, prov lapse.PaymentProvider) *engine.Engine {
	t.Helper()
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk,
		Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}, Merchants: map[string]string{"sandbox": "m-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func paid(o *lapse.Order, txn string, at time.Time) *lapse.PaymentNotice {
	return &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: txn, OrderNo: o.OrderNo, Amount: o.Amount,
		Currency: o.Currency, Merchant: "m-1", PaidAt: at, Raw: []byte(`{}`)}
}

// drain runs the deliverer until nothing is due at the clock's time.
func drain(t *testing.T, d *engine.Deliverer) {
	t.Helper()
	for range 20 {
		n, err := d.RunOnce(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("deliveries still due after 20 rounds")
}

func TestApplyPayment(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)

		// In time: the order is PAID through its flow, with one transition.
		a := create(t, e, checkout("PA-1", 15*time.Minute))
		clk.Advance(time.Minute)
		pay, err := e.ApplyPayment(ctx, paid(a, "txn-a", clk.Now()))
		if err != nil || pay.Status != lapse.PaymentApplied {
			t.Fatalf("ApplyPayment in time = %+v, %v", pay, err)
		}
		into, events, trs := history(t, e, "PA-1")
		if into[flows.Paid] != 1 || events[flows.EventOrderPaid] != 1 || trs[len(trs)-1].FiredBy != lapse.FiredByPayment {
			t.Errorf("PA-1 after payment: %v %v %+v", into, events, trs[len(trs)-1])
		}
		// The same callback again (and again): nothing changes.
		for range 3 {
			again, err := e.ApplyPayment(ctx, paid(a, "txn-a", clk.Now()))
			if err != nil || again.ID != pay.ID || again.Status != lapse.PaymentApplied {
				t.Errorf("ApplyPayment replayed = %+v, %v", again, err)
			}
		}
		if into, _, _ := history(t, e, "PA-1"); into[flows.Paid] != 1 {
			t.Errorf("replays moved the order: %v", into)
		}

		// A second payment of a paid order is late, and refunded once.
		second, err := e.ApplyPayment(ctx, paid(a, "txn-a2", clk.Now()))
		if err != nil || second.Status != lapse.PaymentLate {
			t.Fatalf("second payment = %+v, %v; want late", second, err)
		}

		// Paid (at the provider) after the deadline, while the order is
		// still UNPAID: late, and the order stays UNPAID for the closer.
		b := create(t, e, checkout("PA-2", time.Minute))
		lateAt := b.DeadlineAt.Add(time.Millisecond)
		clk.Advance(2 * time.Minute)
		late, err := e.ApplyPayment(ctx, paid(b, "txn-b", lateAt))
		if err != nil || late.Status != lapse.PaymentLate || late.Reason == "" {
			t.Fatalf("payment past the deadline = %+v, %v; want late with a reason", late, err)
		}
		if o, _ := e.Order(ctx, "PA-2"); o.State != flows.Unpaid {
			t.Errorf("a late payment moved PA-2 to %s", o.State)
		}
		// Paid a millisecond before the deadline but reported after it: in
		// time, by the provider's clock.
		c := create(t, e, checkout("PA-3", time.Minute))
		clk.Advance(2 * time.Minute)
		ok, err := e.ApplyPayment(ctx, paid(c, "txn-c", c.DeadlineAt.Add(-time.Millisecond)))
		if err != nil || ok.Status != lapse.PaymentApplied {
			t.Errorf("payment made in time, reported late = %+v, %v; want applied", ok, err)
		}
		// For a CLOSED order: late.
		dd := create(t, e, checkout("PA-4", time.Minute))
		if _, err := e.Fire(ctx, "PA-4", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		closed, err := e.ApplyPayment(ctx, paid(dd, "txn-d", clk.Now()))
		if err != nil || closed.Status != lapse.PaymentLate {
			t.Errorf("payment of a closed order = %+v, %v; want late", closed, err)
		}
		if o, _ := e.Order(ctx, "PA-4"); o.State != flows.Closed {
			t.Errorf("PA-4 is %s after a late payment", o.State)
		}

		// For an unknown order: held without its order (held_payment_test.go),
		// no payment recorded.
		unknown := paid(c, "txn-x1", clk.Now())
		unknown.OrderNo = "NOPE"
		if got, err := e.ApplyPayment(ctx, unknown); err != nil || got.Status != lapse.PaymentHeld {
			t.Errorf("payment for an unknown order = %+v, %v, want held", got, err)
		}
		if _, err := e.Store().PaymentGet(ctx, "sandbox", "txn-x1"); !errors.Is(err, lapse.ErrPaymentNotFound) {
			t.Errorf("a payment for an unknown order was recorded: %v", err)
		}
		// Not what the order asked for: recorded for an operator, the order
		// untouched, nothing refunded blindly.
		e2 := create(t, e, checkout("PA-5", time.Hour))
		for _, n := range []*lapse.PaymentNotice{
			func() *lapse.PaymentNotice { n := paid(e2, "txn-x2", clk.Now()); n.Amount++; return n }(),
			func() *lapse.PaymentNotice { n := paid(e2, "txn-x3", clk.Now()); n.Currency = "USD"; return n }(),
			func() *lapse.PaymentNotice { n := paid(e2, "txn-x4", clk.Now()); n.Merchant = "m-2"; return n }(),
			// The callback verified it but could not confirm whom it paid.
			func() *lapse.PaymentNotice {
				n := paid(e2, "txn-x5", clk.Now())
				n.Review = "names no seller"
				return n
			}(),
		} {
			p, err := e.ApplyPayment(ctx, n)
			if err != nil || p.Status != lapse.PaymentReview || p.Reason == "" || (n.Review != "" && p.Reason != n.Review) {
				t.Errorf("mismatched payment %s = %+v, %v; want review with a reason", n.TxnID, p, err)
			}
		}
		if o, _ := e.Order(ctx, "PA-5"); o.State != flows.Unpaid {
			t.Errorf("mismatched payments moved PA-5 to %s", o.State)
		}

		// The refund subscriber refunds each late payment once.
		drain(t, d)
		drain(t, d)
		if n, total := prov.refunded(); n != 3 || total != 3*a.Amount {
			t.Errorf("provider refunded %d payments, %d in all; want 3, %d", n, total, 3*a.Amount)
		}
		for _, txn := range []string{"txn-a2", "txn-b", "txn-d"} {
			p, err := e.Store().PaymentGet(ctx, "sandbox", txn)
			if err != nil || p.Status != lapse.PaymentRefunded || p.RefundedAt == nil || p.RefundID == "" {
				t.Errorf("%s after the refund subscriber: %+v, %v", txn, p, err)
			}
		}
		// The refund's own callback arrives after: nothing changes.
		n := paid(b, "txn-b", clk.Now())
		n.Kind, n.RefundID = lapse.NoticeRefunded, "re-late"
		if p, err := e.ApplyPayment(ctx, n); err != nil || p.Status != lapse.PaymentRefunded || p.RefundID == "re-late" {
			t.Errorf("refund callback after the refund = %+v, %v", p, err)
		}
		if prov.calls != 3 {
			t.Errorf("provider got %d refund calls, want 3", prov.calls)
		}
	})
}

// TestRefundProcessingAndCallback covers a provider whose refunds finish
// later: the payment is refunding until the refund's callback completes it.
func TestRefundProcessingAndCallback(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{status: lapse.RefundProcessing}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RP-1", time.Minute))
		if _, err := e.Fire(ctx, "RP-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-r", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		p, _ := e.Store().PaymentGet(ctx, "sandbox", "txn-r")
		if p.Status != lapse.PaymentRefunding || p.RefundID == "" {
			t.Fatalf("after a processing refund: %+v", p)
		}
		ds, _ := e.Deliveries(ctx, "RP-1")
		var refund *lapse.Delivery
		for _, x := range ds {
			if x.Subscriber == engine.RefundSubscriber {
				refund = x.Delivery
			}
		}
		if refund == nil || refund.Status != lapse.DeliveryPending {
			t.Fatalf("refund delivery %+v; want pending, to ask again", refund)
		}
		n := paid(o, "txn-r", clk.Now())
		n.Kind, n.RefundID = lapse.NoticeRefunded, p.RefundID
		if got, err := e.ApplyPayment(ctx, n); err != nil || got.Status != lapse.PaymentRefunded {
			t.Fatalf("refund callback = %+v, %v", got, err)
		}
		// The next attempt finds it refunded and is done, without a new refund.
		clk.Advance(time.Hour)
		drain(t, d)
		ds, _ = e.Deliveries(ctx, "RP-1")
		for _, x := range ds {
			if x.Subscriber == engine.RefundSubscriber && x.Status != lapse.DeliveryDone {
				t.Errorf("refund delivery ended %s", x.Status)
			}
		}
		if n, _ := prov.refunded(); n != 1 {
			t.Errorf("%d refunds, want 1", n)
		}
	})
}

// TestRefusalReasonsKept: why a provider refused a refund is kept on the
// books (the payment, its review row, a merchant refund), cleaned and cut to
// size, not replaced by the "internal error" the API shows callers.
func TestRefusalReasonsKept(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		why := "the card was cancelled\n\x00 by the bank " + strings.Repeat("x", 1000)
		prov := &fakeProvider{fail: fmt.Errorf("%w: %s", lapse.ErrRefused, why)}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		kept := func(what, s string) {
			t.Helper()
			if !strings.Contains(s, "the card was cancelled") || strings.ContainsAny(s, "\n\x00") || len(s) > lapse.MaxReasonLen {
				t.Errorf("%s: %q (%d bytes)", what, s, len(s))
			}
		}

		// A late payment whose refund is refused: in review, with the reason.
		o := create(t, e, checkout("RR-1", time.Minute))
		if _, err := e.Fire(ctx, "RR-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-rr", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		p, _ := e.Store().PaymentGet(ctx, "sandbox", "txn-rr")
		if p.Status != lapse.PaymentReview {
			t.Fatalf("payment %s, want review", p.Status)
		}
		kept("payment reason", p.Reason)
		rs, err := e.Store().ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
		if err != nil || len(rs) != 1 {
			t.Fatalf("reviews of RR-1: %+v, %v", rs, err)
		}
		kept("review reason", rs[0].Reason)

		// A payment that does not match its order is on the desk too.
		o2 := create(t, e, checkout("RR-2", time.Minute))
		n := paid(o2, "txn-rr2", clk.Now())
		n.Amount++
		if got, err := e.ApplyPayment(ctx, n); err != nil || got.Status != lapse.PaymentReview {
			t.Fatalf("mismatched payment = %+v, %v", got, err)
		}
		if rs, _ := e.Store().ReviewList(ctx, &lapse.ReviewListParams{OrderID: o2.ID}); len(rs) != 1 || !strings.Contains(rs[0].Reason, "txn-rr2") {
			t.Errorf("reviews of RR-2: %+v", rs)
		}

		// A merchant refund the provider refuses keeps the reason.
		o3 := create(t, e, checkout("RR-3", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(o3, "txn-rr3", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.RefundOrder(ctx, "RR-3", engine.RefundRequest{Amount: 100, By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		refunds, _ := e.OrderRefunds(ctx, "RR-3")
		if len(refunds) != 1 || refunds[0].Status != lapse.OrderRefundFailed {
			t.Fatalf("refunds of RR-3: %+v", refunds)
		}
		kept("merchant refund failure", refunds[0].Failure)
	})
}

// TestPaymentCallbacksRaceDeadline sends 1,000 signed payment callbacks
// through the HTTP API at their orders' deadlines, 1 ms either side, while
// the claimer closes; half the customers started paying before the deadline.
// No order is PAID after CLOSED or by a payment made after its window; every
// customer who started paying in time ends PAID; every payment is applied
// or refunded, once; and the books reconcile.
func TestPaymentCallbacksRaceDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		const n = 1000
		prov := &fakeProvider{paidAt: map[string]time.Time{}}
		f := flows.Checkout()
		f.Grace = time.Second
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Logger: slog.New(slog.DiscardHandler),
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		scheme := &payment.HMAC{Provider: "sandbox", Secrets: [][]byte{[]byte("race")}}
		var apiLog lockedBuffer // what the API logs at warn and above, shown when callbacks failed
		api := httptest.NewServer(lapsehttp.NewServer(e, lapsehttp.Config{Unauthenticated: true,
			Logger:    slog.New(slog.NewTextHandler(&apiLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Callbacks: map[string]lapse.PaymentCallback{"sandbox": scheme}}).Handler())
		defer api.Close()
		c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond, SweepGrace: time.Millisecond})
		c.Start(context.Background())
		defer c.Stop()
		d := engine.NewDeliverer(e, engine.DelivererConfig{Poll: 50 * time.Millisecond})
		d.Start(context.Background())
		defer d.Stop()

		// Deadlines start once every order exists: 45 s is ample when CI
		// runs every package at once on two cores (creation alone takes a
		// few seconds on an idle machine, and the wait costs no CPU).
		start := time.Now().Add(45 * time.Second)
		orders := make([]*lapse.Order, n)
		var next atomic.Int64
		var cw sync.WaitGroup
		for range 8 {
			cw.Go(func() {
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					req := checkout(orderNo("PR", i), 0)
					at := start.Add(time.Duration(i) * 2 * time.Millisecond)
					req.DeadlineAt = &at
					o, _, err := e.CreateOrder(ctxT(t), req, app)
					if err == nil && i%2 == 1 {
						o, err = e.StartPayment(ctxT(t), o.OrderNo, "sandbox", app)
					}
					if err != nil {
						t.Errorf("create %s: %v", req.OrderNo, err)
						return
					}
					orders[i] = o
				}
			})
		}
		cw.Wait()
		if t.Failed() || time.Now().After(start) {
			t.Fatalf("creating %d orders took longer than the lead time", n)
		}
		var wg sync.WaitGroup
		var retried atomic.Int64
		for i, o := range orders {
			wg.Go(func() {
				deadline := *o.DeadlineAt
				if o.PayBy != nil {
					deadline = o.PayBy.Add(-f.Grace)
				}
				at := deadline.Add(time.Duration(i%3-1) * time.Millisecond) // -1, 0, +1 ms
				body := fmt.Appendf(nil, `{"kind":"paid","txn_id":"txn-%s","order_no":%q,"amount":1000,"currency":"CNY","merchant":"m-1","paid_at":%q}`,
					o.OrderNo, o.OrderNo, at.Format(time.RFC3339Nano))
				time.Sleep(time.Until(at))
				// The customer pays: the provider knows it from now on (the
				// closer may ask it before the callback is through).
				prov.mu.Lock()
				prov.paidAt[o.OrderNo] = at
				prov.mu.Unlock()
				// Providers send a callback more than once, and again after
				// any answer but a success: a 5xx (a lock timeout on a
				// machine this loaded) is retried, as a provider would.
				for range 2 {
					for attempt := 1; ; attempt++ {
						req, _ := http.NewRequest("POST", api.URL+"/v1/payments/sandbox/callback", bytes.NewReader(body))
						req.Header.Set(payment.SignatureHeader, scheme.Sign(body, time.Now()))
						res, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Errorf("callback %s: %v", o.OrderNo, err)
							return
						}
						answer, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if res.StatusCode == http.StatusOK {
							break
						}
						if res.StatusCode < 500 || attempt == 20 {
							t.Errorf("callback %s, attempt %d: %d %s", o.OrderNo, attempt, res.StatusCode, answer)
							return
						}
						retried.Add(1)
						time.Sleep(100 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		waitNoneUnpaid(t, e, 60*time.Second)
		settled := func() bool {
			left, _ := e.Store().PaymentList(ctxT(t), &lapse.PaymentListParams{Status: lapse.PaymentLate, Limit: 1})
			return len(left) == 0
		}
		for stop := time.Now().Add(60 * time.Second); !settled() && time.Now().Before(stop); {
			time.Sleep(50 * time.Millisecond)
		}
		applied, refunded := 0, 0
		for i, o := range orders {
			cur, _ := e.Order(ctxT(t), o.OrderNo)
			pays, err := e.Payments(ctxT(t), o.OrderNo)
			if err != nil || len(pays) != 1 {
				t.Fatalf("%s has payments %v, %v; want one", o.OrderNo, pays, err)
			}
			p := pays[0]
			into, _, _ := history(t, e, o.OrderNo)
			cutoff := *o.DeadlineAt // the payment window: PayBy with an intent
			switch {
			case cur.State == flows.Paid && p.Status == lapse.PaymentApplied:
				applied++
				if into[flows.Closed] != 0 || !p.PaidAt.Before(cutoff) {
					t.Errorf("%s PAID by a payment at %v (window until %v), history %v", o.OrderNo, p.PaidAt, cutoff, into)
				}
			case cur.State == flows.Closed && p.Status == lapse.PaymentRefunded:
				refunded++
				if into[flows.Paid] != 0 {
					t.Errorf("%s CLOSED after PAID: %v", o.OrderNo, into)
				}
				if i%2 == 1 {
					t.Errorf("%s: its customer started paying in time and paid within the grace, yet it was closed and refunded (%s; paid at %v, window until %v)", o.OrderNo, p.Reason, p.PaidAt, cutoff)
				}
			default:
				t.Errorf("%s ended %s with its payment %s", o.OrderNo, cur.State, p.Status)
			}
		}
		if nr, total := prov.refunded(); nr != refunded || total != int64(refunded)*1000 {
			t.Errorf("provider refunded %d (%d in all); %d payments are refunded", nr, total, refunded)
		}
		t.Logf("%d callbacks at the deadline ±1 ms: %d applied, %d refunded; %d answered 5xx and were sent again", n, applied, refunded, retried.Load())
		if retried.Load() > 0 || t.Failed() {
			t.Logf("the API's warnings:\n%.4000s", apiLog.String())
		}
		rec, err := e.Reconcile(ctxT(t))
		if err != nil || len(rec.Issues) != 0 || rec.Payments != n {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != int64(n)*1000 || tot.Applied != int64(applied)*1000 || tot.Refunded != int64(refunded)*1000 {
			t.Errorf("reconciled totals %+v", tot)
		}
	})
}

// TestReconcile shows the reconciliation finding what does not add up: a
// payment not yet refunded, and an order paid without a payment.
func TestReconcile(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		ctx := ctxT(t)
		a := create(t, e, checkout("RC-1", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(a, "txn-1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ApplyPayment(ctx, paid(a, "txn-2", clk.Now())); err != nil { // late: a second payment
			t.Fatal(err)
		}
		create(t, e, checkout("RC-2", time.Minute))
		if _, err := e.Fire(ctx, "RC-2", engine.Fire{Event: flows.Pay, By: app}); err != nil {
			t.Fatal(err)
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, is := range rec.Issues {
			got = append(got, is.OrderNo+"/"+is.TxnID+"/"+string(is.Status))
		}
		want := []string{"RC-1/txn-2/late", "RC-2//"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("issues %v, want %v", got, want)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != 2000 || tot.Applied != 1000 || tot.Open != 1000 {
			t.Errorf("totals %+v", tot)
		}
		// Once the refund is made, only the order without a payment remains.
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		rec, _ = e.Reconcile(ctx)
		if len(rec.Issues) != 1 || rec.Issues[0].OrderNo != "RC-2" || rec.Totals["CNY"].Refunded != 1000 {
			t.Errorf("after the refund: %+v", rec)
		}
	})
}

// TestReconcileRefundDied: a late payment whose refund's delivery ran out of
// retries waits in manual review, as one the provider refused does: it is in
// the review total and no issue while its review is open, and open again
// once the review is resolved without a refund. Only that payment's refund
// counts: another late payment of the same order still in flight is open.
func TestReconcileRefundDied(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{fail: errors.New("provider down")}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		a := create(t, e, checkout("RD-1", time.Minute))
		for _, txn := range []string{"txn-1", "txn-2"} { // the second is late
			if _, err := e.ApplyPayment(ctx, paid(a, txn, clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		for range 12 { // past the whole refund schedule, about a day
			drain(t, d)
			clk.Advance(9 * time.Hour)
		}
		var dead *lapse.Delivery
		ds, _ := e.Store().DeliveryList(ctx, a.ID)
		for _, dl := range ds {
			if dl.Subscriber == engine.RefundSubscriber && dl.Status == lapse.DeliveryDead {
				dead = dl
			}
		}
		if dead == nil {
			t.Fatalf("no dead refund delivery: %+v", ds)
		}
		if p, _ := e.Store().PaymentGet(ctx, "sandbox", "txn-2"); p.Status != lapse.PaymentLate {
			t.Fatalf("txn-2 is %s, want late", p.Status)
		}
		issues := func(rec *engine.Reconciliation) []string {
			var got []string
			for _, is := range rec.Issues {
				got = append(got, is.TxnID)
			}
			return got
		}
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("with the refund in review: issues %v, %v", issues(rec), err)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != 2000 || tot.Applied != 1000 || tot.Review != 1000 || tot.Open != 0 {
			t.Errorf("with the refund in review: totals %+v", tot)
		}

		if _, err := e.ApplyPayment(ctx, paid(a, "txn-3", clk.Now())); err != nil { // late too; its refund is pending
			t.Fatal(err)
		}
		drain(t, d)
		rec, _ = e.Reconcile(ctx)
		if got := issues(rec); fmt.Sprint(got) != "[txn-3]" || rec.Totals["CNY"].Review != 1000 || rec.Totals["CNY"].Open != 1000 {
			t.Errorf("with a second late payment pending: issues %v, totals %+v", got, rec.Totals["CNY"])
		}

		rs, err := e.Store().ReviewList(ctx, &lapse.ReviewListParams{OrderID: a.ID, Open: true})
		if err != nil || len(rs) != 1 || rs[0].DeliveryID != dead.ID {
			t.Fatalf("open reviews %+v, %v", rs, err)
		}
		if _, err := e.ResolveReview(ctx, rs[0].ID, "looked at it", app); err != nil {
			t.Fatal(err)
		}
		rec, _ = e.Reconcile(ctx)
		if got := issues(rec); fmt.Sprint(got) != "[txn-2 txn-3]" || rec.Totals["CNY"].Open != 2000 {
			t.Errorf("after the review was resolved: issues %v, totals %+v", got, rec.Totals["CNY"])
		}
	})
}

// TestReconcileOverflow: totals that do not fit in an int64 are an issue,
// never a wrapped number that happens to add up. The engine takes no
// amount above lapse.MaxAmount; the orders here are as the store may hold
// them from before it did.
func TestReconcileOverflow(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := paymentEngine(t, open(), clk, &fakeProvider{})
		ctx := ctxT(t)
		for _, no := range []string{"OV-1", "OV-2"} {
			req := checkout(no, time.Minute)
			req.Amount = math.MaxInt64
			now, deadline := clk.Now(), clk.Now().Add(time.Minute)
			o := &lapse.Order{OrderNo: no, Flow: req.Flow, State: flows.Unpaid, DeadlineAt: &deadline, Amount: req.Amount,
				Currency: req.Currency, UserID: req.UserID, Version: 1, CreatedAt: now, UpdatedAt: now, FiredBy: lapse.FiredByAPI,
				RequestHash: req.Fingerprint()}
			o, _, err := e.Store().OrderCreate(ctx, &lapse.OrderCreateParams{Order: o,
				Log: lapse.TransitionRecord{ToState: flows.Unpaid, Event: lapse.EventCreate, Version: 1, FiredBy: lapse.FiredByAPI,
					Actor: "test", Reason: "created", CreatedAt: now}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := e.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tot := rec.Totals["CNY"]; !tot.Overflow || len(rec.Issues) != 1 || !strings.Contains(rec.Issues[0].Problem, "64 bits") {
			t.Fatalf("totals %+v, issues %+v", tot, rec.Issues)
		}
	})
}

// TestRefundOrder covers merchant refunds: partial, then the rest; the
// amount bound; idempotency keys; the refund's callback; and a refusal.
func TestRefundOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		refund := func(no string, amount int64, key string) (*lapse.OrderRefund, error) {
			r, _, err := e.RefundOrder(ctx, no, engine.RefundRequest{Amount: amount, Reason: "damaged", Key: key, By: app})
			return r, err
		}
		state := func(no string) lapse.State {
			o, _ := e.Order(ctx, no)
			return o.State
		}
		a := create(t, e, checkout("RO-1", time.Minute))
		if _, err := refund("RO-1", 100, ""); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("refund of an unpaid order = %v, want conflict", err)
		}
		if _, err := e.ApplyPayment(ctx, paid(a, "txn-ro1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			amount int64
			key    string
			code   string
		}{{0, "", lapse.EINVALID}, {-5, "", lapse.EINVALID}, {1001, "", lapse.ECONFLICT}, {10, "bad key!", lapse.EINVALID}} {
			if _, err := refund("RO-1", c.amount, c.key); lapse.ErrorCode(err) != c.code {
				t.Errorf("refund(%d, %q) = %v, want %s", c.amount, c.key, err, c.code)
			}
		}
		if state("RO-1") != flows.Paid {
			t.Fatalf("refusals moved RO-1 to %s", state("RO-1"))
		}
		// A partial refund: REFUNDING, then PAID again once the provider made it.
		r1, err := refund("RO-1", 400, "k-1")
		if err != nil || r1.Status != lapse.OrderRefundRequested || state("RO-1") != flows.Refunding {
			t.Fatalf("refund 400 = %+v, %v; order %s", r1, err, state("RO-1"))
		}
		again, err := refund("RO-1", 400, "k-1")
		if err != nil || again.ID != r1.ID {
			t.Errorf("the same key again = %+v, %v; want the same refund", again, err)
		}
		if _, err := refund("RO-1", 300, "k-1"); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("the same key for another amount = %v, want conflict", err)
		}
		drain(t, d)
		if state("RO-1") != flows.Paid {
			t.Errorf("after the partial refund RO-1 is %s, want PAID", state("RO-1"))
		}
		// More than is left is refused; the rest is refunded, and the order ends REFUNDED.
		if _, err := refund("RO-1", 601, ""); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("refund beyond what is left = %v, want conflict", err)
		}
		if _, err := refund("RO-1", 600, "k-2"); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if state("RO-1") != flows.Refunded {
			t.Errorf("after refunding all, RO-1 is %s", state("RO-1"))
		}
		if n, total := prov.refunded(); n != 2 || total != 1000 {
			t.Errorf("provider made %d refunds of %d in all, want 2 of 1000", n, total)
		}
		rs, _ := e.OrderRefunds(ctx, "RO-1")
		if len(rs) != 2 || rs[0].Status != lapse.OrderRefundSucceeded || rs[1].Status != lapse.OrderRefundSucceeded {
			t.Errorf("refunds %+v", rs)
		}

		// The refund's callback can settle it before the subscriber runs.
		b := create(t, e, checkout("RO-2", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(b, "txn-ro2", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, err := refund("RO-2", 1000, "k-3"); err != nil {
			t.Fatal(err)
		}
		n := paid(b, "txn-ro2", clk.Now())
		n.Kind, n.RefundID = lapse.NoticeRefunded, "k-3"
		if _, err := e.ApplyPayment(ctx, n); err != nil {
			t.Fatal(err)
		}
		if state("RO-2") != flows.Refunded {
			t.Errorf("after the refund's callback RO-2 is %s", state("RO-2"))
		}
		calls := prov.calls
		drain(t, d)
		if prov.calls != calls {
			t.Errorf("the subscriber asked the provider again after the callback settled the refund")
		}

		// Refused by the provider: the refund failed, and the order is paid again.
		c := create(t, e, checkout("RO-3", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(c, "txn-ro3", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, err := refund("RO-3", 500, "k-4"); err != nil {
			t.Fatal(err)
		}
		prov.mu.Lock()
		prov.fail = fmt.Errorf("%w: card closed", lapse.ErrRefused)
		prov.mu.Unlock()
		drain(t, d)
		rs, _ = e.OrderRefunds(ctx, "RO-3")
		if state("RO-3") != flows.Paid || len(rs) != 1 || rs[0].Status != lapse.OrderRefundFailed {
			t.Errorf("after a refused refund: %s, %+v", state("RO-3"), rs)
		}
		// A late payment whose refund is refused goes to an operator.
		late, err := e.ApplyPayment(ctx, paid(c, "txn-ro3b", clk.Now()))
		if err != nil || late.Status != lapse.PaymentLate {
			t.Fatalf("second payment of RO-3 = %+v, %v", late, err)
		}
		drain(t, d)
		if p, _ := e.Store().PaymentGet(ctx, "sandbox", "txn-ro3b"); p.Status != lapse.PaymentReview || p.Reason == "" {
			t.Errorf("late payment with a refused refund: %+v", p)
		}

		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 0 {
			t.Fatalf("Reconcile = %+v, %v", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot.Captured != 4000 || tot.Refunded != 2000 || tot.Applied != 1000 || tot.Review != 1000 {
			t.Errorf("totals %+v", tot)
		}
	})
}

// TestAskingDoesNotBlockClosing has more orders waiting on a slow provider
// than a claim batch holds: while the provider hangs, an ordinary order due
// after them still closes on time, for the closer leases the orders it asks
// about out of the due set.
func TestAskingDoesNotBlockClosing(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		prov := &fakeProvider{hold: make(chan struct{})}
		f := flows.Checkout()
		f.Grace = 500 * time.Millisecond
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Payments: engine.PaymentConfig{
			Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for i := range 12 {
			no := orderNo("AS", i)
			create(t, e, checkout(no, 3*time.Second))
			if _, err := e.StartPayment(ctx, no, "sandbox", app); err != nil {
				t.Fatal(err)
			}
		}
		create(t, e, checkout("AS-plain", 4*time.Second))
		c := engine.NewClaimer(e, engine.ClaimerConfig{Batch: 5, MaxSleep: 50 * time.Millisecond, SweepInterval: time.Hour})
		c.Start(context.Background())
		defer c.Stop()
		defer close(prov.hold) // before Stop: the asks in flight finish
		deadline := time.Now().Add(20 * time.Second)
		for {
			if o, _ := e.Order(ctx, "AS-plain"); o.State == flows.Closed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("AS-plain was not closed while the provider hung")
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := range 12 {
			if o, _ := e.Order(ctx, orderNo("AS", i)); o.State != flows.Unpaid {
				t.Errorf("%s is %s while its provider had not answered", o.OrderNo, o.State)
			}
		}
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSweepWaitsForProviders: Sweep, like RunOnce, returns once the
// providers it asked about orders whose customer started paying have
// answered and those orders are settled. It returned while they were still
// being asked, so a caller saw the order UNPAID with a pass behind it.
func TestSweepWaitsForProviders(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{hold: make(chan struct{})}
		f := flows.Checkout()
		f.Grace = time.Second
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Clock: clk, Payments: engine.PaymentConfig{
			Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		create(t, e, checkout("SW-1", time.Second))
		if _, err := e.StartPayment(ctxT(t), "SW-1", "sandbox", app); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(time.Minute)) // past the deadline, the grace and the sweep's grace
		c := engine.NewClaimer(e, engine.ClaimerConfig{})
		go func() {
			time.Sleep(200 * time.Millisecond) // the provider answers late
			close(prov.hold)
		}()
		if _, err := c.Sweep(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if o, _ := e.Order(ctxT(t), "SW-1"); o.State != flows.Closed || o.FiredBy != lapse.FiredBySweep {
			t.Errorf("after Sweep SW-1 is %s, fired by %s; want CLOSED by the sweep once its provider said it was not paid", o.State, o.FiredBy)
		}
	})
}

// TestReconcileOrderRefundRequested: a merchant refund still requested (its
// provider's answer lost or refused by a 5xx through the whole schedule)
// may have given the money back: it is not counted applied as if no one
// had asked. While the review of its dead delivery is open it is in review,
// as a late payment's dead refund is; otherwise it is not settled, and an
// issue naming its key.
func TestReconcileOrderRefundRequested(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		e := paymentEngine(t, open(), clk, prov)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		o := create(t, e, checkout("RQ-1", time.Minute))
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-rq1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		prov.mu.Lock()
		prov.fail = fmt.Errorf("fake: 503: %w", lapse.ErrUnknownOutcome)
		prov.mu.Unlock()
		if _, _, err := e.RefundOrder(ctx, "RQ-1", engine.RefundRequest{Amount: 300, Key: "rq-k1", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		rec, err := e.Reconcile(ctx)
		if err != nil || len(rec.Issues) != 1 || !strings.Contains(rec.Issues[0].Problem, "rq-k1") || rec.Issues[0].OrderNo != "RQ-1" {
			t.Errorf("with the refund asked: Reconcile = %+v, %v; want one issue naming refund rq-k1", rec, err)
		}
		if tot := rec.Totals["CNY"]; tot == nil || tot.Captured != 1000 || tot.Applied != 700 || tot.Open != 300 {
			t.Errorf("with the refund asked: totals %+v; want 7.00 applied, 3.00 not settled", tot)
		}
		for range 12 { // past the whole refund schedule
			clk.Advance(9 * time.Hour)
			drain(t, d)
		}
		rs, err := e.Store().ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
		if err != nil || len(rs) != 1 {
			t.Fatalf("open reviews %+v, %v; want the dead refund delivery's", rs, err)
		}
		if refs, _ := e.OrderRefunds(ctx, "RQ-1"); len(refs) != 1 || refs[0].Status != lapse.OrderRefundRequested {
			t.Fatalf("refunds of RQ-1 = %+v; want rq-k1 still requested", refs)
		}
		rec, err = e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || tot.Applied != 700 || tot.Review != 300 || tot.Open != 0 {
			t.Errorf("with the refund in review: Reconcile = %+v (CNY %+v), %v; want 3.00 in review, no issue", rec, tot, err)
		}
		if _, err := e.ResolveReview(ctx, rs[0].ID, "looked at it", app); err != nil {
			t.Fatal(err)
		}
		rec, err = e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 1 || tot.Applied != 700 || tot.Open != 300 {
			t.Errorf("after the review was resolved: Reconcile = %+v (CNY %+v), %v; want 3.00 not settled, an issue", rec, tot, err)
		}
	})
}
