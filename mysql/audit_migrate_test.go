package mysql_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lapsehq/lapse/internal/column"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/storetest"
)

// TestMigrateAuditSeal upgrades a database whose audit log was written
// before rows were sealed behind the writes (migrations up to 0019), with
// rows in it: they stay sealed and verify, and new rows get ids from past
// them and seal onto them.
func TestMigrateAuditSeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.MySQLDatabase(t)
	db, err := mysql.Open(ctx, dsn, mysql.Config{MaxConns: 2}) // not migrated
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migrateBefore(t, db, 20)
	old := storetest.UpgradeAuditRows(7)
	for _, e := range old {
		if _, err := db.Exec(ctx, `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target,
			params, result, reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Seq, column.Micros(e.At), e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, e.Params, []byte(e.Result),
			[]byte(e.Reason), e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr, e.PrevHash, e.Hash); err != nil {
			t.Fatal(err)
		}
	}
	last := old[len(old)-1]
	if _, err := db.Exec(ctx, `UPDATE audit_head SET seq = ?, hash = ?`, last.Seq, last.Hash); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dsn, mysql.Config{MaxConns: 4}) // migrates
	storetest.CheckAuditUpgrade(t, s, old)
}

// migrateBefore applies the migrations of the files before version to db,
// statement by statement as Migrate does, and records them.
func migrateBefore(t *testing.T, db *mysql.Store, version int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE lapse_migrations (version INT NOT NULL, statements INT NOT NULL,
		applied_at BIGINT NOT NULL, PRIMARY KEY (version)) ENGINE = InnoDB`); err != nil {
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
		stmts := mysql.Statements(string(body))
		for _, q := range stmts {
			if _, err := db.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", f.Name(), err)
			}
		}
		if _, err := db.Exec(ctx, `INSERT INTO lapse_migrations (version, statements, applied_at) VALUES (?, ?, 0)`, v, len(stmts)); err != nil {
			t.Fatal(err)
		}
	}
}
