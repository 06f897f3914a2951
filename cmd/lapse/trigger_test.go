package main_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/internal/faultproxy"
	"github.com/lapsehq/lapse/internal/testenv"
)

type triggerStatus struct {
	Using    string `json:"using"`
	Degraded bool   `json:"degraded"`
	Reason   string `json:"reason"`
}

// TestRedisOutage: lapse serve with the Redis trigger, under traffic, loses
// Redis (connections refused through a proxy) and its data (the keys are
// deleted, as a restart without persistence would): it degrades on its own,
// the database sweep fires every deadline within its bound meanwhile, and
// when Redis answers again it is seeded from the database and takes over,
// on its own. Every order closes exactly once.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	proxy, err := faultproxy.New(opt.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	prefix := "lapse-e2e-" + rand.Text()[:8] + ":"
	t.Cleanup(func() { deleteKeys(rdb, prefix) })

	dir := t.TempDir()
	p := startServe(t, dir, "--redis", fmt.Sprintf("redis://%s/%d", proxy.Addr(), opt.DB), "--redis-prefix", prefix,
		"--degraded-sweep", "500ms", "--sweep-grace", "200ms", "--stock-ledger=false", "--coupon-ledger=false")
	status := func() triggerStatus {
		var st triggerStatus
		call(t, "GET", p.URL+"/v1/trigger", nil, &st)
		return st
	}
	waitFor(t, 10*time.Second, func() bool { return status().Using == "redis" })

	// Traffic: orders due 1.5 s after they are created, for 12 s.
	var (
		mu        sync.Mutex
		nos       []string
		deadlines = map[string]time.Time{}
		seq       atomic.Int64
	)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			no := fmt.Sprintf("RO-%04d", seq.Add(1))
			body := map[string]any{"order_no": no, "flow": "checkout", "user_id": "u", "amount": 100, "currency": "CNY", "ttl": "1500ms"}
			var o order
			if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code == 201 && o.DeadlineAt != nil {
				mu.Lock()
				nos = append(nos, no)
				deadlines[no] = *o.DeadlineAt
				mu.Unlock()
			} else {
				t.Errorf("POST /v1/orders %s = %d", no, code)
			}
		}
	})
	time.Sleep(3 * time.Second)
	proxy.Down()
	deleteKeys(rdb, prefix)
	waitFor(t, 5*time.Second, func() bool { st := status(); return st.Degraded && st.Using == "database" })
	var ready map[string]any
	call(t, "GET", p.URL+"/readyz", nil, &ready)
	if tr, _ := ready["trigger"].(map[string]any); tr == nil || tr["degraded"] != true {
		t.Errorf("readyz while Redis is down: %v", ready)
	}
	time.Sleep(3 * time.Second)
	proxy.Up()
	waitFor(t, 10*time.Second, func() bool { st := status(); return !st.Degraded && st.Using == "redis" })
	time.Sleep(3 * time.Second)
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	paths := map[string]int{}
	waitFor(t, 10*time.Second, func() bool {
		for _, no := range nos[len(nos)-5:] {
			var o order
			call(t, "GET", p.URL+"/v1/orders/"+no, nil, &o)
			if o.State != "CLOSED" {
				return false
			}
		}
		return true
	})
	var worst time.Duration
	for _, no := range nos {
		var o order
		call(t, "GET", p.URL+"/v1/orders/"+no, nil, &o)
		if o.State != "CLOSED" || o.ClosedAt == nil {
			t.Errorf("%s is %s", no, o.State)
			continue
		}
		lag := o.ClosedAt.Sub(deadlines[no])
		if lag < 0 {
			t.Errorf("%s closed %v early", no, -lag)
		}
		worst = max(worst, lag)
		paths[o.FiredBy]++
		var trs struct {
			Transitions []struct {
				ToState string `json:"to"`
			}
		}
		call(t, "GET", p.URL+"/v1/orders/"+no+"/transitions", nil, &trs)
		closed := 0
		for _, tr := range trs.Transitions {
			if tr.ToState == "CLOSED" {
				closed++
			}
		}
		if closed != 1 {
			t.Errorf("%s has %d transitions to CLOSED", no, closed)
		}
	}
	t.Logf("%d orders, fired by %v, worst lag %v", len(nos), paths, worst)
	// The sweep's bound while degraded: its beat plus its grace, plus room
	// for a loaded machine.
	if worst > 2500*time.Millisecond {
		t.Errorf("worst close lag %v, beyond the degraded sweep's bound", worst)
	}
	if paths["redis"] == 0 || paths["sweep"]+paths["timer"] == 0 {
		t.Errorf("fired by %v: want both Redis and the database at work", paths)
	}
	if !strings.Contains(p.Logs(), "seeded from the database") {
		t.Errorf("no seeding in the logs")
	}
}

