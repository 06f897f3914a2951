package engine_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// holdFlow gives an order's stock back on two events: when its hold lapses
// and when it is archived afterwards. Flows may release on more than one
// event; what the second gives back is what the order still holds, nothing.
func holdFlow() *lapse.Flow {
	return &lapse.Flow{
		Name:    "hold",
		Initial: "HELD",
		States:  []lapse.StateSpec{{Name: "HELD"}, {Name: "LAPSED"}, {Name: "GONE", Terminal: true}},
		Events:  []lapse.EventSpec{{Name: "LAPSE"}, {Name: "ARCHIVE"}},
		Transitions: []lapse.Transition{
			{From: "HELD", Event: "LAPSE", To: "LAPSED", Emits: []string{"hold.lapsed"}},
			{From: "LAPSED", Event: "ARCHIVE", To: "GONE", Emits: []string{"hold.archived"}},
		},
		Holds:     true,
		ReleaseOn: []string{"hold.lapsed", "hold.archived"},
	}
}

// TestStockGivenBackOnce: an order released by two events gives its stock
// back once (S4: reserved − released − consumed = 0 per order), and the
// second release takes nothing from what another order holds.
func TestStockGivenBackOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		e, err := engine.New(open(), []*lapse.Flow{holdFlow()}, engine.Config{Clock: lapse.NewManualClock(t0), StockLedger: true})
		if err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		if _, err := e.SetStock(ctx, "tea", 10); err != nil {
			t.Fatal(err)
		}
		for no, qty := range map[string]int64{"A": 3, "B": 4} {
			req := &lapse.OrderCreate{OrderNo: no, Flow: "hold", UserID: "u1", Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: qty}}}
			create(t, e, req)
		}
		stock := func(when string, reserved int64) {
			t.Helper()
			st, err := e.Stock(ctx, "tea")
			if err != nil {
				t.Fatal(err)
			}
			if st.OnHand != 10 || st.Reserved != reserved {
				t.Fatalf("%s: tea %d on hand, %d reserved; want 10, %d", when, st.OnHand, st.Reserved, reserved)
			}
		}
		stock("created", 7)
		for i, ev := range []lapse.Event{"LAPSE", "ARCHIVE"} {
			if _, err := e.Fire(ctx, "A", engine.Fire{Event: ev, By: app}); err != nil {
				t.Fatal(err)
			}
			if n, err := d.RunOnce(ctx); err != nil || n != 1 {
				t.Fatalf("RunOnce after %s = %d, %v; want the stock delivery", ev, n, err)
			}
			stock([]string{"A lapsed", "A archived"}[i], 4)
		}
		hs, err := e.Deliveries(ctx, "A")
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Status != lapse.DeliveryDone || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeOK {
				t.Errorf("delivery %s of %s: %+v, %d attempts", h.Subscriber, h.EventType, h.Delivery, len(h.History))
			}
		}
	})
}

// TestCreateRefusedConcurrently: a creation whose stock is short, sent six
// times at once (a client's retries), is refused six times with ECONFLICT,
// and holds nothing. On MySQL the others wait for the first one's insert of
// the order number, and InnoDB broke the wait of all but one as a deadlock
// when it rolled back: they failed with an internal error.
func TestCreateRefusedConcurrently(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: lapse.NewManualClock(t0), StockLedger: true, CouponLedger: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.SetStock(ctx, "tea", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.CreateCoupon(ctx, "C1"); err != nil {
			t.Fatal(err)
		}
		for _, no := range []string{"CR-1", "CR-2", "CR-3"} {
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					req := &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: "u1", Amount: 100, Currency: "CNY",
						Items: []lapse.Item{{SKU: "tea", Qty: 5}}, Coupon: "C1"}
					if _, _, err := e.CreateOrder(ctx, req, app); lapse.ErrorCode(err) != lapse.ECONFLICT {
						t.Errorf("CreateOrder(%s) with too little stock: %v; want ECONFLICT", no, err)
					}
				})
			}
			wg.Wait()
		}
		if st, err := e.Stock(ctx, "tea"); err != nil || st.Reserved != 0 {
			t.Errorf("tea = %+v, %v; want nothing reserved", st, err)
		}
		if c, _, err := e.Coupon(ctx, "C1"); err != nil || c.Status != lapse.CouponAvailable {
			t.Errorf("coupon C1 = %+v, %v; want it available", c, err)
		}
	})
}

