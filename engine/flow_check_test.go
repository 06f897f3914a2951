package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
)

// parcel is a user's flow as first written: a parcel waits (WAIT), may be
// parked (HOLD), and either state ends at its deadline.
const parcel = `name: parcel
initial: WAIT
states:
  - {name: WAIT, deadline: {after: 1h, event: EXPIRE}}
  - {name: HOLD, deadline: {after: 1h, event: EXPIRE}}
  - {name: DONE, terminal: true}
events: [{name: GO}, {name: PARK}, {name: EXPIRE, internal: true}]
transitions:
  - {from: WAIT, event: GO, to: DONE, emits: [order.done]}
  - {from: WAIT, event: PARK, to: HOLD, emits: [order.parked]}
  - {from: WAIT, event: EXPIRE, to: DONE, emits: [order.expired]}
  - {from: HOLD, event: EXPIRE, to: DONE, emits: [order.expired]}
`

// TestCheckOpenOrders: flows changed under open orders (a state removed,
// made terminal or without its deadline, a flow removed) are refused
// before they run, naming what they would strand; orders that ended, and
// flows that still fit, are not in the way.
func TestCheckOpenOrders(t *testing.T) {
	t.Parallel()
	parse := func(name, yaml string) *lapse.Flow {
		t.Helper()
		f, err := flowfile.Parse(name, []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	orig := parse("parcel.yaml", parcel)
	noHold := parse("no_hold.yaml", strings.NewReplacer(
		"  - {name: HOLD, deadline: {after: 1h, event: EXPIRE}}\n", "",
		"  - {from: WAIT, event: PARK, to: HOLD, emits: [order.parked]}\n", "",
		"  - {from: HOLD, event: EXPIRE, to: DONE, emits: [order.expired]}\n", "",
		"{name: PARK}, ", "").Replace(parcel))
	holdEnds := parse("hold_ends.yaml", strings.NewReplacer(
		"  - {name: HOLD, deadline: {after: 1h, event: EXPIRE}}\n", "  - {name: HOLD, terminal: true}\n",
		"  - {from: HOLD, event: EXPIRE, to: DONE, emits: [order.expired]}\n", "").Replace(parcel))
	holdUntimed := parse("hold_untimed.yaml", strings.Replace(parcel,
		"  - {name: HOLD, deadline: {after: 1h, event: EXPIRE}}\n", "  - {name: HOLD}\n", 1))
	other := parse("other.yaml", strings.Replace(parcel, "name: parcel", "name: other", 1))
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		e, err := engine.New(s, []*lapse.Flow{orig}, engine.Config{Clock: lapse.NewManualClock(t0)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for _, no := range []string{"P-1", "P-2", "P-3"} {
			create(t, e, &lapse.OrderCreate{OrderNo: no, Flow: "parcel", UserID: "u", Amount: 100, Currency: "CNY", TTL: time.Hour})
		}
		for _, f := range []struct {
			no string
			ev lapse.Event
		}{{"P-2", "PARK"}, {"P-3", "GO"}} {
			if _, err := e.Fire(ctx, f.no, engine.Fire{Event: f.ev, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		check := func(flows []*lapse.Flow, want string) {
			t.Helper()
			e, err := engine.New(s, flows, engine.Config{})
			if err != nil {
				t.Fatal(err)
			}
			err = e.CheckOpenOrders(ctx)
			switch {
			case want == "" && err != nil:
				t.Errorf("flows %s: %v", flowNames(flows), err)
			case want != "" && (lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), want)):
				t.Errorf("flows %s: %v; want EINVALID naming %q", flowNames(flows), err, want)
			}
		}
		check([]*lapse.Flow{orig}, "")
		check([]*lapse.Flow{orig, other}, "")
		check([]*lapse.Flow{noHold}, "1 of flow parcel in state HOLD, which the flow no longer has (its states are WAIT, DONE)")
		check([]*lapse.Flow{holdEnds}, "1 of flow parcel in state HOLD, which is terminal now")
		check([]*lapse.Flow{holdUntimed}, "1 of flow parcel in state HOLD with a deadline, which the state no longer has")
		check([]*lapse.Flow{other}, `1 in state HOLD of flow "parcel", which is not loaded; 1 in state WAIT of flow "parcel"`)
		// Once the orders ended, the flow may go: ended orders keep their
		// history and need no flow to move them.
		for _, f := range []struct {
			no string
			ev lapse.Event
		}{{"P-1", "GO"}, {"P-2", "EXPIRE"}} {
			if _, err := e.Fire(ctx, f.no, engine.Fire{Event: f.ev, By: app}); err != nil {
				t.Fatal(err)
			}
		}
		check([]*lapse.Flow{other}, "")
	})
}

func flowNames(fs []*lapse.Flow) string {
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// kiosk is a flow that holds: an order reserves its items until it is
// taken (consumed) or its deadline closes it (released).
const kiosk = `name: kiosk
initial: UNPAID
holds: true
release_on: [order.closed]
consume_on: [order.taken]
states:
  - {name: UNPAID, deadline: {after: 1h, event: TIMEOUT}}
  - {name: CLOSED, terminal: true}
  - {name: TAKEN, terminal: true}
events: [{name: TAKE}, {name: TIMEOUT, internal: true}]
transitions:
  - {from: UNPAID, event: TAKE, to: TAKEN, emits: [order.taken]}
  - {from: UNPAID, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
`

// TestCheckOpenOrdersHolding: a flow file that stops holding (holds:
// true taken out) under open orders that reserved stock is refused before
// it runs: nothing would give their stock back as they end (S4). Orders
// without items or a coupon are not in the way.
func TestCheckOpenOrdersHolding(t *testing.T) {
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
	notHolding := parse("kiosk_free.yaml", strings.NewReplacer(
		"holds: true\n", "", "release_on: [order.closed]\n", "", "consume_on: [order.taken]\n", "").Replace(kiosk))
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		e, err := engine.New(s, []*lapse.Flow{orig}, engine.Config{Clock: lapse.NewManualClock(t0), StockLedger: true})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		if _, err := e.SetStock(ctx, "tea", 10); err != nil {
			t.Fatal(err)
		}
		create(t, e, &lapse.OrderCreate{OrderNo: "K-0", Flow: "kiosk", UserID: "u", Currency: "CNY", TTL: time.Hour})
		check := func(want string) {
			t.Helper()
			e, err := engine.New(s, []*lapse.Flow{notHolding}, engine.Config{})
			if err != nil {
				t.Fatal(err)
			}
			err = e.CheckOpenOrders(ctx)
			switch {
			case want == "" && err != nil:
				t.Errorf("kiosk no longer holding: %v", err)
			case want != "" && (lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), want)):
				t.Errorf("kiosk no longer holding: %v; want EINVALID naming %q", err, want)
			}
		}
		check("")
		create(t, e, &lapse.OrderCreate{OrderNo: "K-1", Flow: "kiosk", UserID: "u", Currency: "CNY", TTL: time.Hour,
			Items: []lapse.Item{{SKU: "tea", Qty: 3}}})
		check("1 of flow kiosk in state UNPAID with items or a coupon, which the flow no longer holds")
		// Once it ended, through the flow that gave its stock back, the
		// flow may stop holding.
		if _, err := e.Fire(ctx, "K-1", engine.Fire{Event: "TIMEOUT", By: app}); err != nil {
			t.Fatal(err)
		}
		check("")
	})
}
