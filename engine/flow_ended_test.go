package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
)

// shop is a user's paying flow as first written: an unpaid order closes
// at its deadline, for good.
const shop = `name: shop
initial: UNPAID
states:
  - {name: UNPAID, deadline: {after: 15m, event: TIMEOUT}}
  - {name: PAID}
  - {name: DONE, terminal: true}
  - {name: CLOSED, terminal: true}
events: [{name: PAY}, {name: SHIP}, {name: TIMEOUT, internal: true}]
pays: PAY
transitions:
  - {from: UNPAID, event: PAY, to: PAID, guard: before_deadline, emits: [order.paid]}
  - {from: UNPAID, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
  - {from: PAID, event: SHIP, to: DONE, emits: [order.shipped]}
`

// TestEndedOrderStaysEnded: a flow file changed so that a state orders
// ended in is no longer terminal, and has transitions out, moves none of
// them (S1): neither an event nor a payment reopens a closed order, and a
// payment for it is late (S2), as it was before the change.
func TestEndedOrderStaysEnded(t *testing.T) {
	t.Parallel()
	parse := func(name, yaml string) *lapse.Flow {
		t.Helper()
		f, err := flowfile.Parse(name, []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	orig := parse("shop.yaml", shop)
	reopened := parse("shop_reopened.yaml", strings.NewReplacer(
		"  - {name: CLOSED, terminal: true}\n", "  - {name: CLOSED}\n  - {name: VOID, terminal: true}\n",
		"{name: SHIP}, ", "{name: SHIP}, {name: VOID}, ",
		"  - {from: PAID, event: SHIP", "  - {from: CLOSED, event: PAY, to: PAID, emits: [order.paid]}\n"+
			"  - {from: CLOSED, event: VOID, to: VOID, emits: [order.voided]}\n  - {from: PAID, event: SHIP").Replace(shop))
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(s, []*lapse.Flow{orig}, engine.Config{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for _, no := range []string{"S-1", "S-2"} {
			create(t, e, &lapse.OrderCreate{OrderNo: no, Flow: "shop", UserID: "u", Amount: 100, Currency: "CNY", TTL: 15 * time.Minute})
			if _, err := e.Fire(ctx, no, engine.Fire{Event: "TIMEOUT", By: app}); err != nil {
				t.Fatal(err)
			}
		}

		prov := &fakeProvider{}
		e, err = engine.New(s, []*lapse.Flow{reopened}, engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}, Merchants: map[string]string{"sandbox": "m-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		// No order is open: the start's check has nothing to say.
		if err := e.CheckOpenOrders(ctx); err != nil {
			t.Fatal(err)
		}
		before, err := e.Order(ctx, "S-1")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Fire(ctx, "S-1", engine.Fire{Event: "VOID", By: app})
		if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(err.Error(), "ended in CLOSED") {
			t.Errorf("VOID of a closed order: %v; want ECONFLICT saying it ended", err)
		}
		clk.Advance(time.Minute)
		other := *before
		other.OrderNo = "S-2"
		pay, err := e.ApplyPayment(ctx, paid(&other, "txn-s2", clk.Now()))
		if err != nil || pay.Status != lapse.PaymentLate {
			t.Errorf("payment for a closed order = %+v, %v; want late", pay, err)
		}
		for _, no := range []string{"S-1", "S-2"} {
			o, err := e.Order(ctx, no)
			if err != nil {
				t.Fatal(err)
			}
			if o.State != "CLOSED" || o.ClosedAt == nil || o.Version != before.Version {
				t.Errorf("%s after the flow changed: %s, closed at %v, version %d; want CLOSED at version %d as it ended",
					no, o.State, o.ClosedAt, o.Version, before.Version)
			}
		}
	})
}
