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

// TestAuditHeadGone: the log's head removed by hand is not taken for a
// head another sealer holds: a sealer fails, naming it (ErrAuditHeadGone),
// rather than leave every new row unsealed, each pass, as if another were
// sealing them; and AuditVerify names it as a break of the chain.
func TestAuditHeadGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.MySQLDatabase(t)
	s := openStore(t, dsn, mysql.Config{MaxConns: 4})
	record := func() {
		t.Helper()
		e := &lapse.AuditEntry{At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), ActorKind: "cli", ActorName: "root", Action: "test", Result: "ok"}
		if err := lapse.AuditRecord(ctx, s, e); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		record()
	}
	if _, err := lapse.AuditSeal(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, `DELETE FROM audit_head`); err != nil {
		t.Fatal(err)
	}
	record()
	if n, err := lapse.AuditSeal(ctx, s, 0); n != 0 || !errors.Is(err, lapse.ErrAuditHeadGone) {
		t.Errorf("AuditSeal with the head gone = %d, %v; want ErrAuditHeadGone", n, err)
	}
	_, err := lapse.AuditVerify(ctx, s, 2)
	var brk *lapse.AuditBreak
	if !errors.As(err, &brk) || brk.Seq != 3 || !strings.Contains(brk.Reason, "the log's head is gone") {
		t.Errorf("AuditVerify with the head gone = %v; want a break at row 3 naming it", err)
	}
}
