package main_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lapseRun runs the lapse binary in dir with args and returns its stdout,
// its stderr and whether it exited 0.
func lapseRun(t *testing.T, dir string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lapseBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LAPSE_DB=", "LAPSE_HTTP=", "LAPSE_FLOWS=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("lapse %v did not exit within a minute:\n%s", args, errOut.String())
	}
	return out.String(), errOut.String(), err == nil
}

func examplesDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../examples/flows")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFlow(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFlowsCommand(t *testing.T) {
	t.Parallel()
	dir, examples := t.TempDir(), examplesDir(t)

	out, errOut, ok := lapseRun(t, dir, "flows", "checkout")
	if !ok || !strings.HasPrefix(out, "stateDiagram-v2\n    [*] --> UNPAID\n") || !strings.Contains(out, "UNPAID --> CLOSED: TIMEOUT (deadline 15m)") {
		t.Errorf("lapse flows checkout: ok %v\n%s%s", ok, out, errOut)
	}
	out, errOut, ok = lapseRun(t, dir, "flows")
	if !ok || !strings.Contains(out, "checkout") || !strings.Contains(out, "UNPAID") || strings.Contains(out, "auto_confirm") {
		t.Errorf("lapse flows: ok %v\n%s%s", ok, out, errOut)
	}
	out, errOut, ok = lapseRun(t, dir, "flows", "--flows", examples)
	if !ok || !strings.Contains(out, "checkout") || !strings.Contains(out, "auto_refund") {
		t.Errorf("lapse flows --flows examples: ok %v\n%s%s", ok, out, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) != 4 || f[3] != "states" {
			t.Errorf("lapse flows line %q: want NAME INITIAL N states", line)
		} else if f[0] == "auto_confirm" && (f[1] != "PAID" || f[2] != "5") {
			t.Errorf("lapse flows line %q: want auto_confirm PAID 5 states", line)
		}
	}
	out, errOut, ok = lapseRun(t, dir, "flows", "--flows", examples, "auto_refund")
	if !ok || !strings.Contains(out, "[*] --> PAID\n") || !strings.Contains(out, "PAID --> REFUNDED: AUTO_REFUND (deadline 48h)\n") {
		t.Errorf("lapse flows auto_refund: ok %v\n%s%s", ok, out, errOut)
	}
	_, errOut, ok = lapseRun(t, dir, "flows", "nope")
	if ok || !strings.Contains(errOut, `no flow "nope"`) || !strings.Contains(errOut, "checkout") {
		t.Errorf("lapse flows nope: ok %v\n%s", ok, errOut)
	}

	// A custom flow may not take a name that is taken.
	clash := t.TempDir()
	data, err := os.ReadFile(filepath.Join(examples, "auto_confirm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFlow(t, clash, "mine.yaml", strings.Replace(string(data), "name: auto_confirm", "name: checkout", 1))
	_, errOut, ok = lapseRun(t, dir, "flows", "--flows", clash)
	if ok || !strings.Contains(errOut, "mine.yaml defines flow \"checkout\", which the built-in flows define already") {
		t.Errorf("lapse flows with a custom checkout: ok %v\n%s", ok, errOut)
	}
	twice := t.TempDir()
	writeFlow(t, twice, "a.yaml", string(data))
	writeFlow(t, twice, "b.yml", string(data))
	_, errOut, ok = lapseRun(t, dir, "flows", "--flows", twice)
	if ok || !strings.Contains(errOut, "b.yml defines flow \"auto_confirm\", which "+filepath.Join(twice, "a.yaml")+" define") {
		t.Errorf("lapse flows with two auto_confirms: ok %v\n%s", ok, errOut)
	}
	_, errOut, ok = lapseRun(t, dir, "flows", "--flows", t.TempDir())
	if ok || !strings.Contains(errOut, "no flow files") {
		t.Errorf("lapse flows with an empty directory: ok %v\n%s", ok, errOut)
	}
}

// TestFlowsServeRefusesBrokenFlow: a flow file with a mistake stops lapse
// serve before it serves, with the file and line of the mistake.
func TestFlowsServeRefusesBrokenFlow(t *testing.T) {
	t.Parallel()
	dir, flows := t.TempDir(), t.TempDir()
	writeFlow(t, flows, "broken.yaml", `name: broken
initial: SHIPPED
states:
  - {name: SHIPPED}
  - {name: CONFIRMED, terminal: true}
events: [{name: CONFIRM}, {name: REOPEN}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED}
  - {from: CONFIRMED, event: REOPEN, to: SHIPPED}
`)
	_, errOut, ok := lapseRun(t, dir, "serve", "--http", "127.0.0.1:0", "--flows", flows)
	if ok || !strings.Contains(errOut, "broken.yaml:9: ") || !strings.Contains(errOut, "terminal") || strings.Contains(errOut, "lapse serving") {
		t.Errorf("lapse serve with a broken flow: ok %v\n%s", ok, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "lapse.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lapse serve with a broken flow touched the database: %v", err)
	}
	_, errOut, ok = lapseRun(t, dir, "reconcile", "--db", filepath.Join(dir, "lapse.db"), "--flows", flows)
	if ok || !strings.Contains(errOut, "broken.yaml:9: ") {
		t.Errorf("lapse reconcile with a broken flow: ok %v\n%s", ok, errOut)
	}
}

// TestFlowsServeRefusesStrandedOrders: a flow file changed under open
// orders, so that one is in a state the flow no longer has, or removed
// while its orders are open, stops lapse serve with the flow, state and
// count, rather than leaving the orders where nothing moves them and their
// deadlines fail on every pass; the flow as it was serves again.
func TestFlowsServeRefusesStrandedOrders(t *testing.T) {
	t.Parallel()
	dir, flows := t.TempDir(), t.TempDir()
	parcel := `name: parcel
initial: WAIT
states:
  - {name: WAIT, deadline: {after: 1h, event: EXPIRE}}
  - {name: HOLD, deadline: {after: 1h, event: EXPIRE}}
  - {name: DONE, terminal: true}
events: [{name: GO}, {name: PARK}, {name: EXPIRE, internal: true}]
transitions:
  - {from: WAIT, event: GO, to: DONE, emits: [order.done]}
  - {from: WAIT, event: PARK, to: HOLD, emits: [order.parked]}
  - {from: WAIT, event: EXPIRE, to: DONE, emits: [order.expired]}
  - {from: HOLD, event: EXPIRE, to: DONE, emits: [order.expired]}
`
	writeFlow(t, flows, "parcel.yaml", parcel)
	p := startServe(t, dir, "--flows", flows)
	body := map[string]any{"order_no": "p-1", "flow": "parcel", "user_id": "u1", "amount": 100, "currency": "CNY"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != 201 {
		t.Fatalf("POST /v1/orders = %d", code)
	}
	if code := call(t, "POST", p.URL+"/v1/orders/p-1/events", map[string]any{"event": "PARK"}, nil); code != 200 {
		t.Fatalf("PARK = %d", code)
	}
	if err := p.Terminate(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	serve := func() (string, bool) {
		t.Helper()
		_, errOut, ok := lapseRun(t, dir, "serve", "--http", "127.0.0.1:0", "--admin-key", testAdminKey, "--probe-interval", "0", "--flows", flows)
		return errOut, ok
	}
	writeFlow(t, flows, "parcel.yaml", strings.NewReplacer(
		"  - {name: HOLD, deadline: {after: 1h, event: EXPIRE}}\n", "",
		"  - {from: WAIT, event: PARK, to: HOLD, emits: [order.parked]}\n", "",
		"  - {from: HOLD, event: EXPIRE, to: DONE, emits: [order.expired]}\n", "",
		"{name: PARK}, ", "").Replace(parcel))
	if errOut, ok := serve(); ok || !strings.Contains(errOut, "1 of flow parcel in state HOLD, which the flow no longer has") || strings.Contains(errOut, "lapse serving") {
		t.Errorf("lapse serve with HOLD gone: ok %v\n%s", ok, errOut)
	}
	writeFlow(t, flows, "parcel.yaml", strings.Replace(parcel, "name: parcel", "name: box", 1))
	if errOut, ok := serve(); ok || !strings.Contains(errOut, `1 in state HOLD of flow "parcel", which is not loaded`) {
		t.Errorf("lapse serve with parcel gone: ok %v\n%s", ok, errOut)
	}
	writeFlow(t, flows, "parcel.yaml", parcel)
	p = startServe(t, dir, "--flows", flows)
	var o order
	if code := call(t, "GET", p.URL+"/v1/orders/p-1", nil, &o); code != 200 || o.State != "HOLD" || o.DeadlineAt == nil {
		t.Errorf("p-1 with its flow back = %d %+v", code, o)
	}
}

// TestFlowsServeExamples runs the example flows in lapse serve, through
// the HTTP API.
func TestFlowsServeExamples(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--flows", examplesDir(t))

	var o order
	body := map[string]any{"order_no": "ac-1", "flow": "auto_confirm", "user_id": "u1", "amount": 4900, "currency": "CNY"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code != 201 || o.State != "PAID" || o.DeadlineAt != nil {
		t.Fatalf("POST /v1/orders = %d %+v", code, o)
	}
	shipped := time.Now()
	if code := call(t, "POST", p.URL+"/v1/orders/ac-1/events", map[string]any{"event": "SHIP"}, &o); code != 200 || o.State != "SHIPPED" ||
		o.DeadlineAt == nil || o.DeadlineAt.Sub(shipped) < 7*24*time.Hour-time.Minute || o.DeadlineAt.Sub(shipped) > 7*24*time.Hour+time.Minute {
		t.Fatalf("SHIP = %d %+v", code, o)
	}
	if code := call(t, "POST", p.URL+"/v1/orders/ac-1/events", map[string]any{"event": "AUTO_CONFIRM"}, nil); code != 400 {
		t.Errorf("AUTO_CONFIRM through the API = %d, want 400", code)
	}
	if code := call(t, "POST", p.URL+"/v1/orders/ac-1/events", map[string]any{"event": "CONFIRM"}, &o); code != 200 ||
		o.State != "CONFIRMED" || o.ClosedAt == nil || o.CloseReason != "CONFIRM" || o.FiredBy != "api" {
		t.Fatalf("CONFIRM = %d %+v", code, o)
	}

	// An auto_refund order with a short ttl is refunded by the deadline engine.
	body = map[string]any{"order_no": "ar-1", "flow": "auto_refund", "user_id": "u1", "amount": 4900, "currency": "CNY", "ttl": "1s"}
	if code := call(t, "POST", p.URL+"/v1/orders", body, &o); code != 201 || o.State != "PAID" || o.DeadlineAt == nil {
		t.Fatalf("POST /v1/orders = %d %+v", code, o)
	}
	waitFor(t, 10*time.Second, func() bool {
		call(t, "GET", p.URL+"/v1/orders/ar-1", nil, &o)
		return o.State != "PAID"
	})
	if o.State != "REFUNDED" || o.CloseReason != "AUTO_REFUND" || o.FiredBy != "timer" {
		t.Errorf("auto_refund order after its deadline: %+v", o)
	}
	if code := call(t, "POST", p.URL+"/v1/orders/ar-1/events", map[string]any{"event": "SHIP"}, nil); code != 409 {
		t.Errorf("SHIP after the refund = %d, want 409", code)
	}
}
