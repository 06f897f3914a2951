package engine_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
)

// shipBy is the auto_refund example flow: a merchant has until the
// deadline to ship, after which the order is refunded.
const shipBy = `
name: ship_by
initial: PAID
states:
  - {name: PAID, deadline: {after: 48h, event: AUTO_REFUND}}
  - {name: SHIPPED, terminal: true}
  - {name: REFUNDED, terminal: true}
events:
  - {name: SHIP}
  - {name: CANCEL}
  - {name: NOTE}
  - {name: AUTO_REFUND, internal: true}
transitions:
  - {from: PAID, event: SHIP, to: SHIPPED, emits: [order.shipped]}
  - {from: PAID, event: CANCEL, to: REFUNDED, emits: [order.cancelled]}
  - {from: PAID, event: NOTE, to: PAID, emits: [order.noted]}
  - {from: PAID, event: AUTO_REFUND, to: REFUNDED, emits: [order.auto_refund]}
`

// TestPassedDeadlineDecides: once an order's deadline has passed, the
// deadline decides where it goes (S2). An event fired before the claimer
// comes by may not take it anywhere else: a pre-order left past its expiry
// is not submitted into a fresh payment window, a parcel shipped after the
// merchant's 48 hours does not keep the order from its refund, and a group
// whose deadline passed is charged, not cancelled. An event that takes the
// order where its deadline would, or leaves it in its state, still goes.
func TestPassedDeadlineDecides(t *testing.T) {
	f, err := flowfile.Parse("ship_by.yaml", []byte(shipBy))
	if err != nil {
		t.Fatal(err)
	}
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("decides-secret"), Clock: clk})
		e, err := engine.New(open(), append(flows.Builtin(), f), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		ext := func(ev lapse.Event) engine.Fire {
			return engine.Fire{Event: ev, External: true, By: engine.Actor{FiredBy: lapse.FiredByAPI, Name: "api"}}
		}

		mb := create(t, e, &lapse.OrderCreate{OrderNo: "MB-1", Flow: "membership", UserID: "u1", Amount: 9900, Currency: "CNY", TTL: time.Hour})
		sh := create(t, e, &lapse.OrderCreate{OrderNo: "SH-1", Flow: "ship_by", UserID: "u1", Amount: 1000, Currency: "CNY"})
		sh2 := create(t, e, &lapse.OrderCreate{OrderNo: "SH-2", Flow: "ship_by", UserID: "u1", Amount: 1000, Currency: "CNY"})
		co := create(t, e, checkout("CO-1", time.Hour))
		gb := create(t, e, &lapse.OrderCreate{OrderNo: "GB-1", Flow: "groupbuy", UserID: "olive", Amount: 990, Currency: "CNY", TTL: time.Hour})
		if _, _, err := e.JoinGroup(ctx, gb.OrderNo, engine.JoinRequest{UserID: "u-1", Provider: "sandbox", Method: "tok", By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(49 * time.Hour)

		for _, c := range []struct {
			o  *lapse.Order
			f  engine.Fire
			st lapse.State
		}{
			{mb, ext(flows.Submit), flows.PreOrder},
			{sh, ext("SHIP"), "PAID"},
			{gb, engine.Fire{Event: flows.Cancel, External: true, Group: true, By: app}, flows.GroupOpen},
		} {
			moved, err := e.Fire(ctx, c.o.OrderNo, c.f)
			if lapse.ErrorCode(err) != lapse.ECONFLICT {
				t.Errorf("%s of %s past its deadline = %v, %v; want conflict", c.f.Event, c.o.OrderNo, moved, err)
			}
			if got, err := e.Order(ctx, c.o.OrderNo); err != nil || got.State != c.st {
				t.Errorf("%s of %s past its deadline: the order is %v, %v; want %s", c.f.Event, c.o.OrderNo, got, err, c.st)
			}
		}
		// Where the deadline would take it, or nowhere: as before.
		if o, err := e.Fire(ctx, co.OrderNo, ext(flows.Cancel)); err != nil || o.State != flows.Closed {
			t.Errorf("CANCEL of an unpaid order past its deadline = %v, %v; want CLOSED", o, err)
		}
		if o, err := e.Fire(ctx, sh2.OrderNo, ext("NOTE")); err != nil || o.State != "PAID" {
			t.Errorf("NOTE, which leaves the order in its state, past its deadline = %v, %v; want PAID", o, err)
		}
		if o, err := e.Fire(ctx, sh2.OrderNo, ext("CANCEL")); err != nil || o.State != "REFUNDED" {
			t.Errorf("CANCEL, which ends the order as its deadline would, past its deadline = %v, %v; want REFUNDED", o, err)
		}

		// The claimer takes each where its deadline says.
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{Batch: 10, Workers: 1}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		for no, st := range map[string]lapse.State{mb.OrderNo: flows.Cancelled, sh.OrderNo: "REFUNDED"} {
			if got, err := e.Order(ctx, no); err != nil || got.State != st {
				t.Errorf("%s after the claimer: %v, %v; want %s", no, got, err, st)
			}
		}
		if got, err := e.Order(ctx, gb.OrderNo); err != nil || got.State == flows.GroupOpen || got.State == flows.GroupCancelled {
			t.Errorf("the group after the claimer: %v, %v; want closed, charging its member", got, err)
		}
	})
}
