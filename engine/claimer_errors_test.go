package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// downStore is a store whose claim transactions and next-deadline queries
// fail while down is set, as those of a database that stopped answering.
type downStore struct {
	lapse.Store
	down atomic.Bool
}

var errDown = errors.New("test: the database does not answer")

func (s *downStore) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.Tx(ctx, fn)
}

func (s *downStore) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	if s.down.Load() {
		return time.Time{}, false, errDown
	}
	return s.Store.OrderNextDeadline(ctx, flows, from)
}

// claimerErrors returns lapse_claimer_errors_total of path in reg.
func claimerErrors(t *testing.T, reg prometheus.Gatherer, path lapse.FiredBy) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lapse_claimer_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "path" && l.GetValue() == string(path) {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// downEngine is an engine on a fresh SQLite store whose work store can be
// taken down, with its metrics in reg.
func downEngine(t *testing.T, tr engine.SharedTrigger) (*engine.Engine, lapse.Store, *downStore, *prometheus.Registry) {
	t.Helper()
	s := openSQLite(t)
	work := &downStore{Store: s}
	reg := prometheus.NewRegistry()
	cfg := engine.Config{Registerer: reg, WorkStore: work, Logger: slog.New(slog.DiscardHandler)}
	if tr != nil {
		cfg.Trigger, cfg.TriggerMode = tr, engine.TriggerShared
	}
	e, err := engine.New(s, flows.Builtin(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, s, work, reg
}

// TestClaimerErrorsCounted: every failed pass of every path, the precise
// path and the sweep (run by their loops or once) and the shared trigger's,
// is counted in lapse_claimer_errors_total by path, and the orders fire
// once the database answers again.
func TestClaimerErrorsCounted(t *testing.T) {
	t.Parallel()
	t.Run("timer and sweep", func(t *testing.T) {
		t.Parallel()
		e, s, work, reg := downEngine(t, nil)
		nos := insertDue(t, s, "CE", 3, time.Now().Add(-time.Minute))
		work.down.Store(true)
		c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond, SweepGrace: time.Millisecond})
		if _, err := c.RunOnce(ctxT(t)); !errors.Is(err, errDown) {
			t.Fatalf("RunOnce on a store that is down = %v", err)
		}
		if _, err := c.Sweep(ctxT(t)); !errors.Is(err, errDown) {
			t.Fatalf("Sweep on a store that is down = %v", err)
		}
		if got := claimerErrors(t, reg, lapse.FiredByTimer); got != 1 {
			t.Errorf("timer errors after a failed RunOnce = %v, want 1", got)
		}
		if got := claimerErrors(t, reg, lapse.FiredBySweep); got != 1 {
			t.Errorf("sweep errors after a failed Sweep = %v, want 1", got)
		}
		c.Start(context.Background())
		t.Cleanup(c.Stop)
		waitUntil(t, 10*time.Second, func() bool {
			return claimerErrors(t, reg, lapse.FiredByTimer) >= 3 && claimerErrors(t, reg, lapse.FiredBySweep) >= 3
		})
		work.down.Store(false)
		waitUntil(t, 10*time.Second, func() bool {
			fired := firedBy(t, e, nos)
			return fired[lapse.FiredByTimer]+fired[lapse.FiredBySweep] == len(nos)
		})
	})
	t.Run("shared trigger", func(t *testing.T) {
		t.Parallel()
		tr := newMemTrigger()
		tr.seeded = true
		e, s, work, reg := downEngine(t, tr)
		nos := insertDue(t, s, "CR", 2, time.Now().Add(-time.Second))
		due := make([]engine.TriggerDue, len(nos))
		for i, no := range nos {
			due[i] = engine.TriggerDue{OrderID: idOf(t, s, no), At: time.Now()}
		}
		if err := tr.Add(context.Background(), due); err != nil {
			t.Fatal(err)
		}
		work.down.Store(true)
		// The sweep and the precise path stay out of it: the shared trigger
		// is forced in charge and the sweep's beat is an hour.
		c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour})
		c.Start(context.Background())
		t.Cleanup(c.Stop)
		waitUntil(t, 10*time.Second, func() bool { return claimerErrors(t, reg, lapse.FiredByRedis) >= 1 })
		work.down.Store(false)
		// The members come back on the trigger's retry schedule (1 s).
		waitUntil(t, 10*time.Second, func() bool { return firedBy(t, e, nos)[lapse.FiredByRedis] == len(nos) })
	})
}
