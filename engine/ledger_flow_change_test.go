package engine_test

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
)

// TestHoldingStrandedByFlowChange: an order that ended while its flow gave
// its stock back on order.closed, whose stock delivery still waits when
// the flow file is changed (its close now emits order.expired, the event
// it releases on), is not let go with its stock reserved and its coupon
// locked for good (S4): its deliveries are refused, dead, and the order is
// on an operator's desk.
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
	orig := parse("kiosk.yaml", kiosk)
	renamed := parse("kiosk_renamed.yaml", strings.ReplaceAll(kiosk, "order.closed", "order.expired"))
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(s, []*lapse.Flow{orig}, engine.Config{Clock: clk, StockLedger: true, CouponLedger: true})
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

		e, err = engine.New(s, []*lapse.Flow{renamed}, engine.Config{Clock: clk, StockLedger: true, CouponLedger: true})
		if err != nil {
			t.Fatal(err)
		}
		// K-2, closed under the new flow, is given back as ever.
		if _, err := e.Fire(ctx, "K-2", engine.Fire{Event: "TIMEOUT", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		st, err := e.Stock(ctx, "tea")
		if err != nil {
			t.Fatal(err)
		}
		if st.Reserved != 3 {
			t.Errorf("tea reserved %d; want K-1's 3, given back by no one's guess", st.Reserved)
		}
		hs, err := e.Deliveries(ctx, "K-1")
		if err != nil {
			t.Fatal(err)
		}
		dead := map[string]bool{}
		for _, h := range hs {
			if h.EventType != "order.closed" {
				continue
			}
			want := map[string]string{engine.StockSubscriber: "ended holding stock reserved (tea 3)", engine.CouponSubscriber: "ended holding coupon CP-K-1 locked"}[h.Subscriber]
			dead[h.Subscriber] = h.Status == lapse.DeliveryDead && strings.Contains(h.LastError, want)
			if !dead[h.Subscriber] {
				t.Errorf("K-1's %s delivery of order.closed: %s, %q; want dead, saying %q", h.Subscriber, h.Status, h.LastError, want)
			}
		}
		if !dead[engine.StockSubscriber] || !dead[engine.CouponSubscriber] {
			t.Fatalf("K-1's deliveries of order.closed to the ledgers are not both dead: %v", dead)
		}
		for no, want := range map[string]lapse.CouponStatus{"CP-K-1": lapse.CouponLocked, "CP-K-2": lapse.CouponAvailable} {
			cp, _, err := e.Coupon(ctx, no)
			if err != nil || cp.Status != want {
				t.Errorf("coupon %s = %+v, %v; want %s", no, cp, err, want)
			}
		}
		o, err := e.Order(ctx, "K-1")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := e.Reviews(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true, Limit: 10})
		if err != nil || len(rs) != 2 {
			t.Errorf("K-1's open reviews = %d, %v; want one for each ledger", len(rs), err)
		}
	})
}
