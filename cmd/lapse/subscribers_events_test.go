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
