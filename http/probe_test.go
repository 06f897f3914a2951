package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// probeAnswer is GET /v1/probe.
type probeAnswer struct {
	Interval string            `json:"interval"`
	Runs     []engine.ProbeRun `json:"runs"`
}

func getProbe(t *testing.T, e *env) probeAnswer {
	t.Helper()
	r := e.do("GET", "/v1/probe", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/probe = %d %s", r.status, r.body)
	}
	var got probeAnswer
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestProbeOff(t *testing.T) {
	t.Parallel()
	if got := getProbe(t, newEnv(t)); got.Interval != "0s" || got.Runs == nil || len(got.Runs) != 0 {
		t.Errorf("GET /v1/probe without a probe = %+v, want interval 0s and no runs", got)
	}
}

// probeReads is a store that tells when a probe's order was read by number.
type probeReads struct {
	lapse.Store
	read *atomic.Bool
}

func (s *probeReads) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	if lapse.IsProbeOrderNo(orderNo) {
		s.read.Store(true)
	}
	return s.Store.OrderGet(ctx, orderNo)
}

// TestProbeRuns: the answer shows the probe's runs, a failed one with its
// step and reason; the probe's order is not in the listing of orders.
func TestProbeRuns(t *testing.T) {
	t.Parallel()
	// The prober reads its order back by number once its create step is
	// over (it reads the clock for that step a moment after the order is
	// there to be seen): the clock moves only then.
	var awaited atomic.Bool
	e := newEnvWith(t, options{engine: func(c *engine.Config) { c.StockLedger = true },
		probe: &engine.ProberConfig{Interval: time.Minute, Poll: time.Millisecond},
		wrap:  func(s lapse.Store) lapse.Store { return &probeReads{Store: s, read: &awaited} }})
	prober := e.prober
	if got := getProbe(t, e); got.Interval != "1m0s" || len(got.Runs) != 0 {
		t.Errorf("before a run: %+v", got)
	}
	done := make(chan error, 1)
	go func() {
		_, err := prober.RunOnce(t.Context())
		done <- err
	}()
	until := time.Now().Add(10 * time.Second)
	for {
		if awaited.Load() {
			break
		}
		if time.Now().After(until) {
			t.Fatal("no probe order")
		}
		time.Sleep(time.Millisecond)
	}
	e.clock.Advance(time.Minute) // nothing closes it: no claimer runs
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := getProbe(t, e)
	if len(got.Runs) != 1 {
		t.Fatalf("runs %+v", got.Runs)
	}
	run := got.Runs[0]
	if run.Result != "failed" || run.FailedStep != "close" || run.Error == "" || len(run.Steps) != 1 || run.Steps[0].Name != "create" || !lapse.IsProbeOrderNo(run.OrderNo) {
		t.Errorf("run %+v", run)
	}
	r := e.do("GET", "/v1/orders", "")
	var list struct {
		Orders []lapse.Order `json:"orders"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != http.StatusOK || len(list.Orders) != 0 {
		t.Errorf("GET /v1/orders = %d %s, want no orders", r.status, r.body)
	}
	if r := e.do("GET", "/v1/orders/"+run.OrderNo, ""); r.status != http.StatusOK {
		t.Errorf("GET the probe's order = %d %s", r.status, r.body)
	}
}
