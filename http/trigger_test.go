package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// quietTrigger is a shared trigger that answers everything and holds
// nothing.
type quietTrigger struct{}

func (quietTrigger) Add(context.Context, []engine.TriggerDue) error { return nil }
func (quietTrigger) Claim(context.Context, time.Time, time.Duration, int) ([]string, bool, error) {
	return nil, true, nil
}
func (quietTrigger) Done(context.Context, []string) error { return nil }
func (quietTrigger) Release(context.Context, []string, time.Time) error {
	return nil
}
func (quietTrigger) Retry(context.Context, string, time.Time, []time.Duration) (int, bool, error) {
	return 1, false, nil
}
func (quietTrigger) Next(context.Context) (time.Time, bool, error) { return time.Time{}, false, nil }
func (quietTrigger) BeginSeed(context.Context) error               { return nil }
func (quietTrigger) MarkSeeded(context.Context) error              { return nil }
func (quietTrigger) ToNotify(context.Context) (int64, error)       { return 0, nil }
func (quietTrigger) Ping(context.Context) error                    { return nil }
func (quietTrigger) OrderID(string) (int64, bool)                  { return 0, false }
func (quietTrigger) Requeue(context.Context, []engine.TriggerDue) error {
	return nil
}

// TestTriggerRoute: PUT /v1/trigger names the shared trigger redis, as the
// docs, the flags and fired_by do, and takes its former name shared; every
// refusal names the request's field, mode.
func TestTriggerRoute(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, options{engine: func(c *engine.Config) { c.Trigger = quietTrigger{} }})
	status := func(r *response) engine.TriggerStatus {
		t.Helper()
		var st engine.TriggerStatus
		if err := json.Unmarshal(r.want(t, http.StatusOK).body, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, mode := range []string{"redis", "shared"} {
		st := status(e.do("PUT", "/v1/trigger", `{"mode": "`+mode+`"}`))
		if st.Mode != "redis" || st.Using != "redis" {
			t.Errorf("PUT mode %s: %+v, want mode and using redis", mode, st)
		}
		if st := status(e.do("GET", "/v1/trigger", "")); st.Mode != "redis" || st.Using != "redis" {
			t.Errorf("GET after mode %s: %+v, want mode and using redis", mode, st)
		}
	}
	if st := status(e.do("PUT", "/v1/trigger", `{"mode": "database"}`)); st.Mode != "database" || st.Using != "database" {
		t.Errorf("PUT mode database: %+v", st)
	}
	for _, body := range []string{`{"mode": "bogus"}`, `{"mode": 5}`, `{}`, `{"mode": ""}`} {
		p := e.do("PUT", "/v1/trigger", body).want(t, http.StatusBadRequest).problem(t)
		if p.Code != lapse.EINVALID || p.Field != "mode" || strings.Contains(p.Detail, "trigger_mode") {
			t.Errorf("PUT %s: %+v, want invalid about the field mode", body, p)
		}
	}
}
