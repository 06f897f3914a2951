package engine_test

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
)

// stall holds and releases on order.closed, so that the ledgers take
// order.closed from every flow.
const stall = `name: stall
initial: OPEN
holds: true
release_on: [order.closed]
states:
  - {name: OPEN}
  - {name: CLOSED, terminal: true}
events: [{name: CLOSE}]
transitions:
  - {from: OPEN, event: CLOSE, to: CLOSED, emits: [order.closed]}
`

// TestHoldingStrandedByFlowChange: an order that ended while its flow gave
// its stock back on an event, whose ledger deliveries still wait when the
// flow file is changed so that it no longer releases on that event, is not
// let go with its stock reserved and its coupon locked for good (S4): its
// deliveries are refused, dead, and the order is on an operator's desk;
// unless a later event of the order that the changed flow releases on
// waits for the ledger too, which then gives them back.
func TestHoldingStrandedByFlowChange(t *testing.T) {
	t.Parallel()
	parse := func(name, yaml string) *lapse.Flow {
		t.Helper()
		f, err := flowfile.Parse(name, []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// kiosk closing with order.closed and then order.released, on which
	// it releases.
	both := strings.NewReplacer("release_on: [order.closed]", "release_on: [order.released]",
		"emits: [order.closed]", "emits: [order.closed, order.released]").Replace(kiosk)
	cases := []struct {
		name     string
		was, now []*lapse.Flow
		stranded bool // else given back
	}{
		{"its close renamed", []*lapse.Flow{parse("kiosk.yaml", kiosk)},
			[]*lapse.Flow{parse("renamed.yaml", strings.ReplaceAll(kiosk, "order.closed", "order.expired"))}, true},
		{"released on another event", []*lapse.Flow{parse("kiosk.yaml", kiosk)}, []*lapse.Flow{parse("both.yaml", both)}, true},
		{"released by the next event", []*lapse.Flow{parse("both.yaml", both), parse("stall.yaml", stall)},
			[]*lapse.Flow{parse("both.yaml", strings.ReplaceAll(both, "order.closed,", "order.expired,")), parse("stall.yaml", stall)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, open func() lapse.Store) {
				s := open()
				clk := lapse.NewManualClock(t0)
				e, err := engine.New(s, c.was, engine.Config{Clock: clk, StockLedger: true, CouponLedger: true})
				if err != nil {
					t.Fatal(err)
				}
				ctx := ctxT(t)
				if _, err := e.SetStock(ctx, "tea", 10); err != nil {
					t.Fatal(err)
				}
				for _, no := range []string{"K-1", "K-2"} {
					if _, err := e.CreateCoupon(ctx, "CP-"+no); err != nil {
						t.Fatal(err)
					}
					create(t, e, &lapse.OrderCreate{OrderNo: no, Flow: "kiosk", UserID: "u", Currency: "CNY",
						Items: []lapse.Item{{SKU: "tea", Qty: 3}}, Coupon: "CP-" + no})
				}
				if _, err := e.Fire(ctx, "K-1", engine.Fire{Event: "TIMEOUT", By: app}); err != nil {
					t.Fatal(err)
				}

				e, err = engine.New(s, c.now, engine.Config{Clock: clk, StockLedger: true, CouponLedger: true})
				if err != nil {
					t.Fatal(err)
				}
				// K-2, closed under the new flow, is given back as ever.
				if _, err := e.Fire(ctx, "K-2", engine.Fire{Event: "TIMEOUT", By: app}); err != nil {
					t.Fatal(err)
				}
				drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
				var reserved int64
				k1Coupon := lapse.CouponAvailable
				if c.stranded {
					reserved, k1Coupon = 3, lapse.CouponLocked
				}
				st, err := e.Stock(ctx, "tea")
				if err != nil || st.Reserved != reserved {
					t.Errorf("tea = %+v, %v; want %d reserved", st, err, reserved)
				}
				for no, want := range map[string]lapse.CouponStatus{"CP-K-1": k1Coupon, "CP-K-2": lapse.CouponAvailable} {
					cp, _, err := e.Coupon(ctx, no)
					if err != nil || cp.Status != want {
						t.Errorf("coupon %s = %+v, %v; want %s", no, cp, err, want)
					}
				}
				hs, err := e.Deliveries(ctx, "K-1")
				if err != nil {
					t.Fatal(err)
				}
				dead := map[string]bool{}
				for _, h := range hs {
					if h.Status != lapse.DeliveryDead {
						continue
					}
					want := map[string]string{engine.StockSubscriber: "ended holding stock reserved (tea 3)", engine.CouponSubscriber: "ended holding coupon CP-K-1 locked"}[h.Subscriber]
					dead[h.Subscriber] = h.EventType == "order.closed" && strings.Contains(h.LastError, want)
					if !c.stranded || !dead[h.Subscriber] {
						t.Errorf("K-1's %s delivery of %s: dead, %q", h.Subscriber, h.EventType, h.LastError)
					}
				}
				if c.stranded && (!dead[engine.StockSubscriber] || !dead[engine.CouponSubscriber]) {
					t.Errorf("K-1's deliveries of order.closed to the ledgers are not both dead, saying what the order holds: %v", dead)
				}
				o, err := e.Order(ctx, "K-1")
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				if c.stranded {
					want = 2 // one for each ledger
				}
				rs, err := e.Reviews(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true, Limit: 10})
				if err != nil || len(rs) != want {
					t.Errorf("K-1's open reviews = %d, %v; want %d", len(rs), err, want)
				}
			})
		})
	}
}
