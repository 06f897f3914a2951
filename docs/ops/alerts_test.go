// Package ops holds the operators' files of Lapse (alert rules, the
// dashboard) and the tests that check them. It is a module of its own, so
// that Prometheus, whose rule parser and query engine the tests use, never
// enters Lapse's.
package ops

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alerts reads alerts.yml with Prometheus's own rule parser, failing the
// test on any error it reports (YAML, PromQL, templates, unknown fields).
func alerts(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile("alerts.yml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// TestAlertRulesParse: every rule parses and is an alert with what the
// on-call engineer needs: a severity, a summary and a runbook.
func TestAlertRulesParse(t *testing.T) {
	rs := alerts(t)
	if len(rs) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	for _, r := range rs {
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert", r.Expr)
			continue
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || len(r.Annotations["runbook"]) < 80 {
			t.Errorf("%s: needs a summary and a runbook that says what to do first", r.Alert)
		}
	}
}

// alertCase is a synthetic history of series for one alert: promqltest's
// load commands from time 0, and whether the alert fires at at when its
// rule is evaluated every minute from 0, as Prometheus would, its for
// clause included.
type alertCase struct {
	alert string
	what  string
	load  string
	at    time.Duration
	fires bool
}

var alertCases = []alertCase{
	{"LapseDown", "every node gone", `
load 1m
	up{job="lapse",instance="a"} 1x10 0x20
	up{job="lapse",instance="b"} 1x10 0x20
	lapse_due_open_orders{job="lapse",instance="a"} 0x10 _x20
	lapse_due_open_orders{job="lapse",instance="b"} 0x10 _x20
`, 20 * time.Minute, true},
	{"LapseDown", "one node of two gone", `
load 1m
	up{job="lapse",instance="a"} 1x10 0x20
	up{job="lapse",instance="b"} 1x30
	lapse_due_open_orders{job="lapse",instance="a"} 0x10 _x20
	lapse_due_open_orders{job="lapse",instance="b"} 0x30
`, 20 * time.Minute, false},
	{"LapseDown", "another job down", `
load 1m
	up{job="other",instance="c"} 1x10 0x20
	lapse_due_open_orders{job="lapse",instance="a"} 0x30
`, 20 * time.Minute, false},
	{"LapseDown", "every node gone 3 minutes ago", `
load 1m
	lapse_due_open_orders{job="lapse",instance="a"} 0x17 _x13
`, 20 * time.Minute, false},

	{"LapseScrapeFailing", "one node of two cannot be scraped", `
load 1m
	up{job="lapse",instance="a"} 1x10 0x20
	up{job="lapse",instance="b"} 1x30
	lapse_due_open_orders{job="lapse",instance="a"} 0x10 _x20
	lapse_due_open_orders{job="lapse",instance="b"} 0x30
`, 20 * time.Minute, true},
	{"LapseScrapeFailing", "another job's target down", `
load 1m
	up{job="other",instance="c"} 1x10 0x20
	up{job="lapse",instance="a"} 1x30
	lapse_due_open_orders{job="lapse",instance="a"} 0x30
`, 20 * time.Minute, false},
	{"LapseScrapeFailing", "every node scraped", `
load 1m
	up{job="lapse",instance="a"} 1x30
	lapse_due_open_orders{job="lapse",instance="a"} -1x30
`, 20 * time.Minute, false},

	{"LapseNothingClosing", "orders due and no firings", `
load 1m
	lapse_due_open_orders{job="lapse",instance="a"} 5+0x30
	lapse_due_open_orders{job="lapse",instance="b"} 5+0x30
	lapse_deadline_firings_total{job="lapse",instance="a",path="timer"} 0+0x30
	lapse_deadline_firings_total{job="lapse",instance="b",path="sweep"} 0+0x30
`, 20 * time.Minute, true},
	{"LapseNothingClosing", "orders due and firing on one node", `
load 1m
	lapse_due_open_orders{job="lapse",instance="a"} 5+0x30
	lapse_due_open_orders{job="lapse",instance="b"} 5+0x30
	lapse_deadline_firings_total{job="lapse",instance="a",path="timer"} 0+0x30
	lapse_deadline_firings_total{job="lapse",instance="b",path="timer"} 0+20x30
`, 20 * time.Minute, false},
	{"LapseNothingClosing", "firings stopped 4 minutes ago", `
load 1m
	lapse_due_open_orders{job="lapse",instance="a"} 5+0x30
	lapse_deadline_firings_total{job="lapse",instance="a",path="timer"} 0+20x16 320+0x14
`, 20 * time.Minute, false},
	{"LapseNothingClosing", "nothing due and nothing firing", `
load 1m
	lapse_due_open_orders{job="lapse",instance="a"} 0+0x30
	lapse_deadline_firings_total{job="lapse",instance="a",path="timer"} 0+0x30
`, 20 * time.Minute, false},
	{"LapseNothingClosing", "the database does not answer the due count (-1)", `
load 1m
	lapse_due_open_orders{job="lapse",instance="a"} -1+0x30
	lapse_deadline_firings_total{job="lapse",instance="a",path="timer"} 0+0x30
`, 20 * time.Minute, false},

	{"LapseOrderOverdue", "one order left behind while others close", `
load 1m
	lapse_due_oldest_seconds{job="lapse",instance="a"} 0x5 60+60x25
	lapse_due_oldest_seconds{job="lapse",instance="b"} 0x5 60+60x25
	lapse_deadline_firings_total{job="lapse",instance="a",path="timer"} 0+100x30
`, 25 * time.Minute, true},
	{"LapseOrderOverdue", "a burn-down that clears within 10 minutes", `
load 1m
	lapse_due_oldest_seconds{job="lapse",instance="a"} 0x5 60+60x8 0x16
`, 20 * time.Minute, false},
	{"LapseOrderOverdue", "the database does not answer (-1)", `
load 1m
	lapse_due_oldest_seconds{job="lapse",instance="a"} -1x30
`, 20 * time.Minute, false},

	{"LapseClaimerFailing", "passes failing", `
load 1m
	lapse_claimer_errors_total{job="lapse",instance="a",path="timer"} 0+3x30
	lapse_claimer_errors_total{job="lapse",instance="a",path="sweep"} 0+0x30
`, 20 * time.Minute, true},
	{"LapseClaimerFailing", "one failure long ago", `
load 1m
	lapse_claimer_errors_total{job="lapse",instance="a",path="timer"} 0+1x1 1+0x30
`, 20 * time.Minute, false},

	{"LapseCloseLagHigh", "closes between 100 and 250 ms late", `
load 1m
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.05"} 0+0x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.1"} 0+0x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.25"} 0+100x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="+Inf"} 0+100x30
`, 20 * time.Minute, true},
	{"LapseCloseLagHigh", "closes within 10 ms", `
load 1m
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.01"} 0+100x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.05"} 0+100x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.1"} 0+100x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.25"} 0+100x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="+Inf"} 0+100x30
`, 20 * time.Minute, false},
	{"LapseCloseLagHigh", "no closes at all", `
load 1m
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="0.1"} 0+0x30
	lapse_close_lag_seconds_bucket{job="lapse",instance="a",flow="checkout",le="+Inf"} 0+0x30
`, 20 * time.Minute, false},

	{"LapseClockSkew", "a node 2 s ahead", `
load 1m
	lapse_clock_skew_seconds{job="lapse",instance="a"} 0+0x10 2+0x20
	lapse_clock_skew_seconds{job="lapse",instance="b"} 0+0x30
`, 20 * time.Minute, true},
	{"LapseClockSkew", "a node 2 s behind", `
load 1m
	lapse_clock_skew_seconds{job="lapse",instance="a"} 0+0x10 -2+0x20
`, 20 * time.Minute, true},
	{"LapseClockSkew", "within NTP's few milliseconds", `
load 1m
	lapse_clock_skew_seconds{job="lapse",instance="a"} 0.003+0x30
	lapse_clock_skew_seconds{job="lapse",instance="b"} -0.004+0x30
`, 20 * time.Minute, false},
	{"LapseClockSkew", "off for a moment", `
load 1m
	lapse_clock_skew_seconds{job="lapse",instance="a"} 0+0x10 2+0x2 0+0x18
`, 20 * time.Minute, false},

	{"LapseProbeStale", "last success 15 minutes ago", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 60+0x30
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+60x5 300+0x25
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 1+1x5 6+0x25
	lapse_probe_runs_total{job="lapse",instance="a",result="failed"} 0+0x5 1+1x25
`, 20 * time.Minute, true},
	{"LapseProbeStale", "never succeeded, failing every minute", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 60+0x30
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+0x30
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 0+0x30
	lapse_probe_runs_total{job="lapse",instance="a",result="failed"} 1+1x30
`, 20 * time.Minute, true},
	{"LapseProbeStale", "succeeding every minute", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 60+0x30
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+60x30
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 1+1x30
`, 20 * time.Minute, false},
	{"LapseProbeStale", "one node stale, the other succeeding", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 60+0x30
	lapse_probe_interval_seconds{job="lapse",instance="b"} 60+0x30
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+60x5 300+0x25
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="b"} 0+60x30
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 1+1x5 6+0x25
	lapse_probe_runs_total{job="lapse",instance="b",result="ok"} 1+1x30
`, 20 * time.Minute, false},
	{"LapseProbeStale", "the probe turned off (--probe-interval 0)", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 0+0x30
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+0x30
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 0+0x30
	lapse_probe_runs_total{job="lapse",instance="a",result="failed"} 0+0x30
`, 20 * time.Minute, false},
	{"LapseProbeStale", "a probe every 10 minutes, succeeding", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 600+0x40
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+0x9 540+0x9 1140+0x9 1740+0x10
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 0+0x9 1+0x9 2+0x9 3+0x10
`, 38 * time.Minute, false},
	{"LapseProbeStale", "a probe every 10 minutes, failing since 40 minutes", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 600+0x60
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+0x9 540+0x51
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 0+0x9 1+0x51
	lapse_probe_runs_total{job="lapse",instance="a",result="failed"} 0+0x19 1+0x9 2+0x9 3+0x9 4+0x10
`, 55 * time.Minute, true},
	{"LapseProbeStale", "turned off by a reload after it ran", `
load 1m
	lapse_probe_interval_seconds{job="lapse",instance="a"} 60+0x5 0+0x25
	lapse_probe_last_success_timestamp_seconds{job="lapse",instance="a"} 0+60x5 300+0x25
	lapse_probe_runs_total{job="lapse",instance="a",result="ok"} 1+1x5 6+0x25
`, 20 * time.Minute, false},

	{"LapseDeadDeliveriesRising", "dead deliveries of the webhook growing", `
load 1m
	lapse_deliveries_by_subscriber{job="lapse",instance="a",subscriber="webhook",status="dead"} 0+0x10 1+1x20
	lapse_deliveries_by_subscriber{job="lapse",instance="a",subscriber="stock",status="dead"} 0+0x30
`, 15 * time.Minute, true},
	{"LapseDeadDeliveriesRising", "dead deliveries many but steady", `
load 1m
	lapse_deliveries_by_subscriber{job="lapse",instance="a",subscriber="webhook",status="dead"} 40+0x30
`, 20 * time.Minute, false},
	{"LapseDeadDeliveriesRising", "pending deliveries growing", `
load 1m
	lapse_deliveries_by_subscriber{job="lapse",instance="a",subscriber="webhook",status="pending"} 0+50x30
	lapse_deliveries_by_subscriber{job="lapse",instance="a",subscriber="webhook",status="dead"} 0+0x30
`, 20 * time.Minute, false},

	{"LapseTriggerDegraded", "degraded for 20 minutes", `
load 1m
	lapse_trigger_degraded{job="lapse",instance="a"} 1+0x30
`, 20 * time.Minute, true},
	{"LapseTriggerDegraded", "degraded for 5 minutes, then back", `
load 1m
	lapse_trigger_degraded{job="lapse",instance="a"} 0+0x5 1+0x5 0+0x20
`, 20 * time.Minute, false},
	{"LapseTriggerDegraded", "in charge", `
load 1m
	lapse_trigger_degraded{job="lapse",instance="a"} 0+0x30
`, 20 * time.Minute, false},

	{"LapsePoolSaturated", "every connection lent and requests waiting", `
load 1m
	lapse_db_pool_connections{job="lapse",instance="a",pool="main",state="in_use"} 10+0x30
	lapse_db_pool_connections{job="lapse",instance="a",pool="main",state="idle"} 0+0x30
	lapse_db_pool_max_connections{job="lapse",instance="a",pool="main"} 10+0x30
	lapse_db_pool_wait_seconds_total{job="lapse",instance="a",pool="main"} 0+30x30
`, 20 * time.Minute, true},
	{"LapsePoolSaturated", "every connection lent, nobody waiting", `
load 1m
	lapse_db_pool_connections{job="lapse",instance="a",pool="writer",state="in_use"} 1+0x30
	lapse_db_pool_max_connections{job="lapse",instance="a",pool="writer"} 1+0x30
	lapse_db_pool_wait_seconds_total{job="lapse",instance="a",pool="writer"} 0+0.5x30
`, 20 * time.Minute, false},
	{"LapsePoolSaturated", "waits on a pool with room", `
load 1m
	lapse_db_pool_connections{job="lapse",instance="a",pool="main",state="in_use"} 3+0x30
	lapse_db_pool_max_connections{job="lapse",instance="a",pool="main"} 10+0x30
	lapse_db_pool_wait_seconds_total{job="lapse",instance="a",pool="main"} 0+30x30
`, 20 * time.Minute, false},

	{"LapseShedding", "10 requests shed a second", `
load 1m
	lapse_http_shed_total{job="lapse",instance="a",route="POST /v1/orders"} 0+600x30
	lapse_http_shed_total{job="lapse",instance="a",route="GET /v1/orders"} 0+0x30
`, 20 * time.Minute, true},
	{"LapseShedding", "nothing shed", `
load 1m
	lapse_http_shed_total{job="lapse",instance="a",route="POST /v1/orders"} 0+0x30
`, 20 * time.Minute, false},
}

// TestAlertsFire evaluates each alert on its synthetic histories: it fires
// when it should and stays silent when it should not. Every alert of the
// file has both kinds of history, so that an alert added without them
// fails here.
func TestAlertsFire(t *testing.T) {
	byName := map[string]rulefmt.Rule{}
	for _, r := range alerts(t) {
		byName[r.Alert] = r
	}
	for name := range byName {
		if !slices.ContainsFunc(alertCases, func(c alertCase) bool { return c.alert == name && c.fires }) ||
			!slices.ContainsFunc(alertCases, func(c alertCase) bool { return c.alert == name && !c.fires }) {
			t.Errorf("%s has no history on which it fires, or none on which it stays silent", name)
		}
	}
	p := parser.NewParser(parser.Options{})
	for _, c := range alertCases {
		t.Run(c.alert+"/"+c.what, func(t *testing.T) {
			r, ok := byName[c.alert]
			if !ok {
				t.Fatalf("no alert %s in alerts.yml", c.alert)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			storage := promqltest.LoadedStorage(t, c.load)
			t.Cleanup(func() { storage.Close() })
			engine := promqltest.NewTestEngine(t, false, 0, 1_000_000)
			query := rules.EngineQueryFunc(engine, storage)
			rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
			var fired []string
			for at := time.Duration(0); at <= c.at; at += time.Minute {
				if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(at), query, nil, 0); err != nil {
					t.Fatalf("evaluating at %v: %v", at, err)
				}
			}
			for _, a := range rule.ActiveAlerts() {
				if a.State != rules.StateFiring {
					continue
				}
				summary := a.Annotations.Get("summary")
				if strings.Contains(summary, "error expanding template") || strings.Contains(summary, "<no value>") {
					t.Errorf("summary of %s: %s", a.Labels, summary)
				}
				fired = append(fired, a.Labels.String()+" "+summary)
			}
			if got := len(fired) > 0; got != c.fires {
				t.Errorf("at %v: firing %q; want firing %v", c.at, fired, c.fires)
			}
		})
	}
}
