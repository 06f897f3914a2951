package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
)

// flakyRefunds is a sandbox whose first refund under each key takes effect
// and is then answered as a gateway's 502 would be: its outcome unknown.
type flakyRefunds struct {
	*payment.Sandbox
	mu    sync.Mutex
	calls map[string]int
}

func (f *flakyRefunds) Refund(ctx context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	f.mu.Lock()
	f.calls[r.IdempotencyKey]++
	n := f.calls[r.IdempotencyKey]
	f.mu.Unlock()
	ref, err := f.Sandbox.Refund(ctx, r)
	if err == nil && n == 1 {
		return nil, fmt.Errorf("gateway: 502 bad gateway: %w", lapse.ErrUnknownOutcome)
	}
	return ref, err
}

// TestAbandonGroup: a failed group with two members charged and one
// declined is abandoned: each charged member is refunded once under a key
// of its own (a refund answered 502 is asked again under the same key, and
// the refund's delivery replayed refunds nothing more), the declined one
// released, the group ABANDONED and the books clean. A group that has not
// failed cannot be abandoned.
func TestAbandonGroup(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := &flakyRefunds{Sandbox: payment.NewSandbox(payment.SandboxConfig{Secret: []byte("s"), Clock: clk}), calls: map[string]int{}}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-AB", engine.JoinRequest{UserID: "u1", Method: "tok-u1"},
			engine.JoinRequest{UserID: "u2", Method: "tok-u2"}, engine.JoinRequest{UserID: "u3", Method: "fail"})
		if g, _ := e.Group(ctx, "G-AB"); g.Order.State != flows.GroupFailed {
			t.Fatalf("G-AB is %s, want FAILED", g.Order.State)
		}
		if amt, cur, err := e.AbandonGroupStake(ctx, "G-AB"); err != nil || amt != 2*990 || cur != "CNY" {
			t.Errorf("AbandonGroupStake = %d %s, %v; want what the two charged members paid", amt, cur, err)
		}

		// Not failed: refused, nothing changed.
		create(t, e, groupReq("G-OPEN", time.Hour))
		if _, err := e.AbandonGroup(ctx, "G-OPEN", "", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("AbandonGroup of an open group = %v, want ECONFLICT", err)
		}
		if g, _ := e.Group(ctx, "G-OPEN"); g.Order.State != flows.GroupOpen {
			t.Errorf("G-OPEN is %s after a refused abandon", g.Order.State)
		}
		// Not through the events API.
		if _, err := e.Fire(ctx, "G-AB", engine.Fire{Event: flows.Abandon, By: operator, External: true, Group: true}); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("ABANDON through the group events API = %v, want EINVALID", err)
		}

		if _, err := e.AbandonGroup(ctx, "G-AB", "u3's card is declined for good", operator); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		drain(t, d) // both refunds answered 502: the members stay refunding
		ms := members(t, e, "G-AB")
		if ms["u1"].Status != lapse.ChargeRefunding || ms["u2"].Status != lapse.ChargeRefunding {
			t.Errorf("after refunds answered 502: u1 %s, u2 %s; want refunding", ms["u1"].Status, ms["u2"].Status)
		}
		for range 3 {
			clk.Advance(10 * time.Minute)
			drain(t, d)
		}
		// The refund's delivery replayed.
		for _, s := range e.Subscriptions() {
			if s.Name == engine.GroupRefundSubscriber {
				if err := s.Handler.Deliver(ctx, &lapse.Delivery{OrderNo: "G-AB", EventType: flows.EventGroupAbandoned}); err != nil {
					t.Errorf("replayed refund delivery: %v", err)
				}
			}
		}
		ms = members(t, e, "G-AB")
		if ms["u1"].Status != lapse.ChargeRefunded || ms["u2"].Status != lapse.ChargeRefunded || ms["u3"].Status != lapse.ChargeReleased {
			t.Errorf("members: u1 %s, u2 %s, u3 %s; want refunded, refunded, released", ms["u1"].Status, ms["u2"].Status, ms["u3"].Status)
		}
		refs := sb.Refunds()
		if len(refs) != 2 {
			t.Errorf("the provider made %d refunds, want 2: %+v", len(refs), refs)
		}
		for _, u := range []string{"u1", "u2"} {
			if n := sb.calls[lapse.GroupRefundKey(ms[u].Key)]; n < 2 {
				t.Errorf("%s's refund asked %d times under its key, want again after the 502", u, n)
			}
		}
		if g, _ := e.Group(ctx, "G-AB"); g.Order.State != flows.GroupAbandoned {
			t.Errorf("G-AB is %s, want ABANDONED", g.Order.State)
		}
		if _, err := e.AbandonGroup(ctx, "G-AB", "", operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("AbandonGroup again = %v, want ECONFLICT", err)
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || tot == nil || tot.Captured != 2*990 || tot.Refunded != 2*990 || tot.Review != 0 || tot.Open != 0 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want both charges refunded, no issue", rec, tot, err)
		}
	})
}

// TestAbandonGroupDisputeNotOurs: while an abandoned group's refund of a
// member is under way, a dispute's withdrawal of that member's charge, for
// the whole amount, is not taken for the abandoning's own refund: the
// member stays refunding (Lapse's refund is still asked), and the dispute
// goes on the group's desk, for the money may go back twice.
func TestAbandonGroupDisputeNotOurs(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := &flakyRefunds{Sandbox: payment.NewSandbox(payment.SandboxConfig{Secret: []byte("s"), Clock: clk}), calls: map[string]int{}}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		settleThrough(t, e, clk, "G-DS", engine.JoinRequest{UserID: "u1", Method: "tok-u1"}, engine.JoinRequest{UserID: "u3", Method: "fail"})
		if _, err := e.AbandonGroup(ctx, "G-DS", "u3's card is declined for good", operator); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{})) // the refund answered 502: u1 refunding
		m := members(t, e, "G-DS")["u1"]
		if m.Status != lapse.ChargeRefunding {
			t.Fatalf("u1 is %s, want refunding", m.Status)
		}
		reviews := func() int {
			rs, err := e.Reviews(ctx, &lapse.ReviewListParams{})
			if err != nil {
				t.Fatal(err)
			}
			return len(rs)
		}
		before := reviews()
		_, err = e.ApplyPayment(ctx, &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticeRefunded, TxnID: m.TxnID, RefundID: "dp_1",
			Amount: m.Amount, Currency: m.Currency, PaidAt: clk.Now(), Review: "Stripe dispute dp_1 lost: the bank took the money back"})
		if err != nil {
			t.Fatalf("a dispute's withdrawal of u1's charge: %v", err)
		}
		if got := members(t, e, "G-DS")["u1"]; got.Status != lapse.ChargeRefunding {
			t.Errorf("u1 after a dispute's withdrawal = %s, want still refunding (the dispute is not Lapse's refund)", got.Status)
		}
		if after := reviews(); after != before+1 {
			t.Errorf("reviews: %d before the dispute, %d after; want one more", before, after)
		}
	})
}