// TestCreateShortStockNamesItems: a creation refused because the ledger
// holds too little of a SKU is a conflict about its items, and says so in
// the error's field, as one refused for a SKU the ledger has no line of
// does, and one refused for its coupon names the coupon; whether the
// order holds stock alone or a coupon too.
func TestCreateShortStockNamesItems(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: lapse.NewManualClock(t0), StockLedger: true, CouponLedger: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.SetStock(ctx, "tea", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.CreateCoupon(ctx, "C1"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			no, coupon string
			items      []lapse.Item
		}{
			{"SH-1", "", []lapse.Item{{SKU: "tea", Qty: 2}}},
			{"SH-2", "C1", []lapse.Item{{SKU: "tea", Qty: 2}}},
			{"SH-3", "", []lapse.Item{{SKU: "tea", Qty: 1}, {SKU: "tea", Qty: 1}}},
			{"SH-4", "", []lapse.Item{{SKU: "mug", Qty: 1}}},
		} {
			req := &lapse.OrderCreate{OrderNo: c.no, Flow: "checkout", UserID: "u1", Amount: 100, Currency: "CNY", Items: c.items, Coupon: c.coupon}
			_, _, err := e.CreateOrder(ctx, req, app)
			var le *lapse.Error
			if !errors.As(err, &le) || le.Code != lapse.ECONFLICT || le.Field != "items" {
				t.Errorf("CreateOrder(%s) with too little stock = %v; want a conflict naming items", c.no, err)
			}
		}
		if st, err := e.Stock(ctx, "tea"); err != nil || st.Reserved != 0 {
			t.Errorf("tea = %+v, %v; want nothing reserved", st, err)
		}
	})
}

// TestRefundLeavesLedgersAsPaid: a refund is money going back, not goods:
// an order paid and then refunded in full (PAID → REFUNDING → REFUNDED)
// keeps its stock consumed and its coupon used, as the README says. The
// merchant restocks what comes back with PUT /v1/stock/{sku}, and gives the
// customer a new coupon if it wants to.
func TestRefundLeavesLedgersAsPaid(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk, StockLedger: true, CouponLedger: true,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &fakeProvider{}}, Merchants: map[string]string{"sandbox": "m-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		if _, err := e.SetStock(ctx, "tea", 10); err != nil {
			t.Fatal(err)
		}
		if _, err := e.CreateCoupon(ctx, "SAVE5"); err != nil {
			t.Fatal(err)
		}
		req := checkout("RL-1", 0)
		req.Items, req.Coupon = []lapse.Item{{SKU: "tea", Qty: 3}}, "SAVE5"
		o := create(t, e, req)
		if _, err := e.ApplyPayment(ctx, paid(o, "txn-rl1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if _, _, err := e.RefundOrder(ctx, "RL-1", engine.RefundRequest{Amount: o.Amount, Key: "r1", By: app}); err != nil {
			t.Fatal(err)
		}
		drain(t, d)
		if got, err := e.Order(ctx, "RL-1"); err != nil || got.State != flows.Refunded {
			t.Fatalf("order RL-1 = %+v, %v; want it refunded", got, err)
		}
		if st, err := e.Stock(ctx, "tea"); err != nil || st.OnHand != 7 || st.Reserved != 0 {
			t.Errorf("tea = %+v, %v; want 7 on hand, nothing reserved: the 3 paid for stay consumed", st, err)
		}
		if c, moves, err := e.Coupon(ctx, "SAVE5"); err != nil || c.Status != lapse.CouponUsed || c.OrderNo != "RL-1" || len(moves) != 2 {
			t.Errorf("coupon SAVE5 = %+v, %d moves, %v; want used by RL-1 (locked, consumed)", c, len(moves), err)
		}
	})
}
