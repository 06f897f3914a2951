package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
)

// TestAuditVerifyRowOutsideChain: a row written into audit_log by hand with
// seq 0, a copy of a sealed row under another actor's name, is in the log
// but covered by no hash; AuditVerify names it.
func TestAuditVerifyRowOutsideChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.MySQLDatabase(t)
	s := openStore(t, dsn, mysql.Config{MaxConns: 4})
	for range 3 {
		e := &lapse.AuditEntry{At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), ActorKind: "cli", ActorName: "root", Action: "test", Result: "ok"}
		if err := lapse.AuditRecord(ctx, s, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lapse.AuditSeal(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	if c, err := lapse.AuditVerify(ctx, s, 2); err != nil || c.Rows != 3 {
		t.Fatalf("AuditVerify before the edit = %+v, %v", c, err)
	}
	if _, err := s.Exec(ctx, `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target,
		params, result, reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash)
		SELECT 0, at, actor_kind, actor_id, 'alice', role, 'refund.create', target, params, result, reason, second_factor,
		approver, approval_id, batch, client_addr, prev_hash, hash FROM audit_log WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	_, err := lapse.AuditVerify(ctx, s, 2)
	var brk *lapse.AuditBreak
	if !errors.As(err, &brk) || brk.Seq != 0 || !strings.Contains(brk.Reason, "numbered 0, outside the chain") {
		t.Errorf("AuditVerify after a row numbered 0 was added = %v; want a break naming it", err)
	}
}
