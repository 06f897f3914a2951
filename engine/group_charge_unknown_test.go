package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// gatewayCharger is a provider port behind a gateway that captures every
// charge and, while failing is set, answers it with a 502 (and queries with
// a 504): plain errors, neither a refusal nor a marked unknown outcome. The
// method "declined" is declined for good, nothing captured. Asked when it
// is up, the provider reports the capture made under the key.
type gatewayCharger struct {
	fakeProvider
	clk     lapse.Clock
	mu      sync.Mutex
	failing bool
	charges map[string]*lapse.ProviderPayment // by idempotency key
	sent    int                               // charge calls
}

func (g *gatewayCharger) setFailing(v bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = v
}

func (g *gatewayCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent++
	if r.Method == "declined" {
		return nil, fmt.Errorf("gateway: charge %s: HTTP 402, refused for good: declined: %w", r.IdempotencyKey, lapse.ErrRefused)
	}
	if g.charges == nil {
		g.charges = map[string]*lapse.ProviderPayment{}
	}
	p := g.charges[r.IdempotencyKey]
	if p == nil {
		p = &lapse.ProviderPayment{TxnID: "gw-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
			Amount: r.Amount, Currency: r.Currency, PaidAt: g.clk.Now()}
		g.charges[r.IdempotencyKey] = p
	}
	if g.failing {
		return nil, fmt.Errorf("gateway: charge %s: HTTP 502 Bad Gateway", r.IdempotencyKey)
	}
	cp := *p
	return &cp, nil
}

func (g *gatewayCharger) Query(_ context.Context, key string) (*lapse.ProviderPayment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failing {
		return nil, fmt.Errorf("gateway: query %s: HTTP 504 Gateway Timeout", key)
	}
	p := g.charges[key]
	if p == nil {
		return nil, lapse.ErrProviderNotFound
	}
	cp := *p
	return &cp, nil
}

// TestGroupChargeGatewayError: a charge answered with a 5xx (or any other
// failure that is not a refusal for good) may have been captured: the
// member stays charging, the group does not settle on it, and the next
// round asks the provider under the same key rather than charge or fail
// the member on a guess. A decline fails the member's charge. A member
// whose charge is never answered through the whole schedule is left
// charging in the failed group, named by the reconciliation, and the
// provider's callback then charges it.
func TestGroupChargeGatewayError(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &gatewayCharger{clk: clk, failing: true}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		create(t, e, groupReq("G-GW", time.Minute))
		for _, u := range []string{"u1", "u2"} {
			if _, _, err := e.JoinGroup(ctx, "G-GW", engine.JoinRequest{UserID: u, Method: "tok-" + u, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		drain(t, d) // the first round: both captured, both answered 502
		g, _ := e.Group(ctx, "G-GW")
		for _, m := range g.Members {
			if m.Status != lapse.ChargeCharging {
				t.Errorf("after a 502, member %s is %s (%s); want charging, its outcome unknown", m.UserID, m.Status, m.LastError)
			}
		}
		if g.Order.State != flows.GroupClosed {
			t.Errorf("after a 502, G-GW is %s; want CLOSED, not settled nor failed on a guess", g.Order.State)
		}

		// The gateway is back: the next round asks, and finds the captures.
		prov.setFailing(false)
		clk.Advance(engine.DefaultGroupRetries[0])
		drain(t, d)
		g, _ = e.Group(ctx, "G-GW")
		if g.Order.State != flows.GroupSettled {
			t.Errorf("G-GW is %s; want SETTLED once the provider reports both captures", g.Order.State)
		}
		for _, m := range g.Members {
			if m.Status != lapse.ChargeCharged || m.TxnID != "gw-"+m.Key || m.Attempts != 1 {
				t.Errorf("member %s = %+v; want charged by the capture made under its key, in one attempt", m.UserID, m)
			}
		}
		prov.mu.Lock()
		sent, made := prov.sent, len(prov.charges)
		prov.mu.Unlock()
		if sent != 2 || made != 2 {
			t.Errorf("the provider was sent %d charges and made %d; want 2 and 2: asked, not charged again", sent, made)
		}
		rec, err := e.Reconcile(ctx)
		if tot := rec.Totals["CNY"]; err != nil || len(rec.Issues) != 0 || tot == nil || tot.Captured != 2*990 || tot.Applied != 2*990 {
			t.Errorf("Reconcile = %+v (CNY %+v), %v; want both charges applied", rec, tot, err)
		}

		// A decline is the provider's definite word: the charge fails.
		settleThrough(t, e, clk, "G-DC", engine.JoinRequest{UserID: "u3", Method: "declined"})
		g, _ = e.Group(ctx, "G-DC")
		if m := g.Members[0]; m.Status != lapse.ChargeFailed || !strings.Contains(m.LastError, "declined") || g.Order.State != flows.GroupFailed {
			t.Errorf("G-DC is %s with u3 %+v; want FAILED, u3's charge failed with the decline", g.Order.State, m)
		}

		// Answered 502 through the whole schedule: the group fails, the
		// member is still charging, and the reconciliation names it.
		prov.setFailing(true)
		settleThrough(t, e, clk, "G-LT", engine.JoinRequest{UserID: "u4", Method: "tok-u4"})
		g, _ = e.Group(ctx, "G-LT")
		m := g.Members[0]
		if m.Status != lapse.ChargeCharging || g.Order.State != flows.GroupFailed {
			t.Fatalf("G-LT is %s with u4 %+v; want FAILED, u4 charging", g.Order.State, m)
		}
		rec, err = e.Reconcile(ctx)
		if err != nil || !slices.ContainsFunc(rec.Issues, func(is engine.ReconcileIssue) bool {
			return is.OrderNo == "G-LT" && strings.Contains(is.Problem, "u4") && strings.Contains(is.Problem, m.Key)
		}) {
			t.Errorf("Reconcile = %+v, %v; want an issue naming u4's charge under key %s", rec, err, m.Key)
		}
		// The provider's callback about the capture answers it.
		prov.setFailing(false)
		pay, err := prov.Query(ctx, m.Key)
		if err != nil {
			t.Fatal(err)
		}
		acked(t, e, "the callback of a charge answered 502", &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid,
			TxnID: pay.TxnID, OrderNo: m.Key, Amount: pay.Amount, Currency: pay.Currency, PaidAt: pay.PaidAt, Raw: []byte(`{}`)})
		if u4 := members(t, e, "G-LT")["u4"]; u4.Status != lapse.ChargeCharged || u4.TxnID != pay.TxnID {
			t.Errorf("u4 = %+v; want charged by the callback's transaction %s", u4, pay.TxnID)
		}
	})
}
