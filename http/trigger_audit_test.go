package http_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
)

// TestTriggerSetNeedsItsAuditRow: the trigger's mode is kept in memory,
// not in the store, so no transaction carries its audit row with it. When
// the row cannot be written, PUT /v1/trigger answers 503, "nothing was
// changed", and nothing is: the mode stays as it was, rather than change
// with no row of who changed it (S9). Once the row can be written, the
// change is made, with its row.
func TestTriggerSetNeedsItsAuditRow(t *testing.T) {
	t.Parallel()
	cfg := access.Config{}
	g := guard(newEnvWith(t, options{access: &cfg, engine: func(c *engine.Config) { c.Trigger = quietTrigger{} }}))
	ops := bearer(g.key("ops", access.ScopeOperationsWrite, access.ScopeOrdersRead))
	mode := func() engine.TriggerMode {
		t.Helper()
		var st engine.TriggerStatus
		if err := json.Unmarshal(g.call("GET", "/v1/trigger", "", ops).want(t, http.StatusOK).body, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode
	}
	before := mode()
	if before == engine.TriggerDatabase {
		t.Fatalf("the trigger starts in mode %s", before)
	}
	g.rows()

	db, err := sql.Open("sqlite", g.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER audit_full BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'the audit log is full'); END`); err != nil {
		t.Fatal(err)
	}
	g.call("PUT", "/v1/trigger", `{"mode":"database"}`, ops).refused(t, http.StatusServiceUnavailable, lapse.EUNAVAILABLE)
	if got := mode(); got != before {
		t.Errorf("after a PUT answered \"nothing was changed\", the mode is %s, want %s", got, before)
	}
	if _, err := db.Exec(`DROP TRIGGER audit_full`); err != nil {
		t.Fatal(err)
	}
	g.wantRows()

	g.call("PUT", "/v1/trigger", `{"mode":"database"}`, ops).want(t, http.StatusOK)
	if got := mode(); got != engine.TriggerDatabase {
		t.Errorf("after the PUT the mode is %s", got)
	}
	rows := g.wantRows("trigger.set ops ok")
	if len(rows) == 1 && (rows[0].Target != "trigger" || string(rows[0].Params) != `{"mode":"database"}`) {
		t.Errorf("the row %+v", rows[0])
	}
	// A mode that is not one changes nothing and is in the log, refused.
	g.call("PUT", "/v1/trigger", `{"mode":"bogus"}`, ops).refused(t, http.StatusBadRequest, lapse.EINVALID)
	if got := mode(); got != engine.TriggerDatabase {
		t.Errorf("after a bad PUT the mode is %s", got)
	}
	g.wantRows("trigger.set ops 400")
}
