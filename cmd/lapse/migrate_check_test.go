package main_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsRefuseOtherSchema: the commands that use a database without
// migrating it (apikey, operator, audit, close, reconcile) refuse one that a
// newer Lapse migrated, naming its migration, rather than read or write a
// schema this build does not know; and one not yet migrated to this build,
// saying that lapse migrate applies it.
func TestCommandsRefuseOtherSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "lapse.db")
	if out, errOut, ok := lapseRun(t, dir, "migrate", "--db", db); !ok {
		t.Fatalf("lapse migrate: %s%s", out, errOut)
	}
	sqldb, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	commands := [][]string{
		{"apikey", "list"},
		{"operator", "list"},
		{"audit", "verify"},
		{"close", "--user", "u-1", "--dry-run"},
		{"reconcile"},
	}
	for _, c := range []struct {
		change, want string
	}{
		{"INSERT INTO lapse_migrations (version, applied_at) VALUES (9999, 0)", "migration 9999"},
		{"DELETE FROM lapse_migrations WHERE version IN (9999, (SELECT max(version) FROM lapse_migrations WHERE version < 9999))", "lapse migrate"},
	} {
		if _, err := sqldb.ExecContext(context.Background(), c.change); err != nil {
			t.Fatal(err)
		}
		for _, args := range commands {
			out, errOut, ok := lapseRun(t, dir, append(args, "--db", db)...)
			if ok || !strings.Contains(errOut, c.want) {
				t.Errorf("after %s, lapse %s = ok %v, stdout %q, stderr %q; want it refused with %q",
					c.change, strings.Join(args, " "), ok, out, errOut, c.want)
			}
		}
	}
}
