package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// newEntry builds the audit row of alice's refund of order A-i, i seconds
// after base.
func newEntry(i int) *lapse.AuditEntry {
	return &lapse.AuditEntry{At: base.Add(time.Duration(i) * time.Second), ActorKind: "operator", ActorID: "7", ActorName: "alice",
		Role: "admin", Action: "refund.create", Target: fmt.Sprintf("order:A-%d", i), Params: []byte(`{"amount": 100}`), Result: "ok"}
}

// mustAppend appends e in a transaction of its own.
func mustAppend(t *testing.T, s lapse.Store, e *lapse.AuditEntry) {
	t.Helper()
	if err := accessTx(t, s, func(tx lapse.AccessStore) error { return lapse.AuditAppend(ctxT(t), tx, e) }); err != nil {
		t.Fatalf("AuditAppend %s: %v", e.Target, err)
	}
}

func auditSeqs(es []*lapse.AuditEntry) []int64 {
	var seqs []int64
	for _, e := range es {
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

func auditList(t *testing.T, s lapse.AccessStore) []*lapse.AuditEntry {
	t.Helper()
	es, err := s.AuditList(ctxT(t), &lapse.AuditListParams{})
	if err != nil {
		t.Fatalf("AuditList: %v", err)
	}
	return es
}

func verify(t *testing.T, s lapse.AccessStore, rows int64) {
	t.Helper()
	if n, err := lapse.AuditVerify(ctxT(t), s, 7); n != rows || err != nil {
		t.Errorf("AuditVerify = %d, %v; want %d rows and no break", n, err, rows)
	}
}

func testAuditAppend(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	if seq, hash, err := s.AuditHead(ctx); seq != 0 || hash != nil || err != nil {
		t.Errorf("AuditHead of an empty log = %d, %x, %v; want 0, nil", seq, hash, err)
	}
	if es := auditList(t, s); len(es) != 0 {
		t.Errorf("AuditList of an empty log = %v", auditSeqs(es))
	}
	verify(t, s, 0)
	full := newEntry(1)
	full.Reason, full.SecondFactor, full.Approver, full.ApprovalID = "over the limit", "totp", "carol", 3
	full.Batch, full.ClientAddr = 4, "203.0.113.7"
	key := newEntry(2)
	key.ActorKind, key.ActorID, key.ActorName, key.Role, key.Result = "key", "lk_a", "shop", "orders:write refunds:create", "lapse: forbidden"
	none := newEntry(3)
	none.ActorKind, none.ActorID, none.ActorName, none.Role, none.Params = "system", "", "", "", nil
	want := []*lapse.AuditEntry{full, key, none}
	for i, e := range want {
		mustAppend(t, s, e)
		if e.Seq != int64(i+1) {
			t.Errorf("row %d appended as %d", i+1, e.Seq)
		}
	}
	if seq, hash, err := s.AuditHead(ctx); seq != 3 || !bytes.Equal(hash, none.Hash) || err != nil {
		t.Errorf("AuditHead = %d, %x, %v; want 3, %x", seq, hash, err, none.Hash)
	}
	if got := auditList(t, s); fmt.Sprint(values(got)) != fmt.Sprint(values(want)) {
		t.Errorf("AuditList =\n%+v\nwant\n%+v", values(got), values(want))
	}
	if got := auditList(t, s); len(got) == 3 && (got[0].PrevHash != nil || !bytes.Equal(got[1].PrevHash, got[0].Hash)) {
		t.Errorf("rows chain as %x, %x: want nil and the first row's hash %x", got[0].PrevHash, got[1].PrevHash, got[0].Hash)
	}

	// Two rows in one transaction chain too.
	e4, e5 := newEntry(4), newEntry(5)
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		return errors.Join(lapse.AuditAppend(ctx, tx, e4), lapse.AuditAppend(ctx, tx, e5))
	})
	if err != nil || e4.Seq != 4 || e5.Seq != 5 || !bytes.Equal(e5.PrevHash, e4.Hash) {
		t.Errorf("two appends in one Tx = rows %d, %d, %v; want 4 and 5, chained", e4.Seq, e5.Seq, err)
	}
	verify(t, s, 5)
}

