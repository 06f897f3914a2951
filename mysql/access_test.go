package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
)

// TestAccessAuditTwoStores appends to one audit log from two stores, as two
// processes would, each with goroutines of its own, and seals it from both
// at once: the head's row lock makes the sealers take turns, so the chain
// neither forks nor skips.
func TestAccessAuditTwoStores(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	stores := []*mysql.Store{openStore(t, dsn, mysql.Config{MaxConns: 3}), openStore(t, dsn, mysql.Config{MaxConns: 3})}
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const each = 20
	var wg sync.WaitGroup
	for i, s := range stores {
		for g := range 3 {
			wg.Go(func() {
				for n := range each {
					e := &lapse.AuditEntry{At: at, ActorKind: "cli", ActorName: fmt.Sprintf("s%d-g%d", i, g),
						Action: "order.close", Target: fmt.Sprintf("order:%d", n), Result: "ok"}
					if err := lapse.AuditRecord(ctx, s, e); err != nil {
						t.Errorf("AuditRecord: %v", err)
						return
					}
					if g == 0 {
						if _, err := lapse.AuditSeal(ctx, s, 4); err != nil && !errors.Is(err, lapse.ErrAuditBusy) {
							t.Errorf("AuditSeal: %v", err)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if _, err := lapse.AuditSeal(ctx, stores[1], 0); err != nil {
		t.Fatal(err)
	}
	c, err := lapse.AuditVerify(ctx, stores[0], 7)
	if err != nil || c.Rows != 2*3*each || c.Unsealed != 0 {
		t.Errorf("AuditVerify = %+v, %v; want %d rows and an unbroken chain", c, err, 2*3*each)
	}
}

// TestAccessCloseBatchLarge makes a batch of a hundred thousand orders in
// one call, which must split its items over many INSERTs in one
// transaction: inside a Tx that rolls back, none of them stays.
func TestAccessCloseBatchLarge(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	nos := make([]string, 100_000)
	for i := range nos {
		nos[i] = fmt.Sprintf("BIG-%06d", i)
	}
	batch := &lapse.CloseBatch{Selector: []byte(`{"all":true}`), Reason: "r", CreatedBy: "cli:root", CreatedAt: at,
		Status: lapse.CloseBatchRunning, Total: int64(len(nos))}
	start := time.Now()
	b, err := s.CloseBatchCreate(ctx, batch, nos)
	if err != nil {
		t.Fatalf("CloseBatchCreate of %d orders: %v", len(nos), err)
	}
	t.Logf("CloseBatchCreate of %d orders took %v", len(nos), time.Since(start))
	if counts, err := s.CloseItemCount(ctx, b.ID); err != nil || counts[lapse.CloseItemPending] != int64(len(nos)) || len(counts) != 1 {
		t.Errorf("CloseItemCount = %v, %v; want %d pending", counts, err, len(nos))
	}
	if last, err := s.CloseItemList(ctx, b.ID, lapse.CloseItemPending, "BIG-099998", 10); err != nil || len(last) != 1 || last[0].OrderNo != "BIG-099999" {
		t.Errorf("the items after BIG-099998 = %v, %v", last, err)
	}

	fail := errors.New("roll back")
	var inTx int64
	err = s.Tx(ctx, func(tx lapse.Store) error {
		b, err := tx.(lapse.AccessStore).CloseBatchCreate(ctx, batch, nos)
		if err != nil {
			return err
		}
		inTx = b.ID
		return fail
	})
	if err != fail {
		t.Fatalf("Tx = %v, want its function's error", err)
	}
	if _, err := s.CloseBatchGet(ctx, inTx); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("the rolled back batch: %v, want not found", err)
	}
	if counts, err := s.CloseItemCount(ctx, inTx); err != nil || len(counts) != 0 {
		t.Errorf("the rolled back batch's items = %v, %v; want none", counts, err)
	}
}

// TestAccessIndexes checks the plans of AuditList, for each filter in both
// directions, and of CloseItemList: each reads its index in order and stops
// at the limit, with no filesort.
func TestAccessIndexes(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	ctx := context.Background()
	// The audit rows are written directly: the plans do not depend on
	// their hashes. The last 500 are not sealed yet, as under a sealer
	// that lags behind a burst.
	var rows []string
	var args []any
	for i := 1; i <= 5000; i++ {
		var seq, hash any = i, "h"
		if i > 4500 {
			seq, hash = nil, nil
		}
		rows = append(rows, "(?, 0, 'operator', '1', ?, '', ?, ?, NULL, 'ok', '', '', '', 0, ?, '', NULL, ?)")
		args = append(args, seq, fmt.Sprintf("op-%d", i%50), fmt.Sprintf("act-%d", i%20), fmt.Sprintf("order:%d", i%1000), i%100, hash)
	}
	if _, err := s.Exec(ctx, `INSERT INTO audit_log (seq, at, actor_kind, actor_id, actor_name, role, action, target,
		params, result, reason, second_factor, approver, approval_id, batch, client_addr, prev_hash, hash) VALUES `+
		strings.Join(rows, ", "), args...); err != nil {
		t.Fatal(err)
	}
	// One item in ten is still pending, spread over the batch, as after a
	// crash halfway through with failures retried. The items are written
	// as they stand rather than updated, whose delete-marked index entries
	// would skew the optimizer's estimates until purged.
	b, err := s.CloseBatchCreate(ctx, &lapse.CloseBatch{CreatedBy: "cli:root", Status: lapse.CloseBatchRunning}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, args = rows[:0], args[:0]
	for i := range 5000 {
		status := lapse.CloseItemClosed
		if i%10 == 0 {
			status = lapse.CloseItemPending
		}
		rows, args = append(rows, "(?, ?, ?, '')"), append(args, b.ID, fmt.Sprintf("IX-%06d", i), string(status))
	}
	if _, err := s.Exec(ctx, `INSERT INTO close_items (batch_id, order_no, status, detail) VALUES `+strings.Join(rows, ", "), args...); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"audit_log", "close_items"} {
		if _, err := s.Exec(ctx, "ANALYZE TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	type query struct {
		name, key string
		sql       string
		args      []any
	}
	var qs []query
	for _, desc := range []bool{false, true} {
		for _, f := range []struct {
			key string
			p   lapse.AuditListParams
		}{
			{"PRIMARY", lapse.AuditListParams{}},
			{"audit_log_actor_idx", lapse.AuditListParams{ActorName: "op-7"}},
			{"audit_log_action_idx", lapse.AuditListParams{Action: "act-3"}},
			{"audit_log_target_idx", lapse.AuditListParams{Target: "order:42"}},
			{"audit_log_batch_idx", lapse.AuditListParams{Batch: 9}},
		} {
			p := f.p
			p.Descending, p.Cursor, p.Limit = desc, 2500, 20
			q, args := mysql.AuditListSQL(&p)
			qs = append(qs, query{fmt.Sprintf("audit %+v", p), f.key, q, args})
		}
	}
	qs = append(qs, query{"the unsealed rows", "audit_log_unsealed_idx", mysql.AuditUnsealedSQL, []any{100}},
		query{"the chain", "audit_log_seq_key", mysql.AuditChainSQL + " LIMIT ?", []any{2500, 1000}})
	for _, c := range []struct {
		key    string
		status lapse.CloseItemStatus
	}{{"PRIMARY", ""}, {"close_items_status_idx", lapse.CloseItemPending}} {
		q, args := mysql.CloseItemListSQL(b.ID, c.status, "IX-002500", 100)
		qs = append(qs, query{"close items " + string(c.status), c.key, q, args})
	}
	for _, c := range qs {
		plan := explain(t, s, c.sql, c.args...)
		t.Logf("%s:\n%s", c.name, plan)
		if !strings.Contains(plan, "key="+c.key+" ") || strings.Contains(plan, "filesort") || strings.Contains(plan, "type=ALL") {
			t.Errorf("%s: does not read %s in order:\n%s", c.name, c.key, plan)
		}
	}
}

// TestAccessSessionOperator: a session names an operator that exists.
func TestAccessSessionOperator(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 2})
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	err := s.SessionCreate(context.Background(), &lapse.Session{ID: []byte("s-1"), OperatorID: 42, CreatedAt: at, ExpiresAt: at})
	if !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("SessionCreate of an unknown operator = %v, want ErrAccessNotFound", err)
	}
}
