package main_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scraped is one sample of a scrape.
type scraped struct {
	name   string
	labels map[string]string
	value  float64
}

var scrapeLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads url's metrics in the text format: the samples, and every
// name it names (families in TYPE lines, and samples).
func scrape(t *testing.T, url string) ([]scraped, map[string]bool) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	var out []scraped
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[cut+1:], 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", line, err)
		}
		s := scraped{name: line[:cut], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			s.name = line[:i]
			for _, m := range scrapeLabel.FindAllStringSubmatch(line[i:cut], -1) {
				s.labels[m[1]] = m[2]
			}
		}
		names[s.name] = true
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out, names
}

// sum adds up the samples of name whose labels include want.
func sum(ss []scraped, name string, want map[string]string) (total float64, n int) {
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		n++
	}
	return total, n
}

// opsMetricNames are the lapse_ metric names that the alert rules and the
// dashboard of docs/ops use.
func opsMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, f := range []string{"../../docs/ops/alerts.yml", "../../docs/ops/grafana/lapse.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		found := regexp.MustCompile(`\blapse_[a-z0-9_]*[a-z0-9]`).FindAllString(string(b), -1)
		if len(found) < 5 {
			t.Fatalf("%s names %d metrics", f, len(found))
		}
		for _, n := range found {
			names[n] = true
		}
	}
	return names
}

// TestMetricsExported runs lapse serve with a webhook that takes one
// order's events, refuses another's for good and fails a third's for now,
// makes some requests, and scrapes /metrics: every metric docs/ops uses is
// exported, and the API's, the pools', the deliveries' and the reviews'
// carry what happened.
func TestMetricsExported(t *testing.T) {
	t.Parallel()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(body), "MX-dead"):
			w.WriteHeader(http.StatusBadRequest) // refused for good: the delivery dies
		case strings.Contains(string(body), "MX-later"):
			w.WriteHeader(http.StatusServiceUnavailable) // retried in a minute
		}
	}))
	t.Cleanup(hook.Close)
	p := startServe(t, t.TempDir(), "--webhook", hook.URL, "--webhook-secret", "metrics-secret-0123456789",
		"--delivery-poll", "100ms", "--sandbox")

	for _, no := range []string{"MX-ok", "MX-dead", "MX-later"} {
		body := map[string]any{"order_no": no, "flow": "checkout", "user_id": "u1", "amount": 1999, "currency": "CNY", "ttl": "1s"}
		if code := call(t, "POST", p.URL+"/v1/orders", body, nil); code != http.StatusCreated {
			t.Fatalf("create %s = %d", no, code)
		}
	}
	if code := call(t, "GET", p.URL+"/v1/orders/MX-ok", nil, nil); code != http.StatusOK {
		t.Fatalf("get = %d", code)
	}
	if code := call(t, "GET", p.URL+"/v1/orders/MX-none", nil, nil); code != http.StatusNotFound {
		t.Fatalf("get a missing order = %d", code)
	}

	// The orders close a second after their creation, and their events
	// reach the webhook: wait for the dead delivery, the pending one and a
	// close.
	var ss []scraped
	var names map[string]bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		ss, names = scrape(t, p.URL+"/metrics")
		dead, _ := sum(ss, "lapse_deliveries_by_subscriber", map[string]string{"subscriber": "webhook", "status": "dead"})
		pending, _ := sum(ss, "lapse_deliveries_by_subscriber", map[string]string{"subscriber": "webhook", "status": "pending"})
		closed, _ := sum(ss, "lapse_close_lag_seconds_count", nil)
		if dead >= 1 && pending >= 1 && closed >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30 s: %v dead and %v pending webhook deliveries, %v closes; want 1, 1 and 3", dead, pending, closed)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for n := range opsMetricNames(t) {
		if !names[n] {
			t.Errorf("docs/ops uses %s, which lapse serve does not export", n)
		}
	}

	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
		max    float64
	}{
		{"lapse_http_requests_total", map[string]string{"route": "POST /v1/orders", "code": "201"}, 3, 3},
		{"lapse_http_requests_total", map[string]string{"route": "GET /v1/orders/{order_no}", "code": "200"}, 1, 1},
		{"lapse_http_requests_total", map[string]string{"route": "GET /v1/orders/{order_no}", "code": "404"}, 1, 1},
		{"lapse_http_request_seconds_count", map[string]string{"route": "POST /v1/orders"}, 3, 3},
		{"lapse_http_shed_total", map[string]string{"route": "POST /v1/orders"}, 0, 0},
		{"lapse_db_pool_max_connections", map[string]string{"pool": "writer"}, 1, 1},
		{"lapse_db_pool_max_connections", map[string]string{"pool": "reader"}, 1, 1e6},
		{"lapse_db_pool_connections", map[string]string{"pool": "writer"}, 1, 1}, // its one connection, in use or idle
		// MX-dead's events after the first wait behind it or die too.
		{"lapse_deliveries_by_subscriber", map[string]string{"subscriber": "webhook", "status": "dead"}, 1, 10},
		{"lapse_deliveries_by_subscriber", map[string]string{"subscriber": "webhook", "status": "pending"}, 1, 10},
		{"lapse_delivery_attempts_total", map[string]string{"subscriber": "webhook", "outcome": "ok"}, 1, 1e6},
		{"lapse_delivery_attempts_total", map[string]string{"subscriber": "webhook", "outcome": "refused"}, 1, 10},
		{"lapse_delivery_held_seconds_total", map[string]string{"subscriber": "webhook"}, 0, 1e6}, // no backlog burned here
		{"lapse_reviews_open", map[string]string{"category": "notification_failed"}, 1, 10},
		{"lapse_reviews_open", map[string]string{"category": "callback_mismatch"}, 0, 0},
		{"lapse_deadline_firings_total", nil, 3, 3},
		{"lapse_claimer_errors_total", nil, 0, 0},
		{"lapse_due_open_orders", nil, 0, 0},
	} {
		v, n := sum(ss, c.name, c.labels)
		if n == 0 || v < c.min || v > c.max {
			t.Errorf("%s%v = %v over %d series; want %v to %v", c.name, c.labels, v, n, c.min, c.max)
		}
	}
	for _, s := range ss {
		if r := s.labels["route"]; strings.Contains(r, "MX-") {
			t.Errorf("a route label is a raw path: %s%v", s.name, s.labels)
		}
	}
}
