package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/sqlite"
)

// Every statement of OutboxPrune finds its rows by an index, and so do the
// foreign key checks of its deletes: none reads a whole table, only the
// list of ids it is given. Both on an empty database and on an analyzed
// one where every delivery is done and has an effect row.
func TestOutboxPruneUsesIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	s := openStore(t, path)
	want := map[string][]string{
		"read": {"SEARCH o USING INTEGER PRIMARY KEY (rowid>?)",
			"sqlite_autoindex_deliveries_1 (event_id=?)", "reviews_order_idx (order_id=?)"},
		"attempts":   {"SEARCH delivery_attempts USING PRIMARY KEY (delivery_id=?)", "sqlite_autoindex_deliveries_1 (event_id=?)"},
		"effects":    {"SEARCH effects USING PRIMARY KEY (consumer=? AND event_id=?)", "sqlite_autoindex_deliveries_1 (event_id=?)"},
		"deliveries": {"SEARCH deliveries USING", "sqlite_autoindex_deliveries_1 (event_id=?)"},
		"events":     {"SEARCH outbox USING", "sqlite_autoindex_outbox_1 (id=?)"},
	}
	check := func(when string) {
		t.Helper()
		for name, q := range sqlite.PruneStatements {
			args := []any{`["e-1", "e-2"]`}
			if name == "read" {
				args = []any{int64(0), int64(0), 100}
			}
			plan := queryPlan(t, s, q, args...)
			for _, step := range strings.Split(plan, "; ") {
				if strings.HasPrefix(step, "SCAN ") && !strings.HasPrefix(step, "SCAN json_each ") {
					t.Errorf("%s: the %s statement of a prune reads a whole table (%s): %q", when, name, step, plan)
				}
			}
			for _, w := range want[name] {
				if !strings.Contains(plan, w) {
					t.Errorf("%s: the %s statement of a prune has plan %q, without %q", when, name, plan, w)
				}
			}
		}
	}
	check("empty")

	createWithSubs(t, s, "PI", 500, "sink")
	deliverAll(t, s, base, 500, "sink", func(d *lapse.Delivery) {
		if _, err := s.EffectClaim(ctx, "sink", d.EventID, base); err != nil {
			t.Fatal(err)
		}
	})
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	check("analyzed")
}
