package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/storetest"
)

// TestMigrateAuditSeal upgrades a schema whose audit log was written
// before rows were sealed behind the writes (migrations up to 0019), with
// rows in it: they stay sealed and verify, and new rows get ids from past
// them and seal onto them.
func TestMigrateAuditSeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.PostgresSchema(t)
	conn := connect(t, dsn)
	migrateBefore(t, conn, 20)
	old := storetest.UpgradeAuditRows(7)
	for _, e := range old {
		if _, err := conn.Exec(ctx, `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target,
			params, result, reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
			e.Seq, e.At, e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, e.Params, e.Result,
			e.Reason, e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr, e.PrevHash, e.Hash); err != nil {
			t.Fatal(err)
		}
	}
	last := old[len(old)-1]
	if _, err := conn.Exec(ctx, `UPDATE audit_head SET seq = $1, hash = $2`, last.Seq, last.Hash); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dsn, postgres.Config{MaxConns: 4}) // migrates
	storetest.CheckAuditUpgrade(t, s, old)
}

// migrateBefore applies the migrations of the files before version on
// conn, as Migrate does, and records them.
func migrateBefore(t *testing.T, conn *pgx.Conn, version int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE lapse_migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
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
		if _, err := conn.Exec(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO lapse_migrations (version) VALUES ($1)`, v); err != nil {
			t.Fatal(err)
		}
	}
}