func deleteKeys(rdb *goredis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

// TestServeConfigReload: lapse serve --config FILE reloads its switches
// without a restart: the trigger mode written to the file takes effect; a
// broken file at run time leaves the running configuration as it was and
// says so; a broken file at start runs on the last good snapshot, loudly.
func TestServeConfigReload(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "lapse.yaml")
	prefix := "lapse-reload-" + rand.Text()[:8] + ":"
	write := func(body string) {
		t.Helper()
		// A new modification time even within the file system's resolution.
		if err := os.WriteFile(file+".tmp", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	good := fmt.Sprintf("redis: %s\nredis-prefix: %q\ntrigger-mode: auto\nsweep-interval: 5s\n", url, prefix)
	write(good)
	p := startServe(t, dir, "--config", file)
	mode := func() string {
		var st struct{ Mode string }
		call(t, "GET", p.URL+"/v1/trigger", nil, &st)
		return st.Mode
	}
	waitFor(t, 10*time.Second, func() bool { return mode() == "auto" })
	write(strings.Replace(good, "trigger-mode: auto", "trigger-mode: database", 1))
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool { return mode() == "database" })

	// Broken at run time: the running configuration stays.
	write("trigger-mode: [\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(p.Logs(), "lapse.yaml") && strings.Contains(p.Logs(), `"level":"ERROR"`)
	})
	if m := mode(); m != "database" {
		t.Errorf("after a broken reload the mode is %s", m)
	}
	if err := p.Terminate(15 * time.Second); err != nil {
		t.Fatalf("lapse serve: %v", err)
	}

	// Broken at start: the last good snapshot runs, and the log says so.
	p = startServe(t, dir, "--config", file)
	if m := mode(); m != "database" {
		t.Errorf("on the snapshot the mode is %s, want the last good one (database)", m)
	}
	if !strings.Contains(p.Logs(), "lastgood") {
		t.Errorf("no word of the snapshot in the logs:\n%s", p.Logs())
	}
}

// TestRedisClientLogs: what the Redis client library logs by itself (here
// the dials to a Redis that refuses them) goes through the process's
// logger, in its format, like every other line of lapse serve.
func TestRedisClientLogs(t *testing.T) {
	t.Parallel()
	addr := testenv.Refused(t)
	p := startServe(t, t.TempDir(), "--redis", "redis://"+addr+"/0", "--redis-timeout", "100ms")
	waitFor(t, 20*time.Second, func() bool { return strings.Contains(p.Logs(), "failed to dial") })
	if err := p.Terminate(15 * time.Second); err != nil {
		t.Fatalf("lapse serve: %v", err)
	}
	for line := range strings.Lines(p.Logs()) {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Level == "" {
			t.Errorf("a line that is not the process's JSON log: %q", line)
		} else if strings.Contains(rec.Msg, "failed to dial") && rec.Level != "WARN" {
			t.Errorf("the client's dial failure at %s: %q", rec.Level, line)
		}
	}
}
