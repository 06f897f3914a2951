package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestAccessCloseBatchLarge creates a batch of 100k orders, the size the
// console allows, pages through its items, and checks that a batch whose
// items fail to go in leaves no batch behind.
func TestAccessCloseBatchLarge(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{})
	ctx := context.Background()
	const n = 100_000
	orderNos := make([]string, n)
	for i := range orderNos {
		orderNos[i] = fmt.Sprintf("BIG-%06d", (i*7919)%n) // every number once, out of order
	}
	b, err := s.CloseBatchCreate(ctx, &lapse.CloseBatch{CreatedBy: "cli:root", CreatedAt: time.Now(), Status: lapse.CloseBatchRunning, Total: n}, orderNos)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := s.CloseItemCount(ctx, b.ID)
	if err != nil || len(counts) != 1 || counts[lapse.CloseItemPending] != n {
		t.Fatalf("CloseItemCount = %v, %v; want %d pending", counts, err, n)
	}
	seen, after := 0, ""
	for {
		its, err := s.CloseItemList(ctx, b.ID, lapse.CloseItemPending, after, 5000)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if want := fmt.Sprintf("BIG-%06d", seen); it.OrderNo != want {
				t.Fatalf("item %d is %s, want %s", seen, it.OrderNo, want)
			}
			seen++
		}
		if len(its) < 5000 {
			break
		}
		after = its[len(its)-1].OrderNo
	}
	if seen != n {
		t.Errorf("paging visited %d items, want %d", seen, n)
	}

	// PostgreSQL's text holds no NUL: the last chunk's COPY fails.
	bad := append(orderNos[:n:n], "BAD-\x00")
	if _, err := s.CloseBatchCreate(ctx, &lapse.CloseBatch{CreatedAt: time.Now(), Status: lapse.CloseBatchRunning}, bad); err == nil {
		t.Fatal("CloseBatchCreate of an order number with a NUL succeeded")
	}
	bs, err := s.CloseBatchList(ctx, &lapse.CloseBatchListParams{})
	if err != nil || len(bs) != 1 || bs[0].ID != b.ID {
		t.Errorf("batches after a failed create: %v, %v; want only the first", bs, err)
	}
}

