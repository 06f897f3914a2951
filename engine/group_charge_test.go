package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// wrongCharger is a provider port whose charges all take another amount
// than asked: a gateway bug, or a misconfigured adapter.
type wrongCharger struct{ fakeProvider }

func (w *wrongCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return &lapse.ProviderPayment{TxnID: "wc-" + r.IdempotencyKey, OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount / 2, Currency: r.Currency, PaidAt: t0.Add(time.Minute)}, nil
}

// TestGroupChargeAnswerContradicts: a charge the provider answers with
// another amount than asked is not taken for the member's charge: the
// member is not marked charged (the group fails after its schedule, counted
// nothing), and an operator is told on the group, once.
func TestGroupChargeAnswerContradicts(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &wrongCharger{}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		create(t, e, groupReq("G-WC", time.Minute))
		if _, _, err := e.JoinGroup(ctx, "G-WC", engine.JoinRequest{UserID: "u1", Method: "tok", By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(time.Minute))
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		for _, wait := range append([]time.Duration{0}, engine.DefaultGroupRetries...) {
			clk.Advance(wait)
			drain(t, d)
		}
		g, _ := e.Group(ctx, "G-WC")
		if m := g.Members[0]; m.Status == lapse.ChargeCharged || g.Order.State != flows.GroupFailed {
			t.Errorf("G-WC is %s with u1 %+v; want FAILED, u1 not charged", g.Order.State, m)
		}
		if rs := orderReviews(t, e, "G-WC"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "4.95 CNY") {
			t.Errorf("reviews of G-WC = %+v; want one naming what the provider charged", rs)
		}
		if rec, err := e.Reconcile(ctx); err != nil || rec.GroupCharges != 0 {
			t.Errorf("Reconcile = %+v, %v; want no group charge counted", rec, err)
		}
	})
}
