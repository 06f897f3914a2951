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

// panicker is a subscriber that panics on every call, as one with a bug
// that a payload sets off would.
type panicker struct{}

func (panicker) Deliver(context.Context, *lapse.Delivery) error { panic("index out of range") }
func (panicker) DeliverMany(context.Context, []*lapse.Delivery) []error {
	panic("index out of range")
}
func (panicker) Apply(context.Context, lapse.Store, *lapse.Delivery) error {
	panic("index out of range")
}

// onlyDeliver hides DeliverMany: a subscriber of single deliveries.
type onlyDeliver struct{ panicker }

func (o onlyDeliver) Deliver(ctx context.Context, d *lapse.Delivery) error {
	return o.panicker.Deliver(ctx, d)
}

// TestDeliveryHandlerPanics: a handler that panics, outside (one delivery
// or a batch) or local, costs its attempt and not its worker: the attempt
// is recorded as failed with the panic, retried on schedule and, when it
// panics every time, dead and in review, as any failure. Otherwise the
// panic would take down every worker that claims the delivery after it,
// and the delivery would never die.
func TestDeliveryHandlerPanics(t *testing.T) {
	t.Parallel()
	clk := lapse.NewManualClock(t0)
	one := lapse.Schedule{Steps: []time.Duration{time.Minute}}
	e := subsEngine(t, openSQLite(t), clk,
		engine.Subscription{Name: "single", Events: []string{"order.closed"}, Handler: onlyDeliver{}, Schedule: one},
		engine.Subscription{Name: "batch", Events: []string{"order.closed"}, Handler: panicker{}, Schedule: one},
		engine.Subscription{Name: "local", Events: []string{"order.closed"}, Local: panicker{}, Schedule: one})
	d := engine.NewDeliverer(e, engine.DelivererConfig{})
	ctx := ctxT(t)
	create(t, e, checkout("HP-1", time.Hour))
	if _, err := e.Fire(ctx, "HP-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{0, time.Minute} {
		clk.Set(t0.Add(at))
		if n, err := d.RunOnce(ctx); n != 3 || err != nil {
			t.Fatalf("RunOnce at +%v = %d, %v; want 3", at, n, err)
		}
	}
	hs, err := e.Deliveries(ctx, "HP-1")
	if err != nil {
		t.Fatal(err)
	}
	dead := 0
	for _, h := range hs {
		if h.EventType != flows.EventOrderClosed {
			continue
		}
		if h.Status != lapse.DeliveryDead || len(h.History) != 2 || !strings.Contains(h.LastError, "panicked: index out of range") {
			t.Errorf("%s: %+v, %d attempts; want dead after 2 attempts that panicked", h.Subscriber, h.Delivery, len(h.History))
			continue
		}
		dead++
	}
	if dead != 3 {
		t.Errorf("%d deliveries dead of their panics, want 3", dead)
	}
}
