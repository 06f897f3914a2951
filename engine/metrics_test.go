package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// series returns the values of the metric family name in g by their labels,
// written k=v,k=v in label order (a histogram's value is its count).
func series(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(ls, ",")] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

type idleHandler struct{}

func (idleHandler) Deliver(context.Context, *lapse.Delivery) error { return nil }

// TestStoreMetrics: the pools of the engine's store and of its work store
// are reported by name, and the pending deliveries by subscriber, with a
// zero for what a subscriber does not have.
func TestStoreMetrics(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s, work := open(), open()
		reg := prometheus.NewRegistry()
		e, err := engine.New(s, flows.Builtin(), engine.Config{Registerer: reg, WorkStore: work,
			Subscriptions: []engine.Subscription{{Name: "sink", Events: []string{"order.created"}, Handler: idleHandler{}}}})
		if err != nil {
			t.Fatal(err)
		}
		// No Deliverer runs: the deliveries stay pending.
		create(t, e, checkout("SM-1", time.Hour))
		create(t, e, checkout("SM-2", time.Hour))

		pools := []string{"main", "work"}
		if strings.Contains(t.Name(), "sqlite") {
			pools = []string{"reader", "work_reader", "work_writer", "writer"}
		}
		max := series(t, reg, "lapse_db_pool_max_connections")
		var names []string
		for k, v := range max {
			names = append(names, strings.TrimPrefix(k, "pool="))
			if v < 1 {
				t.Errorf("lapse_db_pool_max_connections{%s} = %v", k, v)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, pools) {
			t.Errorf("pools %q, want %q", names, pools)
		}
		if strings.Contains(t.Name(), "sqlite") && max["pool=writer"] != 1 {
			t.Errorf("the SQLite writer's max connections = %v, want 1", max["pool=writer"])
		}
		conns := series(t, reg, "lapse_db_pool_connections")
		for _, p := range pools {
			for _, st := range []string{"in_use", "idle"} {
				if _, ok := conns["pool="+p+",state="+st]; !ok {
					t.Errorf("no lapse_db_pool_connections{pool=%q,state=%q} in %v", p, st, conns)
				}
			}
			// The work store has only been opened; the engine's store has
			// made orders.
			if open := conns["pool="+p+",state=idle"] + conns["pool="+p+",state=in_use"]; open < 1 && !strings.HasPrefix(p, "work") {
				t.Errorf("pool %s has %v connections open after use", p, open)
			}
		}
		for _, name := range []string{"lapse_db_pool_waits_total", "lapse_db_pool_wait_seconds_total"} {
			if got := series(t, reg, name); len(got) != len(pools) {
				t.Errorf("%s = %v, want one per pool", name, got)
			}
		}

		subs := series(t, reg, "lapse_deliveries_by_subscriber")
		if subs["status=pending,subscriber=sink"] != 2 {
			t.Errorf("pending deliveries of sink = %v, want 2 (%v)", subs["status=pending,subscriber=sink"], subs)
		}
		if v, ok := subs["status=dead,subscriber=sink"]; !ok || v != 0 {
			t.Errorf("dead deliveries of sink = %v, %v; want a 0", v, ok)
		}
	})
}

// TestStoreMetricsSharedPools: an SQLite store's Priority store, lapse
// serve's work store there, has the same pools as the store it came from:
// they are reported once, by their names, not again as the work store's.
func TestStoreMetricsSharedPools(t *testing.T) {
	t.Parallel()
	s := openSQLite(t).(*sqlite.Store)
	reg := prometheus.NewRegistry()
	if _, err := engine.New(s, flows.Builtin(), engine.Config{Registerer: reg, WorkStore: s.Priority()}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lapse_db_pool_max_connections", "lapse_db_pool_waits_total", "lapse_db_pool_wait_seconds_total"} {
		var pools []string
		for k := range series(t, reg, name) {
			pools = append(pools, strings.TrimPrefix(k, "pool="))
		}
		slices.Sort(pools)
		if !slices.Equal(pools, []string{"reader", "writer"}) {
			t.Errorf("%s of pools %q, want reader and writer once each", name, pools)
		}
	}
}

// TestDueOldestMetric: lapse_due_oldest_seconds is how long the most
// overdue order has been past its deadline, so that one order that stays
// due while others close is seen (S8); 0 while none is due.
func TestDueOldestMetric(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		reg := prometheus.NewRegistry()
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		oldest := func() float64 {
			t.Helper()
			got := series(t, reg, "lapse_due_oldest_seconds")
			if len(got) != 1 {
				t.Fatalf("lapse_due_oldest_seconds: %v, want one series", got)
			}
			return got[""]
		}
		if got := oldest(); got != 0 {
			t.Errorf("with no orders: %v, want 0", got)
		}
		create(t, e, checkout("DO-1", time.Minute))
		create(t, e, checkout("DO-2", 2*time.Minute))
		if got := oldest(); got != 0 {
			t.Errorf("before any deadline: %v, want 0", got)
		}
		clk.Advance(time.Minute + 90*time.Second)
		if got := oldest(); got != 90 {
			t.Errorf("DO-1 90 s past its deadline, DO-2 30 s past its own: %v, want 90", got)
		}
	})
}
