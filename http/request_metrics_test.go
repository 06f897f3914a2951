package http_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// sample returns the value of the metric of family name whose labels include
// want (a counter's or a gauge's value, a histogram's count), and whether
// there is one.
func sample(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestRequestMetrics: requests are counted by route pattern and status,
// timed by route, and shed requests counted by route; a raw path never
// becomes a label.
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	e := newEnvWith(t, options{
		reg:  reg,
		cfg:  lapsehttp.Config{Gatherer: reg, Registerer: reg, MaxInFlight: 1},
		wrap: func(s lapse.Store) lapse.Store { return &slowGet{Store: s, hold: hold, held: held} },
	})
	if m, ok := sample(t, reg, "lapse_http_shed_total", map[string]string{"route": "POST /v1/orders"}); !ok || m != 0 {
		t.Errorf("shed of POST /v1/orders before any request = %v, %v; want a 0", m, ok)
	}
	e.do("POST", "/v1/orders", createBody("rm-1", "")).want(t, http.StatusCreated)
	e.do("GET", "/v1/orders/rm-1", "").want(t, http.StatusOK)
	e.do("GET", "/v1/orders/rm-2", "").want(t, http.StatusNotFound)
	e.do("GET", "/v1/no-such-route/rm-1", "").want(t, http.StatusNotFound)

	done := make(chan *response)
	go func() { done <- e.do("GET", "/v1/orders/SLOW", "") }()
	<-held
	e.do("POST", "/v1/orders/rm-1/events", `{"event":"CANCEL"}`).want(t, http.StatusTooManyRequests)
	close(hold)
	(<-done).want(t, http.StatusNotFound)

	for _, c := range []struct {
		route, code string
		n           float64
	}{
		{"POST /v1/orders", "201", 1},
		{"GET /v1/orders/{order_no}", "200", 1},
		{"GET /v1/orders/{order_no}", "404", 2}, // rm-2 and SLOW
		{"unmatched", "404", 1},
		{"POST /v1/orders/{order_no}/events", "429", 1},
	} {
		m, ok := sample(t, reg, "lapse_http_requests_total", map[string]string{"route": c.route, "code": c.code})
		if !ok || m != c.n {
			t.Errorf("lapse_http_requests_total{route=%q,code=%q} = %v, %v; want %v", c.route, c.code, m, ok, c.n)
		}
	}
	if m, ok := sample(t, reg, "lapse_http_request_seconds", map[string]string{"route": "GET /v1/orders/{order_no}"}); !ok || m != 3 {
		t.Errorf("lapse_http_request_seconds of GET /v1/orders/{order_no} = %v, %v; want 3 observations", m, ok)
	}
	if m, ok := sample(t, reg, "lapse_http_shed_total", map[string]string{"route": "POST /v1/orders/{order_no}/events"}); !ok || m != 1 {
		t.Errorf("lapse_http_shed_total of the shed route = %v, %v; want 1", m, ok)
	}
	if _, ok := sample(t, reg, "lapse_http_shed_total", map[string]string{"route": "GET /healthz"}); ok {
		t.Errorf("a route that is never shed has a shed series")
	}
	body := string(e.do("GET", "/metrics", "").want(t, http.StatusOK).body)
	for _, raw := range []string{"rm-1", "rm-2", "SLOW", "no-such-route"} {
		if strings.Contains(body, raw) {
			t.Errorf("the metrics name the path %q:\n%s", raw, body)
		}
	}
}
