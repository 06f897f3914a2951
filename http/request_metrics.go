package http

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// unmatched is the route label of requests that match no route.
const unmatched = "unmatched"

// requestMetrics are the API's metrics, labelled by route: the ServeMux
// pattern ("POST /v1/orders/{order_no}/events"), never the path, so that
// there are as many series as routes.
type requestMetrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	shed     *prometheus.CounterVec
}

func newRequestMetrics(reg prometheus.Registerer, patterns []string) (*requestMetrics, error) {
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_http_requests_total",
			Help: "API requests answered, by route (the pattern it matched, or unmatched) and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lapse_http_request_seconds",
			Help:    "Time to answer an API request, from its headers to its answer, by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lapse_http_shed_total",
			Help: "API requests shed because every in-flight slot was taken (429, or 503 for a payment callback), by route.",
		}, []string{"route"}),
	}
	// Every route that can be shed starts at zero, so that a rate of sheds
	// is 0 rather than absent before the first.
	for _, p := range patterns {
		if sheddable(p) {
			m.shed.WithLabelValues(p)
		}
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds, m.shed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// sheddable reports whether requests of pattern count against the in-flight
// limit: the /v1/ routes, not the probes, the document or /metrics.
func sheddable(pattern string) bool {
	_, path, _ := strings.Cut(pattern, " ")
	return strings.HasPrefix(path, "/v1/")
}

// observe records one answered request.
func (m *requestMetrics) observe(route string, code int, took time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.seconds.WithLabelValues(route).Observe(took.Seconds())
}

// routeOf is the route label of r: the pattern the mux matched, or would
// match for a request answered before it reached the mux (a shed one).
func (s *Server) routeOf(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	if _, p := s.mux.Handler(r); p != "" {
		return p
	}
	return unmatched
}
