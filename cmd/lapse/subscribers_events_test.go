package main

import (
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestCheckEvents: an event pattern of the webhook or a broker that matches
// no event Lapse writes, a typo that used to subscribe to nothing without a
// word, is refused, naming its flag; so is an empty list, which the engine
// would take as order.*. A custom flow's events count.
func TestCheckEvents(t *testing.T) {
	custom := &lapse.Flow{Name: "shipping", Transitions: []lapse.Transition{{From: "A", Event: "SHIP", To: "B", Emits: []string{"shipment.sent"}}}}
	types := engine.EventTypes(append(flows.Builtin(), custom))
	def := func() *subscriberFlags {
		o := &options{}
		o.sf.webhookEvents, o.sf.natsEvents, o.sf.rabbitEvents = eventList(webhookSub.Events), eventList(natsSub.Events), eventList(rabbitmqSub.Events)
		return &o.sf
	}
	if err := def().checkEvents(types); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	for _, tc := range []struct {
		set  func(f *subscriberFlags)
		want string // in the error; "" for none
	}{
		{func(f *subscriberFlags) { f.webhookEvents = "order.closed,payment.*,shipment.sent,delivery.dead" }, ""},
		{func(f *subscriberFlags) { f.natsEvents = "shipment.*" }, ""},
		{func(f *subscriberFlags) { f.webhookEvents = "order.clsed" }, `--webhook-events: "order.clsed" matches none`},
		{func(f *subscriberFlags) { f.natsEvents = "order.*,ordr.*" }, `--nats-events: "ordr.*" matches none`},
		{func(f *subscriberFlags) { f.rabbitEvents = "shipment.lost" }, `--rabbitmq-events: "shipment.lost" matches none`},
		{func(f *subscriberFlags) { f.webhookEvents = " , " }, "--webhook-events: give the event types"},
	} {
		f := def()
		tc.set(f)
		err := f.checkEvents(types)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", f, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// TestCheckPorts: a merchant's stock or coupon port gives back on
// order.closed and uses up on order.paid, and receives no other event of
// an order's holdings: a flow that holds and gives back on another (a YAML
// flow's release_on: [order.expired]) would leave its stock held at the
// merchant's for ever, and is refused when a port is set.
func TestCheckPorts(t *testing.T) {
	expiring := &lapse.Flow{Name: "rental", Holds: true, ReleaseOn: []string{"order.expired"}, ConsumeOn: []string{flows.EventOrderPaid}}
	shipping := &lapse.Flow{Name: "ship", Holds: true, ReleaseOn: []string{flows.EventOrderClosed}, ConsumeOn: []string{"order.shipped"}}
	plain := &lapse.Flow{Name: "plain", ReleaseOn: nil}
	for _, tc := range []struct {
		stock, coupon string
		fs            []*lapse.Flow
		want          string // in the error; "" for none
	}{
		{"", "", []*lapse.Flow{expiring, shipping}, ""},
		{"http://stock", "", append(flows.Builtin(), plain), ""},
		{"http://stock", "", []*lapse.Flow{expiring}, "--stock-port: flow rental holds, and its release_on names order.expired"},
		{"", "http://coupons", []*lapse.Flow{shipping}, "--coupon-port: flow ship holds, and its consume_on names order.shipped"},
	} {
		f := &subscriberFlags{stockPort: tc.stock, couponPort: tc.coupon}
		err := f.checkPorts(tc.fs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", f, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