// TestAccessIndexes checks that the filtered pages of the audit log and of
// a batch's items read their indexes rather than the table, on tables
// shaped like production: most actors, actions, targets and batches have
// few rows, and one actor has half of them. A filter of few rows may read
// them through a bitmap and sort them; a page of a filter of many rows, and
// a batch's items, which the closer pages through by the thousand, must
// come out of an index in order, unsorted.
func TestAccessIndexes(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openStore(t, dsn, postgres.Config{})
	ctx := context.Background()
	conn := connect(t, dsn)
	const n = 20_000
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	_, err := conn.CopyFrom(ctx, pgx.Identifier{"audit_log"},
		[]string{"seq", "at", "actor_kind", "actor_id", "actor_name", "role", "action", "target", "params", "result", "reason",
			"second_factor", "approver", "approval_id", "batch", "client_addr", "prev_hash", "hash"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			batch := int64(0)
			if i%100 == 0 {
				batch = int64(i / 1000)
			}
			actor := fmt.Sprintf("op-%d", i%500)
			if i%2 == 0 {
				actor = "bulk"
			}
			return []any{int64(i + 1), at, "operator", "7", actor, "admin", fmt.Sprintf("act.%d", i%300),
				fmt.Sprintf("order:A-%d", i%5000), []byte(`{}`), "ok", "", "", "", int64(0), batch, "", nil, []byte{1}}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var batchID int64
	if err := conn.QueryRow(ctx, `INSERT INTO close_batches (reason, created_by, approval_id, created_at, status, total, closed, skipped, failed)
		VALUES ('', '', 0, now(), 'running', 0, 0, 0, 0) RETURNING id`).Scan(&batchID); err != nil {
		t.Fatal(err)
	}
	_, err = conn.CopyFrom(ctx, pgx.Identifier{"close_items"}, []string{"batch_id", "order_no", "status", "detail"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			status := lapse.CloseItemClosed
			if i%20 == 0 {
				status = lapse.CloseItemPending
			}
			return []any{batchID, fmt.Sprintf("CI-%06d", i), string(status), ""}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE audit_log, close_items"); err != nil {
		t.Fatal(err)
	}
	queries := []struct {
		name, index string // index: "" for any
		ordered     bool
		query       func() (string, []any)
	}{
		{"audit by actor", "audit_log_actor_idx", false, func() (string, []any) {
			return postgres.AuditListQuery(&lapse.AuditListParams{ActorName: "op-7", Cursor: 100, Limit: 50})
		}},
		{"audit by action, descending", "audit_log_action_idx", false, func() (string, []any) {
			return postgres.AuditListQuery(&lapse.AuditListParams{Action: "act.7", Descending: true, Limit: 50})
		}},
		{"audit by target", "audit_log_target_idx", false, func() (string, []any) {
			return postgres.AuditListQuery(&lapse.AuditListParams{Target: "order:A-7", Limit: 50})
		}},
		{"audit by batch", "audit_log_batch_idx", false, func() (string, []any) {
			return postgres.AuditListQuery(&lapse.AuditListParams{Batch: 3, Limit: 50})
		}},
		{"audit by a busy actor, descending", "", true, func() (string, []any) {
			return postgres.AuditListQuery(&lapse.AuditListParams{ActorName: "bulk", Descending: true, Cursor: 15000, Limit: 50})
		}},
		{"the unsealed rows", "audit_log_unsealed_idx", true, func() (string, []any) {
			return postgres.AuditUnsealedSQL, []any{1000}
		}},
		{"the chain", "audit_log_seq_key", true, func() (string, []any) {
			return postgres.AuditChainSQL, []any{int64(15000), 1000}
		}},
		{"pending items", "close_items_status_idx", true, func() (string, []any) {
			return postgres.CloseItemListQuery(batchID, lapse.CloseItemPending, "CI-001000", 100)
		}},
		{"all items", "close_items_pkey", true, func() (string, []any) { return postgres.CloseItemListQuery(batchID, "", "CI-001000", 100) }},
	}
	// pgx prepares statements, and after a few runs PostgreSQL may switch a
	// prepared statement to its generic plan, which knows no filter's value:
	// check both. (EXPLAIN of a query with arguments always shows the custom
	// plan; EXPLAIN EXECUTE of a prepared one shows the plan the mode picks.)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		for _, c := range queries {
			q, args := c.query()
			plan := explainPrepared(t, conn, q, args...)
			if strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s, %s: reads the whole table:\n%s", c.name, mode, plan)
			}
			if c.index != "" && !strings.Contains(plan, " using "+c.index) && !strings.Contains(plan, " on "+c.index) {
				t.Errorf("%s, %s: does not read %s:\n%s", c.name, mode, c.index, plan)
			}
			if c.ordered && strings.Contains(plan, "Sort") {
				t.Errorf("%s, %s: sorts:\n%s", c.name, mode, plan)
			}
		}
	}
	// And the answers: the rows asked for, in order.
	es, err := s.AuditList(ctx, &lapse.AuditListParams{Batch: 3, Descending: true, Cursor: 3901})
	if err != nil || len(es) != 9 || es[0].Seq != 3801 || es[8].Seq != 3001 {
		t.Errorf("AuditList of batch 3 before 3901 = %d rows, %v; want 3801 down to 3001", len(es), err)
	}
}

// explainPrepared prepares sql on conn and returns the plan of its
// execution with args, which it writes as literals.
func explainPrepared(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "PREPARE explained AS "+sql); err != nil {
		t.Fatalf("PREPARE %s: %v", sql, err)
	}
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE explained") }()
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			lits[i] = "NULL"
		case int, int64:
			lits[i] = fmt.Sprint(v)
		default:
			lits[i] = "'" + strings.ReplaceAll(fmt.Sprint(v), "'", "''") + "'"
		}
	}
	return explain(t, conn, "EXECUTE explained("+strings.Join(lits, ", ")+")")
}
