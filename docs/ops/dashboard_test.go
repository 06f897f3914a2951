package ops

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// dashboard is what the test reads of grafana/lapse.json.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricName = regexp.MustCompile(`\blapse_[a-z0-9_]+`)

// TestDashboard: the dashboard is JSON, every query of every panel parses
// as PromQL (Grafana's variables put in), and it shows what the on-call
// engineer looks at first.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/lapse.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/lapse.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", "lapse")
	p := parser.NewParser(parser.Options{})
	shown := map[string]bool{}
	for _, pn := range d.Panels {
		if pn.Type == "row" {
			continue
		}
		if len(pn.Targets) == 0 {
			t.Errorf("panel %q has no query", pn.Title)
		}
		for _, tg := range pn.Targets {
			if _, err := p.ParseExpr(vars.Replace(tg.Expr)); err != nil {
				t.Errorf("panel %q: %q: %v", pn.Title, tg.Expr, err)
			}
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				shown[m] = true
			}
		}
	}
	for _, m := range []string{
		"lapse_deadline_firings_total", "lapse_close_lag_seconds_bucket", "lapse_due_open_orders",
		"lapse_deliveries_by_subscriber", "lapse_http_requests_total", "lapse_http_request_seconds_bucket", "lapse_http_shed_total",
		"lapse_db_pool_connections", "lapse_db_pool_max_connections", "lapse_db_pool_wait_seconds_total",
		"lapse_probe_last_success_timestamp_seconds", "lapse_probe_step_seconds_bucket", "lapse_reviews_open",
		"lapse_payments_total", "lapse_refunds_total", "lapse_trigger_degraded",
	} {
		if !shown[m] {
			t.Errorf("the dashboard shows no %s", m)
		}
	}
}