// testAuditRollback: a row appended in a transaction that rolls back, or in
// a nested one that does, is gone, and the head with it.
func testAuditRollback(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	e1 := newEntry(1)
	mustAppend(t, s, e1)
	boom := errors.New("boom")
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		if err := lapse.AuditAppend(ctx, tx, newEntry(2)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want fn's error", err)
	}
	if seq, hash, err := s.AuditHead(ctx); seq != 1 || !bytes.Equal(hash, e1.Hash) || err != nil {
		t.Errorf("AuditHead after a rollback = %d, %x, %v; want 1, %x", seq, hash, err, e1.Hash)
	}
	if es := auditList(t, s); fmt.Sprint(auditSeqs(es)) != "[1]" {
		t.Errorf("rows after a rollback: %v, want [1]", auditSeqs(es))
	}

	e2, e4 := newEntry(2), newEntry(4)
	err = s.Tx(ctx, func(tx lapse.Store) error {
		if err := lapse.AuditAppend(ctx, tx.(lapse.AccessStore), e2); err != nil {
			return err
		}
		err := tx.Tx(ctx, func(inner lapse.Store) error {
			if err := lapse.AuditAppend(ctx, inner.(lapse.AccessStore), newEntry(3)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			return fmt.Errorf("nested Tx = %v, want fn's error", err)
		}
		return lapse.AuditAppend(ctx, tx.(lapse.AccessStore), e4)
	})
	if err != nil || e2.Seq != 2 || e4.Seq != 3 {
		t.Errorf("appends around a rolled back nested Tx = rows %d, %d, %v; want 2 and 3", e2.Seq, e4.Seq, err)
	}
	if es := auditList(t, s); len(es) != 3 || es[2].Target != e4.Target {
		t.Errorf("rows after a nested rollback: %+v; want A-1, A-2, A-4", values(es))
	}
	verify(t, s, 3)
}

// testAuditConcurrent: appenders in transactions of their own take turns
// at the head: the rows are numbered without a gap and chain.
func testAuditConcurrent(t *testing.T, s accessStore) {
	const workers, each = 4, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e := newEntry(i)
				e.ActorID, e.Target = fmt.Sprint(w), fmt.Sprintf("w%d-%02d", w, i)
				err := accessTx(t, s, func(tx lapse.AccessStore) error { return lapse.AuditAppend(ctxT(t), tx, e) })
				if err != nil {
					t.Errorf("AuditAppend %s: %v", e.Target, err)
					return
				}
			}
		})
	}
	wg.Wait()
	es := auditList(t, s)
	if len(es) != workers*each {
		t.Fatalf("%d rows, want %d", len(es), workers*each)
	}
	last := map[string]string{} // each worker's rows are in its order
	for i, e := range es {
		if e.Seq != int64(i+1) {
			t.Fatalf("row %d has seq %d", i+1, e.Seq)
		}
		if e.Target <= last[e.ActorID] {
			t.Errorf("row %d, %s, comes after %s", e.Seq, e.Target, last[e.ActorID])
		}
		last[e.ActorID] = e.Target
	}
	if seq, _, err := s.AuditHead(ctxT(t)); seq != workers*each || err != nil {
		t.Errorf("AuditHead = %d, %v; want %d", seq, err, workers*each)
	}
	verify(t, s, workers*each)
}

// testAuditParams: Params come back byte for byte, however the JSON is
// spaced or repeats a key, and empty.
func testAuditParams(t *testing.T, s accessStore) {
	params := [][]byte{
		[]byte(`{"b": 1,   "a":[true, null]}`),
		[]byte(`{"a":1,"a":2}`),
		[]byte("{\n\t\"é\": \"\\u00e9\",\t\"n\": 1.50e0\n}\n"),
		[]byte(`[]`), []byte(`{}`), []byte(`null`), []byte(`"x"`), nil, {},
	}
	for i, p := range params {
		e := newEntry(i)
		e.Params = p
		mustAppend(t, s, e)
	}
	es := auditList(t, s)
	if len(es) != len(params) {
		t.Fatalf("%d rows, want %d", len(es), len(params))
	}
	for i, e := range es {
		if !bytes.Equal(e.Params, params[i]) {
			t.Errorf("row %d: Params %q came back as %q", e.Seq, params[i], e.Params)
		}
	}
	verify(t, s, int64(len(params)))
}

