package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
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
		var sealers []*engine.AuditSealer
		for i, s := range stores {
			cfg := engine.AuditSealerConfig{Interval: 5 * time.Millisecond, Batch: 4}
			if i == 0 {
				cfg.Registerer = reg
			}
			sealer, err := engine.NewAuditSealer(s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sealer.Start(ctx)
			sealer.Start(ctx) // does nothing
			sealers = append(sealers, sealer)
		}
		const workers, each = 4, 15
		var wg sync.WaitGroup
		for w := range workers {
			e := newEngine(t, stores[w%2], lapse.SystemClock{})
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
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "lapse_audit_unsealed_rows" {
				found = true
				if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 0 {
					t.Errorf("lapse_audit_unsealed_rows = %v, want 0", v)
				}
			}
		}
		if !found {
			t.Error("no lapse_audit_unsealed_rows among the metrics")
		}
	})
}

// TestAuditSealerStore: a store that keeps no audit log has no sealer.
func TestAuditSealerStore(t *testing.T) {
	if _, err := engine.NewAuditSealer(noAudit{}, engine.AuditSealerConfig{}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("NewAuditSealer of a store without an audit log = %v, want EINVALID", err)
	}
}

// noAudit is a Store that is not an AccessStore.
type noAudit struct{ lapse.Store }
