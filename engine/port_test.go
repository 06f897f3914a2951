package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/port/porttest"
)

// TestPortHangQueryBack: a merchant port takes the request and hangs. The
// delivery is marked unknown; the next attempt asks the port, and only a
// "not applied" answer sends it again. The fake applies every request it is
// sent (no dedup of its own), so a blind resend would apply twice.
func TestPortHangQueryBack(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		for i, applies := range []bool{true, false} {
			t.Run(fmt.Sprintf("hang-applies=%v", applies), func(t *testing.T) {
				srv := porttest.NewStockServer(porttest.Options{Stock: map[string]int64{"tea": 10}, DisableDedup: true,
					Faults: porttest.Faults{HangRate: 1, HangApplies: applies}})
				t.Cleanup(srv.Close)
				p, err := port.New("stock-port", port.Config{URL: srv.URL, ReadTimeout: 300 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				clk := lapse.NewManualClock(t0.Add(time.Duration(i) * time.Hour))
				e := subsEngine(t, s, clk, engine.Subscription{Name: fmt.Sprintf("stock-port-%d", i), Events: []string{"order.created"},
					Handler: p, Timeout: 5 * time.Second, Schedule: lapse.Schedule{Steps: []time.Duration{time.Second, time.Second}}})
				d := engine.NewDeliverer(e, engine.DelivererConfig{})
				no := fmt.Sprintf("HANG-%d", i)
				req := checkout(no, time.Hour)
				req.Items = []lapse.Item{{SKU: "tea", Qty: 2}}
				create(t, e, req)

				if n, _ := d.RunOnce(ctxT(t)); n != 1 {
					t.Fatal("no attempt")
				}
				hs, _ := e.Deliveries(ctxT(t), no)
				var h engine.DeliveryHistory
				for _, x := range hs {
					if x.Subscriber == fmt.Sprintf("stock-port-%d", i) {
						h = x
					}
				}
				if h.Delivery == nil || !h.Unknown || h.Status != lapse.DeliveryPending || h.History[0].Outcome != lapse.OutcomeUnknown {
					t.Fatalf("after the hang: %+v", h.Delivery)
				}

				srv.SetFaults(porttest.Faults{}) // the port recovers
				clk.Advance(time.Second)
				if n, _ := d.RunOnce(ctxT(t)); n != 1 {
					t.Fatal("no second attempt")
				}
				hs, _ = e.Deliveries(ctxT(t), no)
				for _, x := range hs {
					if x.ID == h.ID {
						h = x
					}
				}
				want := lapse.OutcomeApplied
				if !applies {
					want = lapse.OutcomeOK
				}
				if h.Status != lapse.DeliveryDone || h.Unknown || len(h.History) != 2 || h.History[1].Outcome != want {
					t.Errorf("after the query-back: %+v, history %+v", h.Delivery, h.History)
				}
				if got := srv.Applied(h.EventID); got != 1 {
					t.Errorf("applied %d times, want once", got)
				}
				wantSent := 1
				if !applies {
					wantSent = 2
				}
				if got := srv.Sent(h.EventID); got != wantSent {
					t.Errorf("sent %d times, want %d", got, wantSent)
				}
				if st := srv.Stock("tea"); st.Reserved != 2 {
					t.Errorf("the merchant's ledger: %+v, want 2 reserved", st)
				}
			})
		}
	})
}
