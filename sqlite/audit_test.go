package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/sqlite"
)

// Appenders and sealers of two stores on one file, as two processes hold
// it: SQLite's write lock is the file's, not the store's, so the sealers
// take turns and the chain neither forks nor skips.
func TestAuditTwoStores(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lapse.db")
	a, b := openStore(t, path), openStore(t, path)
	ctx := context.Background()
	const each = 25
	var wg sync.WaitGroup
	for w, s := range []*sqlite.Store{a, b, a, b} {
		wg.Go(func() {
			for i := range each {
				e := &lapse.AuditEntry{At: base, ActorKind: "system", ActorID: fmt.Sprint(w), Action: "test", Target: fmt.Sprint(i)}
				if err := lapse.AuditRecord(ctx, s, e); err != nil {
					t.Errorf("AuditRecord: %v", err)
					return
				}
				if _, err := lapse.AuditSeal(ctx, s, 3); err != nil {
					t.Errorf("AuditSeal: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for name, s := range map[string]*sqlite.Store{"a": a, "b": b} {
		if c, err := lapse.AuditVerify(ctx, s, 0); c.Rows != 4*each || c.Unsealed != 0 || err != nil {
			t.Errorf("%s: AuditVerify = %+v, %v; want %d rows sealed", name, c, err, 4*each)
		}
	}
}

// TestAuditVerifyBreaks edits the file as someone with the database could,
// each way a chain can be broken, and checks that AuditVerify names the
// first row that does not match; a row edited before it is sealed is
// beyond its reach until then, and sealed as it is.
func TestAuditVerifyBreaks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name, sql string
		seq       int64
		reason    string
	}{
		{"content", `UPDATE audit_log SET result = 'ok, honestly' WHERE seq = 3`, 3, "its content does not match its hash"},
		{"hash", `UPDATE audit_log SET hash = x'00' WHERE seq = 3`, 3, "its content does not match its hash"},
		{"removed", `DELETE FROM audit_log WHERE seq = 2`, 2, "row 2 is missing: the next row is 3"},
		{"removed from the end", `DELETE FROM audit_log WHERE seq = 5`, 5, "the log's head is row 5, but the rows end at 4"},
		{"renumbered", `UPDATE audit_log SET seq = 7 WHERE seq = 5`, 5, "row 5 is missing: the next row is 7"},
		{"reordered", `UPDATE audit_log SET seq = -2 WHERE seq = 2; UPDATE audit_log SET seq = 2 WHERE seq = 3;
			UPDATE audit_log SET seq = 3 WHERE seq = -2`, 2, "its previous hash is not the hash of the row before it"},
		{"unsealed again", `UPDATE audit_log SET seq = NULL, prev_hash = NULL, hash = NULL WHERE seq = 4`, 4, "row 4 is missing"},
		{"added past the head", `UPDATE audit_head SET seq = 4, hash = (SELECT hash FROM audit_log WHERE seq = 4)`, 5,
			"the log's head is row 4, but the rows go on to 5"},
		{"head", `UPDATE audit_head SET hash = x'00'`, 5, "its hash is not the log's head"},
		{"head removed", `DELETE FROM audit_head`, 5, "the log's head is gone"},
		{"added before row 1", `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result,
			reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
			SELECT 0, at, actor_kind, actor_id, 'alice', role, 'refund.create', target, params, result, reason, second_factor,
			approver, approval_id, batch, client_addr, prev_hash, hash FROM audit_log WHERE seq = 5`, 0, "numbered 0, outside the chain"},
		{"added below 0", `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result,
			reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
			SELECT -7, at, actor_kind, actor_id, 'alice', role, 'refund.create', target, params, result, reason, second_factor,
			approver, approval_id, batch, client_addr, prev_hash, hash FROM audit_log WHERE seq = 5`, -7, "numbered -7, outside the chain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "lapse.db")
			s := openStore(t, path)
			for i := range 5 {
				e := &lapse.AuditEntry{At: base, ActorKind: "cli", ActorName: "root", Action: "test", Target: fmt.Sprint(i), Result: "ok"}
				if err := lapse.AuditRecord(ctx, s, e); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := lapse.AuditSeal(ctx, s, 2); err != nil {
				t.Fatal(err)
			}
			edit(t, path, c.sql)
			got, err := lapse.AuditVerify(ctx, s, 2)
			var brk *lapse.AuditBreak
			if !errors.As(err, &brk) || brk.Seq != c.seq || !strings.Contains(brk.Reason, c.reason) {
				t.Errorf("AuditVerify after an edit = %+v, %v; want a break at row %d: %s", got, err, c.seq, c.reason)
			}
		})
	}

	t.Run("before sealing", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "lapse.db")
		s := openStore(t, path)
		e := &lapse.AuditEntry{At: base, ActorKind: "cli", ActorName: "root", Action: "refund.create", Result: "ok"}
		if err := lapse.AuditRecord(ctx, s, e); err != nil {
			t.Fatal(err)
		}
		if c, err := lapse.AuditVerify(ctx, s, 0); c.Rows != 0 || c.Unsealed != 1 || !c.OldestUnsealed.Equal(base) || err != nil {
			t.Errorf("AuditVerify of an unsealed row = %+v, %v; want it counted unsealed, from %v", c, err, base)
		}
		edit(t, path, `UPDATE audit_log SET result = 'lapse: forbidden'`)
		if _, err := lapse.AuditSeal(ctx, s, 0); err != nil {
			t.Fatal(err)
		}
		es, err := s.AuditList(ctx, &lapse.AuditListParams{})
		if err != nil || len(es) != 1 || es[0].Result != "lapse: forbidden" {
			t.Fatalf("rows = %+v, %v", es, err)
		}
		if c, err := lapse.AuditVerify(ctx, s, 0); c.Rows != 1 || c.Unsealed != 0 || err != nil {
			t.Errorf("AuditVerify = %+v, %v; want the row sealed as it was edited", c, err)
		}
	})
}

// edit runs a statement on the file at path through a connection of its
// own.
func edit(t *testing.T, path, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}