func testAuditList(t *testing.T, s accessStore) {
	rows := []struct {
		actor, action, target string
		batch                 int64
	}{
		{"alice", "refund.create", "order:A-1", 0},
		{"bob", "order.close", "order:A-2", 5},
		{"alice", "order.close", "order:A-3", 5},
		{"alice", "refund.create", "order:A-1", 0},
		{"shop", "login", "", 0},
		{"bob", "order.close", "order:A-1", 6},
	}
	for i, r := range rows {
		e := newEntry(i)
		e.ActorName, e.Action, e.Target, e.Batch = r.actor, r.action, r.target, r.batch
		mustAppend(t, s, e)
	}
	for _, c := range []struct {
		p    lapse.AuditListParams
		want string
	}{
		{lapse.AuditListParams{}, "[1 2 3 4 5 6]"},
		{lapse.AuditListParams{Limit: -1}, "[1 2 3 4 5 6]"},
		{lapse.AuditListParams{Limit: 2}, "[1 2]"},
		{lapse.AuditListParams{Cursor: 2}, "[3 4 5 6]"},
		{lapse.AuditListParams{Cursor: 2, Limit: 2}, "[3 4]"},
		{lapse.AuditListParams{Cursor: 6}, "[]"},
		{lapse.AuditListParams{Descending: true}, "[6 5 4 3 2 1]"},
		{lapse.AuditListParams{Descending: true, Limit: 2}, "[6 5]"},
		{lapse.AuditListParams{Descending: true, Cursor: 4}, "[3 2 1]"},
		{lapse.AuditListParams{Descending: true, Cursor: 4, Limit: 1}, "[3]"},
		{lapse.AuditListParams{Descending: true, Cursor: 1}, "[]"},
		{lapse.AuditListParams{ActorName: "alice"}, "[1 3 4]"},
		{lapse.AuditListParams{Action: "order.close"}, "[2 3 6]"},
		{lapse.AuditListParams{Action: "order"}, "[]"}, // equal, not a prefix
		{lapse.AuditListParams{Target: "order:A-1"}, "[1 4 6]"},
		{lapse.AuditListParams{Batch: 5}, "[2 3]"},
		{lapse.AuditListParams{ActorName: "bob", Action: "order.close", Target: "order:A-1"}, "[6]"},
		{lapse.AuditListParams{ActorName: "alice", Descending: true, Cursor: 4}, "[3 1]"},
		{lapse.AuditListParams{ActorName: "alice", Cursor: 1, Limit: 1}, "[3]"},
		{lapse.AuditListParams{Batch: 6, Descending: true}, "[6]"},
	} {
		es, err := s.AuditList(ctxT(t), &c.p)
		if got := fmt.Sprint(auditSeqs(es)); err != nil || got != c.want {
			t.Errorf("AuditList(%+v) = %s, %v; want %s", c.p, got, err, c.want)
		}
	}
}

// testAuditInsertGuards: AuditInsert writes nothing outside Tx, nor a row
// that is not the head's next.
func testAuditInsertGuards(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	e := newEntry(1)
	e.Seq = 1
	e.Hash = lapse.AuditHash(nil, e)
	if err := s.AuditInsert(ctx, e); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("AuditInsert outside Tx = %v, want an invalid error", err)
	}
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		if _, _, err := tx.AuditHead(ctx); err != nil {
			return err
		}
		for _, seq := range []int64{0, 2} {
			e := newEntry(int(seq))
			e.Seq = seq
			e.Hash = lapse.AuditHash(nil, e)
			if err := tx.AuditInsert(ctx, e); !errors.Is(err, lapse.ErrStale) {
				t.Errorf("AuditInsert of row %d onto an empty log = %v, want ErrStale", seq, err)
			}
		}
		return lapse.AuditAppend(ctx, tx, newEntry(3))
	})
	if err != nil {
		t.Fatalf("Tx after refused inserts = %v, want it to commit", err)
	}
	if es := auditList(t, s); len(es) != 1 || es[0].Target != "order:A-3" {
		t.Errorf("rows: %+v; want only the appended one", values(es))
	}
	verify(t, s, 1)
}
