package ops

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// TestAlertsOnStoppedEngine runs the real lapse serve with its deadline
// engine stopped (--deadlines=false, the incident of an hour in which
// nothing closes) and a probe every 2 s. The probe fails within two
// intervals, its metrics say so, and LapseProbeStale and
// LapseNothingClosing fire on what /metrics then shows: the scraped values,
// held for half an hour of rule evaluations a minute apart, as Prometheus
// would keep seeing them while nobody restarts the engine.
func TestAlertsOnStoppedEngine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "lapse")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lapse")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lapse: %v\n%s", err, out)
	}
	const key = "ops-test-admin-key-0123456789abcdefghijklmnop"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--db", filepath.Join(dir, "lapse.db"), "--http", "127.0.0.1:0",
		"--admin-key", key, "--log-format", "json", "--deadlines=false", "--probe-interval", "2s")
	cmd.Dir = dir
	// Nothing of the machine's own LAPSE_ settings.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LAPSE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := serving(t, stderr)
	started := time.Now()

	get := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	for {
		var probe struct {
			Runs []struct {
				Result     string `json:"result"`
				FailedStep string `json:"failed_step"`
			} `json:"runs"`
		}
		if err := json.Unmarshal(get("/v1/probe"), &probe); err != nil {
			t.Fatal(err)
		}
		if len(probe.Runs) > 0 && probe.Runs[0].Result == "failed" {
			if probe.Runs[0].FailedStep != "close" {
				t.Fatalf("the probe failed at %q, want close", probe.Runs[0].FailedStep)
			}
			break
		}
		if time.Since(started) > 30*time.Second {
			t.Fatalf("no failed probe run 30 s after the start: %s", get("/v1/probe"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the probe failed at close %v after the server listened", time.Since(started).Round(100*time.Millisecond))

	// The scrape, as Prometheus stores it with its job and instance.
	var load strings.Builder
	load.WriteString("load 1m\n")
	for line := range strings.Lines(string(get("/metrics"))) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "lapse_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series, value := line[:i], line[i+1:]
		const target = `job="lapse",instance="live"`
		if j := strings.IndexByte(series, '{'); j >= 0 {
			series = series[:j+1] + target + "," + series[j+1:]
		} else {
			series += "{" + target + "}"
		}
		fmt.Fprintf(&load, "\t%s %s+0x30\n", series, value)
	}

	byName := map[string]rulefmt.Rule{}
	for _, r := range alerts(t) {
		byName[r.Alert] = r
	}
	storage := promqltest.LoadedStorage(t, load.String())
	t.Cleanup(func() { storage.Close() })
	engine := promqltest.NewTestEngine(t, false, 0, 1_000_000)
	query := rules.EngineQueryFunc(engine, storage)
	p := parser.NewParser(parser.Options{})
	for _, name := range []string{"LapseProbeStale", "LapseNothingClosing"} {
		r, ok := byName[name]
		if !ok {
			t.Fatalf("no alert %s in alerts.yml", name)
		}
		expr, err := p.ParseExpr(r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
			labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
		for at := time.Duration(0); at <= 30*time.Minute; at += time.Minute {
			if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(at), query, nil, 0); err != nil {
				t.Fatalf("%s at %v: %v", name, at, err)
			}
		}
		firing := false
		for _, a := range rule.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing = true
				t.Logf("%s fires: %s", name, a.Annotations.Get("summary"))
			}
		}
		if !firing {
			t.Errorf("%s does not fire on the metrics of a serve whose deadline engine is stopped:\n%s", name, load.String())
		}
	}
}

// serving reads the server's log until it says where it serves, and drains
// the rest in the background.
func serving(t *testing.T, r io.Reader) string {
	t.Helper()
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	found := make(chan string, 1)
	go func() {
		for lines.Scan() {
			var l struct {
				Msg  string `json:"msg"`
				HTTP string `json:"http"`
			}
			if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "lapse serving" {
				select {
				case found <- l.HTTP:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(2 * time.Minute):
		t.Fatal("lapse serve did not say where it serves within 2 minutes")
		return ""
	}
}
