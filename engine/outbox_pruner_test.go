package engine_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// TestOutboxPrunerKeepsWhatIsNeeded checks the pruner through the engine:
// events whose deliveries are done go once they are older than the
// retention, with their deliveries; an event whose delivery is pending
// stays however old; the orders and their logs stay.
func TestOutboxPrunerKeepsWhatIsNeeded(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		e := subsEngine(t, s, clk, engine.Subscription{Name: "hook", Handler: &recorder{}})
		ctx := ctxT(t)
		delivered := []*lapse.Order{create(t, e, checkout("PX-1", time.Hour)), create(t, e, checkout("PX-2", time.Hour))}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		for {
			n, err := d.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		waiting := create(t, e, checkout("PX-3", time.Hour)) // delivered only later
		reg := prometheus.NewRegistry()
		p, err := engine.NewOutboxPruner(e, engine.OutboxPrunerConfig{Retention: 24 * time.Hour, Batch: 1, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		events := func(o *lapse.Order) (evs, ds int) {
			t.Helper()
			es, err1 := s.OutboxList(ctx, o.ID)
			dl, err2 := s.DeliveryList(ctx, o.ID)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			return len(es), len(dl)
		}
		for _, o := range append(delivered, waiting) {
			if n, ds := events(o); n == 0 || ds == 0 {
				t.Fatalf("%s has %d events and %d deliveries before pruning, want some of each", o.OrderNo, n, ds)
			}
		}

		clk.Advance(23 * time.Hour)
		if n, err := p.RunOnce(ctx); err != nil || n != 0 {
			t.Errorf("RunOnce within the retention = %d, %v; want nothing deleted", n, err)
		}
		clk.Advance(2 * time.Hour)
		n, err := p.RunOnce(ctx)
		if err != nil || n != 2 {
			t.Errorf("RunOnce past the retention = %d, %v; want the two delivered orders' events", n, err)
		}
		for _, o := range delivered {
			if n, ds := events(o); n != 0 || ds != 0 {
				t.Errorf("%s keeps %d events and %d deliveries past the retention", o.OrderNo, n, ds)
			}
			if log, err := s.TransitionList(ctx, o.ID); err != nil || len(log) == 0 {
				t.Errorf("%s lost its log: %d rows, %v", o.OrderNo, len(log), err)
			}
		}
		if n, ds := events(waiting); n == 0 || ds == 0 {
			t.Errorf("%s, whose delivery is pending, lost its event", waiting.OrderNo)
		}
		if got := counterValue(t, reg, "lapse_outbox_pruned_events_total"); got != 2 {
			t.Errorf("lapse_outbox_pruned_events_total = %v, want 2", got)
		}

		// Once delivered and old enough, it goes too: a started pruner
		// makes a pass at once, and Stop stops it.
		if n, err := d.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("delivering %s: RunOnce = %d, %v", waiting.OrderNo, n, err)
		}
		clk.Advance(25 * time.Hour)
		p.Start(ctx)
		defer p.Stop()
		// The pass counts once it has read to the end, after its last step.
		for until := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if n, _ := events(waiting); n == 0 && counterValue(t, reg, "lapse_outbox_prune_passes_total") >= 3 {
				break
			}
			if time.Now().After(until) {
				t.Fatalf("a started pruner has not pruned %s's delivered event in a pass within 30s", waiting.OrderNo)
			}
		}
		p.Stop()
		p.Stop()
	})
}

// TestOutboxPrunerRefusesNegatives checks that a setting below zero is an
// EINVALID error, not a default.
func TestOutboxPrunerRefusesNegatives(t *testing.T) {
	e := newEngine(t, openSQLite(t), lapse.NewManualClock(t0))
	for _, cfg := range []engine.OutboxPrunerConfig{{Retention: -time.Hour}, {Interval: -time.Second}, {Batch: -1}} {
		if _, err := engine.NewOutboxPruner(e, cfg); lapse.ErrorCode(err) != lapse.EINVALID {
			t.Errorf("NewOutboxPruner(%+v) = %v, want EINVALID", cfg, err)
		}
	}
}

// counterValue is the value of the counter name in reg, or the test fails.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
