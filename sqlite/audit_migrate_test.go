package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
	"github.com/lapsehq/lapse/storetest"
)

// TestMigrateAuditSeal upgrades a database whose audit log was written
// before rows were sealed behind the writes (migrations up to 0019), with
// rows in it: they stay sealed and verify, and new rows seal onto them.
func TestMigrateAuditSeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lapse.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migrateBefore(t, db, 20)
	old := storetest.UpgradeAuditRows(7)
	for _, e := range old {
		if _, err := db.ExecContext(ctx, `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target,
			params, result, reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Seq, column.Micros(e.At), e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, e.Params, e.Result,
			e.Reason, e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr, e.PrevHash, e.Hash); err != nil {
			t.Fatal(err)
		}
	}
	last := old[len(old)-1]
	if _, err := db.ExecContext(ctx, `UPDATE audit_head SET seq = ?, hash = ?`, last.Seq, last.Hash); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, path) // migrates
	storetest.CheckAuditUpgrade(t, s, old)
	if _, err := s.AuditList(ctx, &lapse.AuditListParams{ActorName: "alice", Descending: true, Cursor: 5}); err != nil {
		t.Errorf("AuditList through the rebuilt indexes: %v", err)
	}
}

// migrateBefore applies the migrations of the files before version to db,
// as Migrate does, and records them.
func migrateBefore(t *testing.T, db *sql.DB, version int64) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE lapse_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		v, err := strconv.ParseInt(f.Name()[:4], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if v >= version {
			continue
		}
		body, err := os.ReadFile(filepath.Join("migrations", f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		if _, err := db.Exec(`INSERT INTO lapse_migrations (version, applied_at) VALUES (?, 0)`, v); err != nil {
			t.Fatal(err)
		}
	}
}
