package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/webhook"
)

type groupView struct {
	State   string              `json:"state"`
	Members []lapse.GroupMember `json:"members"`
}

type attemptJSON struct {
	StartedAt time.Time `json:"started_at"`
}

type deliveryJSON struct {
	Subscriber string        `json:"subscriber"`
	Status     string        `json:"status"`
	History    []attemptJSON `json:"history"`
}

// TestGroupBuyKilledTwice runs seed 000's group buy through `lapse serve`
// against a payment gateway that lives outside it (the sandbox, served over
// the provider protocol) and fails half of the charges: 200 members join, the
// group closes, and the process is killed twice mid-settlement. Each member
// is charged at most once; the group fails after its schedule and the
// organiser's service is told; once the gateway recovers, an operator's retry
// settles the group, and everyone has been charged exactly once.
func TestGroupBuyKilledTwice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "gateway-secret-0123456789"
	sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte(secret), FailRate: 0.5})
	gw := httptest.NewServer(sb.Handler())
	t.Cleanup(gw.Close)

	var mu sync.Mutex
	var notices []map[string]any
	const hookSecret = "notify-secret-0123456789"
	notify := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(hookSecret, r.Header.Get(webhook.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("group notice signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev map[string]any
		json.Unmarshal(body, &ev)
		mu.Lock()
		notices = append(notices, ev)
		mu.Unlock()
	}))
	t.Cleanup(notify.Close)

	args := []string{"--payment-providers", "gw=" + gw.URL, "--payment-provider-secrets", "gw=" + secret,
		"--group-notify", notify.URL, "--webhook-secret", hookSecret, "--delivery-poll", "100ms"}
	p := startServe(t, dir, args...)
	if code := call(t, "POST", p.URL+"/v1/groups", map[string]any{"group_id": "G-1", "organiser": "olive", "price": 990,
		"currency": "CNY", "ttl": "4s"}, nil); code != 201 {
		t.Fatalf("POST /v1/groups = %d", code)
	}
	const members = 200
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < members; i += 8 {
				body := map[string]any{"user_id": fmt.Sprintf("u%03d", i), "method": fmt.Sprintf("tok-%d", i)}
				if code := call(t, "POST", p.URL+"/v1/groups/G-1/members", body, nil); code != 201 {
					t.Errorf("join u%03d = %d", i, code)
				}
			}
		})
	}
	wg.Wait()
	group := func(url string) groupView {
		var g groupView
		call(t, "GET", url+"/v1/groups/G-1", nil, &g)
		return g
	}
	if g := group(p.URL); len(g.Members) != members || g.State != "OPEN" {
		t.Fatalf("before the deadline: %s with %d members", g.State, len(g.Members))
	}

	// Killed as settling starts, and again a few rounds in.
	waitFor(t, 15*time.Second, func() bool { return group(p.URL).State == "CLOSED" })
	p.Kill()
	p = startServe(t, dir, args...)
	time.Sleep(5 * time.Second)
	p.Kill()
	p = startServe(t, dir, args...)
	waitOrder(t, p.URL, "G-1", 150*time.Second, func() bool { st := group(p.URL).State; return st == "FAILED" || st == "SETTLED" })

	charged := func() map[string]int {
		n := map[string]int{}
		for _, pay := range sb.Payments() {
			if pay.Status == lapse.ProviderPaid {
				n[pay.OrderNo]++
			}
		}
		return n
	}
	for key, n := range charged() {
		if n > 1 {
			t.Errorf("charge %s made %d times", key, n)
		}
	}
	if group(p.URL).State == "FAILED" {
		waitFor(t, 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(notices) > 0
		})
		mu.Lock()
		ev := notices[0]
		mu.Unlock()
		if ev["type"] != "group.failed" || fmt.Sprint(ev["order"].(map[string]any)["user_id"]) != "olive" {
			t.Errorf("notice: %v", ev)
		}
		// The gateway recovers; an operator retries.
		if err := sb.SetRates(0, 0); err != nil {
			t.Fatal(err)
		}
		if code := call(t, "POST", p.URL+"/v1/groups/G-1/retry", map[string]any{"reason": "gateway is back"}, nil); code != 200 {
			t.Fatalf("retry = %d", code)
		}
		waitOrder(t, p.URL, "G-1", 60*time.Second, func() bool { return group(p.URL).State == "SETTLED" })
	}
	g := group(p.URL)
	got := charged()
	for _, m := range g.Members {
		if m.Status != lapse.ChargeCharged || got[m.Key] != 1 {
			t.Errorf("member %s: %s, charged %d times at the gateway", m.UserID, m.Status, got[m.Key])
		}
	}
	if len(got) != members {
		t.Errorf("the gateway made %d charges, want %d", len(got), members)
	}

	out, err := exec.Command(lapseBin, "reconcile", "--db", filepath.Join(dir, "lapse.db")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "200 group-buy charges") || !strings.Contains(string(out), "captured 198000 = applied 198000") {
		t.Errorf("lapse reconcile: %v\n%s", err, out)
	}

	// The rounds of the first settlement kept to the schedule: never sooner
	// than its wait (later when a kill left a round to its lease).
	var ds struct{ Deliveries []deliveryJSON }
	call(t, "GET", p.URL+"/v1/orders/G-1/deliveries", nil, &ds)
	steps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
	for _, d := range ds.Deliveries {
		if d.Subscriber != "settle" {
			continue
		}
		for i := 1; i < len(d.History) && i <= len(steps); i++ {
			if gap := d.History[i].StartedAt.Sub(d.History[i-1].StartedAt); gap < steps[i-1]-50*time.Millisecond {
				t.Errorf("settle attempt %d came %v after the one before, sooner than the schedule's %v", i+1, gap, steps[i-1])
			}
		}
		break
	}
}
