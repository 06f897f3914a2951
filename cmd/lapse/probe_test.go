package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse/webhook"
)

// probeRun is a run as GET /v1/probe shows it.
type probeRun struct {
	OrderNo    string    `json:"order_no"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Result     string    `json:"result"`
	FailedStep string    `json:"failed_step"`
	Error      string    `json:"error"`
	Steps      []struct {
		Name    string  `json:"name"`
		Seconds float64 `json:"seconds"`
	} `json:"steps"`
}

// probeRuns returns GET /v1/probe.
func probeRuns(t *testing.T, p *proc) (interval string, runs []probeRun) {
	t.Helper()
	var got struct {
		Interval string     `json:"interval"`
		Runs     []probeRun `json:"runs"`
	}
	if code := call(t, "GET", p.URL+"/v1/probe", nil, &got); code != http.StatusOK {
		t.Fatalf("GET /v1/probe = %d", code)
	}
	return got.Interval, got.Runs
}

// seriesValue returns the value of the series of /metrics that is exactly
// series (name and labels as Prometheus writes them), and whether it is
// there.
func seriesValue(t *testing.T, p *proc, series string) (float64, bool) {
	t.Helper()
	req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, body)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// adminChannel is a receiver of the admins' signed webhooks.
type adminChannel struct {
	URL     string
	mu      sync.Mutex
	notices []map[string]json.RawMessage
}

const adminSecret = "admin-notify-secret-0123456789"

func newAdminChannel(t *testing.T) *adminChannel {
	t.Helper()
	a := &adminChannel{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(adminSecret, r.Header.Get(webhook.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("admin notice signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var n map[string]json.RawMessage
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("admin notice %s: %v", body, err)
		}
		a.mu.Lock()
		a.notices = append(a.notices, n)
		a.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

// probeFailures returns the probe.failed notices received.
func (a *adminChannel) probeFailures() []probeRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []probeRun
	for _, n := range a.notices {
		if string(n["type"]) != `"probe.failed"` {
			continue
		}
		var run probeRun
		if err := json.Unmarshal(n["probe"], &run); err == nil {
			out = append(out, run)
		}
	}
	return out
}

// TestProbeWithoutDeadlineEngine: on a node without the deadline engine,
// alone on its database, nothing closes; the probe says so within two
// intervals, in its metrics, in GET /v1/probe, in the log and to the
// admins.
func TestProbeWithoutDeadlineEngine(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	admins := newAdminChannel(t)
	p := startServe(t, t.TempDir(), "--deadlines=false", "--probe-interval", interval.String(),
		"--admin-notify", admins.URL, "--webhook-secret", adminSecret)
	listening := time.Now()

	var failed probeRun
	waitFor(t, 2*interval+10*time.Second, func() bool {
		_, runs := probeRuns(t, p)
		for _, r := range runs {
			if r.Result == "failed" {
				failed = r
				return true
			}
		}
		return false
	})
	t.Logf("failed run: %+v", failed)
	if failed.FailedStep != "close" || !strings.Contains(failed.Error, "still UNPAID") || len(failed.Steps) != 1 || failed.Steps[0].Name != "create" {
		t.Errorf("failed run %+v, want failed at close after create", failed)
	}
	if took := failed.FinishedAt.Sub(listening); took > 2*interval {
		t.Errorf("the first failure came %v after the start, more than two intervals", took)
	}
	if took := failed.FinishedAt.Sub(failed.StartedAt); took > interval {
		t.Errorf("the run took %v, more than its interval", took)
	}
	if interval, _ := probeRuns(t, p); interval != "2s" {
		t.Errorf("GET /v1/probe interval %q", interval)
	}

	if n, ok := seriesValue(t, p, `lapse_probe_failures_total{step="close"}`); !ok || n < 1 {
		t.Errorf(`lapse_probe_failures_total{step="close"} = %v (present %v), want > 0`, n, ok)
	}
	if n, ok := seriesValue(t, p, `lapse_probe_runs_total{result="failed"}`); !ok || n < 1 {
		t.Errorf(`lapse_probe_runs_total{result="failed"} = %v (present %v), want > 0`, n, ok)
	}
	if n, ok := seriesValue(t, p, `lapse_probe_runs_total{result="ok"}`); !ok || n != 0 {
		t.Errorf(`lapse_probe_runs_total{result="ok"} = %v (present %v), want 0`, n, ok)
	}
	if at, ok := seriesValue(t, p, "lapse_probe_last_success_timestamp_seconds"); !ok || at != 0 {
		t.Errorf("lapse_probe_last_success_timestamp_seconds = %v (present %v), want 0: never", at, ok)
	}
	// A stuck probe is a due order like any other.
	if n, ok := seriesValue(t, p, "lapse_due_open_orders"); !ok || n < 1 {
		t.Errorf("lapse_due_open_orders = %v (present %v), want the stuck probes", n, ok)
	}

	waitFor(t, 10*time.Second, func() bool { return len(admins.probeFailures()) > 0 })
	if told := admins.probeFailures()[0]; told.FailedStep != "close" || told.OrderNo == "" {
		t.Errorf("the admins were told %+v", told)
	}
	var o order
	if code := call(t, "GET", p.URL+"/v1/orders/"+failed.OrderNo, nil, &o); code != http.StatusOK || o.State != "UNPAID" {
		t.Errorf("GET the probe's order = %d %+v, want it UNPAID", code, o)
	}
	logs := p.Logs()
	if !strings.Contains(logs, `"msg":"probe failed","step":"close"`) || !strings.Contains(logs, "deadline engine is off") {
		t.Errorf("no probe failure or deadline engine off in the logs:\n%s", logs)
	}
}

// TestProbeHealthy: with the deadline engine, the probe's runs succeed with
// every step timed; its orders and their stock are the probe's alone, out
// of the order listing and of lapse reconcile's report.
func TestProbeHealthy(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	dir := t.TempDir()
	admins := newAdminChannel(t)
	p := startServe(t, dir, "--probe-interval", interval.String(), "--admin-notify", admins.URL, "--webhook-secret", adminSecret)

	body := map[string]any{"order_no": "real-1", "flow": "checkout", "user_id": "u1", "amount": 1999, "currency": "CNY", "ttl": "1h"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != http.StatusCreated {
		t.Fatalf("POST /v1/orders = %d", code)
	}
	probe := map[string]any{"order_no": "lapse-probe-1", "flow": "checkout", "user_id": "u1", "amount": 1, "currency": "CNY"}
	if code := call(t, "POST", p.URL+"/v1/orders", probe, nil); code != http.StatusBadRequest {
		t.Errorf("POST /v1/orders with a probe's number = %d, want 400", code)
	}

	var ok probeRun
	waitFor(t, 2*interval+10*time.Second, func() bool {
		_, runs := probeRuns(t, p)
		for _, r := range runs {
			if r.Result != "ok" {
				t.Fatalf("a probe run failed: %+v", r)
			}
			ok = r
		}
		return len(runs) > 0
	})
	t.Logf("run: %+v", ok)
	var names []string
	for _, s := range ok.Steps {
		names = append(names, s.Name)
		if s.Seconds < 0 {
			t.Errorf("step %s took %vs", s.Name, s.Seconds)
		}
	}
	if strings.Join(names, ",") != "create,close,release,deliver" || ok.FailedStep != "" || ok.Error != "" {
		t.Errorf("run %+v", ok)
	}
	last, present := seriesValue(t, p, "lapse_probe_last_success_timestamp_seconds")
	if at := time.UnixMicro(int64(last * 1e6)); !present || at.Before(ok.StartedAt) || time.Since(at) > time.Minute {
		t.Errorf("lapse_probe_last_success_timestamp_seconds = %v, want the run's end %v", last, ok.FinishedAt)
	}
	for _, step := range []string{"create", "close", "release", "deliver"} {
		if n, present := seriesValue(t, p, `lapse_probe_step_seconds_count{step="`+step+`"}`); !present || n < 1 {
			t.Errorf("lapse_probe_step_seconds_count{step=%q} = %v (present %v)", step, n, present)
		}
	}
	if n, _ := seriesValue(t, p, `lapse_probe_failures_total{step="close"}`); n != 0 {
		t.Errorf(`lapse_probe_failures_total{step="close"} = %v`, n)
	}

	var o order
	if code := call(t, "GET", p.URL+"/v1/orders/"+ok.OrderNo, nil, &o); code != http.StatusOK || o.State != "CLOSED" || o.CloseReason != "TIMEOUT" {
		t.Errorf("GET the probe's order = %d %+v", code, o)
	}
	var stock struct {
		OnHand   int64 `json:"on_hand"`
		Reserved int64 `json:"reserved"`
	}
	if code := call(t, "GET", p.URL+"/v1/stock/lapse-probe", nil, &stock); code != http.StatusOK || stock.OnHand == 0 || stock.Reserved > 1 {
		t.Errorf("GET /v1/stock/lapse-probe = %d %+v, want stock with at most the next run's unit reserved", code, stock)
	}
	var list struct {
		Orders []order `json:"orders"`
	}
	if code := call(t, "GET", p.URL+"/v1/orders?flow=checkout", nil, &list); code != http.StatusOK || len(list.Orders) != 1 || list.Orders[0].OrderNo != "real-1" {
		t.Errorf("GET /v1/orders = %d %+v, want real-1 alone", code, list.Orders)
	}
	out, err := exec.Command(lapseBin, "reconcile", "--db", filepath.Join(dir, "lapse.db")).CombinedOutput()
	if err != nil || strings.Contains(string(out), "lapse-probe") {
		t.Errorf("lapse reconcile: %v\n%s", err, out)
	}
	if got := admins.probeFailures(); len(got) != 0 {
		t.Errorf("the admins were told of failures: %+v", got)
	}
}
