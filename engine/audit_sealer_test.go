package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// TestAuditSealer: audited creations on two processes' stores commit their
// rows unsealed, while a sealer runs on each; once the creations are done
// and the sealers stopped, a last pass leaves nothing unsealed and one
// chain over every row, sealed once.
func TestAuditSealer(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		ctx := ctxT(t)
		stores := []lapse.Store{open(), open()}
		reg := prometheus.NewRegistry()
		var (
			engines []*engine.Engine
			sealers []*engine.AuditSealer
		)
		for i, s := range stores {
			e := newEngine(t, s, lapse.SystemClock{})
			cfg := engine.AuditSealerConfig{Interval: 5 * time.Millisecond, Batch: 4}
			if i == 0 {
				cfg.Registerer = reg
			}
			sealer, err := engine.NewAuditSealer(e, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sealer.Start(ctx)
			sealer.Start(ctx) // does nothing
			engines, sealers = append(engines, e), append(sealers, sealer)
		}
		const workers, each = 4, 15
		var wg sync.WaitGroup
		for w := range workers {
			e := engines[w%2]
			wg.Go(func() {
				for i := range each {
					no := fmt.Sprintf("AS-%d-%02d", w, i)
					actx := engine.WithAudit(ctx, &lapse.AuditEntry{ActorKind: "key", ActorID: "lk_1", ActorName: "shop",
						Action: "order.create", Target: "order:" + no})
					if _, _, err := e.CreateOrder(actx, checkout(no, 0), app); err != nil || !engine.AuditWritten(actx) {
						t.Errorf("CreateOrder %s = %v, written %v", no, err, engine.AuditWritten(actx))
						return
					}
				}
			})
		}
		wg.Wait()
		for _, s := range sealers {
			s.Stop()
			s.Stop() // does nothing
		}
		// Stopped, the sealers let go of the head: a pass now is not busy.
		if _, err := sealers[1].RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		as := stores[0].(lapse.AccessStore)
		c, err := lapse.AuditVerify(ctx, as, 0)
		if err != nil || c.Rows != workers*each || c.Unsealed != 0 {
			t.Fatalf("AuditVerify = %+v, %v; want %d rows sealed", c, err, workers*each)
		}
		if n, err := sealers[0].RunOnce(ctx); n != 0 || err != nil {
			t.Errorf("RunOnce of a sealed log = %d, %v", n, err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, mf := range mfs {
			switch mf.GetName() {
			case "lapse_audit_unsealed_rows", "lapse_audit_unsealed_oldest_seconds":
				found++
				if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 0 {
					t.Errorf("%s = %v, want 0", mf.GetName(), v)
				}
			}
		}
		if found != 2 {
			t.Error("the gauges of the unsealed rows are not among the metrics")
		}
	})
}

// TestAuditSealerWakes: a sealer with nothing to seal backs off towards its
// IdleInterval (an hour here), and the engine's commit of an audited row
// wakes it, so that the row is sealed within moments all the same.
func TestAuditSealerWakes(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, lapse.SystemClock{})
	sealer, err := engine.NewAuditSealer(e, engine.AuditSealerConfig{Interval: time.Millisecond, IdleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	sealer.Start(ctx)
	defer sealer.Stop()
	as := lapse.AccessStore(s)
	for i := range 3 {
		no := fmt.Sprintf("AW-%d", i)
		actx := engine.WithAudit(ctx, &lapse.AuditEntry{ActorKind: "key", ActorID: "lk_1", ActorName: "shop",
			Action: "order.create", Target: "order:" + no})
		if _, _, err := e.CreateOrder(actx, checkout(no, 0), app); err != nil {
			t.Fatal(err)
		}
		// Wait for the seal, which only the wake can bring before an hour.
		for {
			c, err := lapse.AuditVerify(ctx, as, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c.Rows == int64(i+1) && c.Unsealed == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("row %d not sealed: %+v", i+1, c)
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
}

// TestAuditSealerStore: a store that keeps no audit log has no sealer.
func TestAuditSealerStore(t *testing.T) {
	e, err := engine.New(noAudit{openSQLite(t)}, flows.Builtin(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.NewAuditSealer(e, engine.AuditSealerConfig{}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("NewAuditSealer of a store without an audit log = %v, want EINVALID", err)
	}
}

// noAudit is a Store that is not an AccessStore.
type noAudit struct{ lapse.Store }
