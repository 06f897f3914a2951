package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// mustSeal seals every unsealed row, a few at a time, and returns how many
// it sealed.
func mustSeal(t *testing.T, s lapse.Store) int {
	t.Helper()
	n, err := lapse.AuditSeal(ctxT(t), s, 3)
	if err != nil {
		t.Fatalf("AuditSeal: %v", err)
	}
	return n
}

func auditSeqs(es []*lapse.AuditEntry) []int64 {
	var seqs []int64
	for _, e := range es {
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

func auditIDs(es []*lapse.AuditEntry) []int64 {
	var ids []int64
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

// unsealed is e as it was appended: without its place in the chain.
func unsealed(es []*lapse.AuditEntry) []lapse.AuditEntry {
	out := values(es)
	for i := range out {
		out[i].Seq, out[i].PrevHash, out[i].Hash = 0, nil, nil
	}
	return out
}

func auditList(t *testing.T, s lapse.AccessStore) []*lapse.AuditEntry {
	t.Helper()
	es, err := s.AuditList(ctxT(t), &lapse.AuditListParams{})
	if err != nil {
		t.Fatalf("AuditList: %v", err)
	}
	return es
}

// verify checks the chain: rows sealed rows, unsealed left to seal.
func verify(t *testing.T, s lapse.AccessStore, rows, unsealed int64) {
	t.Helper()
	c, err := lapse.AuditVerify(ctxT(t), s, 7)
	if c.Rows != rows || c.Unsealed != unsealed || err != nil {
		t.Errorf("AuditVerify = %+v, %v; want %d rows sealed, %d unsealed and no break", c, err, rows, unsealed)
	}
}

func testAuditAppend(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	if seq, hash, err := s.AuditHead(ctx); seq != 0 || hash != nil || err != nil {
		t.Errorf("AuditHead of an empty log = %d, %x, %v; want 0, nil", seq, hash, err)
	}
	if es := auditList(t, s); len(es) != 0 {
		t.Errorf("AuditList of an empty log = %v", auditIDs(es))
	}
	verify(t, s, 0, 0)
	if n := mustSeal(t, s); n != 0 {
		t.Errorf("AuditSeal of an empty log sealed %d rows", n)
	}
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
		if e.Seq != 0 || e.Hash != nil || e.ID == 0 || (i > 0 && e.ID <= want[i-1].ID) {
			t.Errorf("row %d appended with id %d, seq %d, hash %x; want an id above the last and no seal", i+1, e.ID, e.Seq, e.Hash)
		}
	}

	// Appended, not sealed: listed as written, with no place in the chain,
	// and the head where it was.
	if seq, hash, err := s.AuditHead(ctx); seq != 0 || hash != nil || err != nil {
		t.Errorf("AuditHead before sealing = %d, %x, %v; want 0, nil", seq, hash, err)
	}
	if got := auditList(t, s); fmt.Sprint(values(got)) != fmt.Sprint(values(want)) {
		t.Errorf("AuditList of unsealed rows =\n%+v\nwant\n%+v", values(got), values(want))
	}
	if n, oldest, err := s.AuditUnsealedCount(ctx); n != 3 || !oldest.Equal(full.At) || err != nil {
		t.Errorf("AuditUnsealedCount = %d, %v, %v; want 3 from %v", n, oldest, err, full.At)
	}
	if es, err := s.AuditUnsealedList(ctx, 2); fmt.Sprint(auditIDs(es)) != fmt.Sprint(auditIDs(want[:2])) || err != nil {
		t.Errorf("AuditUnsealedList(2) = %v, %v; want %v", auditIDs(es), err, auditIDs(want[:2]))
	}
	verify(t, s, 0, 3)

	if n := mustSeal(t, s); n != 3 {
		t.Errorf("AuditSeal sealed %d rows, want 3", n)
	}
	got := auditList(t, s)
	if fmt.Sprint(unsealed(got)) != fmt.Sprint(values(want)) || fmt.Sprint(auditSeqs(got)) != "[1 2 3]" {
		t.Errorf("AuditList after sealing =\n%+v\nwant the rows as written, numbered 1 to 3", values(got))
	}
	if len(got) == 3 {
		for i, e := range got {
			var prev []byte
			if i > 0 {
				prev = got[i-1].Hash
			}
			if !bytes.Equal(e.PrevHash, prev) || !bytes.Equal(e.Hash, lapse.AuditHash(prev, e)) {
				t.Errorf("row %d chains as %x, %x; want %x and its AuditHash", e.Seq, e.PrevHash, e.Hash, prev)
			}
		}
		if seq, hash, err := s.AuditHead(ctx); seq != 3 || !bytes.Equal(hash, got[2].Hash) || err != nil {
			t.Errorf("AuditHead = %d, %x, %v; want 3, %x", seq, hash, err, got[2].Hash)
		}
	}
	if n, oldest, err := s.AuditUnsealedCount(ctx); n != 0 || !oldest.IsZero() || err != nil {
		t.Errorf("AuditUnsealedCount after sealing = %d, %v, %v; want none", n, oldest, err)
	}
	if n := mustSeal(t, s); n != 0 {
		t.Errorf("a second AuditSeal sealed %d rows, want none", n)
	}
	verify(t, s, 3, 0)

	// Two rows in one transaction: one after the other, and sealed so.
	e4, e5 := newEntry(4), newEntry(5)
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		return errors.Join(lapse.AuditAppend(ctx, tx, e4), lapse.AuditAppend(ctx, tx, e5))
	})
	if err != nil || e5.ID <= e4.ID {
		t.Errorf("two appends in one Tx = ids %d, %d, %v; want the second above the first", e4.ID, e5.ID, err)
	}
	mustSeal(t, s)
	if es := auditList(t, s); fmt.Sprint(auditSeqs(es)) != "[1 2 3 4 5]" {
		t.Errorf("seqs after the Tx's rows were sealed: %v", auditSeqs(es))
	}
	verify(t, s, 5, 0)
}

// testAuditRollback: a row appended in a transaction that rolls back, or in
// a nested one that does, is gone, and no sealer sees it.
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
	if es := auditList(t, s); fmt.Sprint(auditIDs(es)) != fmt.Sprint([]int64{e1.ID}) {
		t.Errorf("rows after a rollback: %v, want [%d]", auditIDs(es), e1.ID)
	}
	if n := mustSeal(t, s); n != 1 {
		t.Errorf("AuditSeal after a rollback sealed %d rows, want 1", n)
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
	if err != nil {
		t.Errorf("appends around a rolled back nested Tx: %v", err)
	}
	if es := auditList(t, s); len(es) != 3 || es[1].Target != e2.Target || es[2].Target != e4.Target {
		t.Errorf("rows after a nested rollback: %+v; want A-1, A-2, A-4", values(es))
	}
	if n := mustSeal(t, s); n != 2 {
		t.Errorf("AuditSeal sealed %d rows, want the 2 that committed", n)
	}
	if es := auditList(t, s); fmt.Sprint(auditSeqs(es)) != "[1 2 3]" {
		t.Errorf("seqs: %v, want [1 2 3] with no gap for the rolled back rows", auditSeqs(es))
	}
	verify(t, s, 3, 0)
}

// testAuditConcurrent: appenders in transactions of their own never wait
// for a sealer, and two sealers run beside them, and a verifier: once the
// appenders are done and the log sealed, every row is sealed once,
// numbered without a gap, each appender's rows in its order, and no
// verification on the way saw a break.
func testAuditConcurrent(t *testing.T, s accessStore) {
	const workers, each = 4, 25
	var (
		appenders, others sync.WaitGroup
		done              = make(chan struct{})
		sealed            atomic.Int64
	)
	for w := range workers {
		appenders.Go(func() {
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
	for range 2 {
		others.Go(func() {
			for {
				n, err := lapse.AuditSeal(ctxT(t), s, 7)
				if err != nil && !errors.Is(err, lapse.ErrAuditBusy) {
					t.Errorf("AuditSeal beside appenders: %v", err)
					return
				}
				sealed.Add(int64(n))
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	others.Go(func() {
		for {
			if c, err := lapse.AuditVerify(ctxT(t), s, 5); err != nil {
				t.Errorf("AuditVerify beside sealers = %+v, %v", c, err)
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	appenders.Wait()
	close(done)
	others.Wait()
	sealed.Add(int64(mustSeal(t, s)))
	if sealed.Load() != workers*each {
		t.Errorf("the sealers sealed %d rows, want each of the %d once", sealed.Load(), workers*each)
	}
	es := auditList(t, s)
	if len(es) != workers*each {
		t.Fatalf("%d rows, want %d", len(es), workers*each)
	}
	bySeq := make([]*lapse.AuditEntry, len(es))
	for _, e := range es {
		if e.Seq < 1 || e.Seq > int64(len(es)) || bySeq[e.Seq-1] != nil {
			t.Fatalf("row id %d has seq %d: not one of 1 to %d, or taken twice", e.ID, e.Seq, len(es))
		}
		bySeq[e.Seq-1] = e
	}
	last := map[string]string{} // each worker's rows are in its order
	for _, e := range bySeq {
		if e.Target <= last[e.ActorID] {
			t.Errorf("row %d, %s, comes after %s", e.Seq, e.Target, last[e.ActorID])
		}
		last[e.ActorID] = e.Target
	}
	if seq, _, err := s.AuditHead(ctxT(t)); seq != workers*each || err != nil {
		t.Errorf("AuditHead = %d, %v; want %d", seq, err, workers*each)
	}
	verify(t, s, workers*each, 0)
}

// testAuditParams: Params come back byte for byte, however the JSON is
// spaced or repeats a key, and empty, sealed or not.
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
	check := func(when string) {
		es := auditList(t, s)
		if len(es) != len(params) {
			t.Fatalf("%s: %d rows, want %d", when, len(es), len(params))
		}
		for i, e := range es {
			if !bytes.Equal(e.Params, params[i]) {
				t.Errorf("%s: row %d: Params %q came back as %q", when, e.ID, params[i], e.Params)
			}
		}
	}
	check("unsealed")
	mustSeal(t, s)
	check("sealed")
	verify(t, s, int64(len(params)), 0)
}

// testAuditList: filters, directions and cursors, by id, over rows sealed
// and not.
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
	ids := make([]int64, len(rows)) // ids[n-1] is the id of row n
	for i, r := range rows {
		e := newEntry(i)
		e.ActorName, e.Action, e.Target, e.Batch = r.actor, r.action, r.target, r.batch
		mustAppend(t, s, e)
		ids[i] = e.ID
		if i == 2 {
			mustSeal(t, s) // the first three sealed, the others not
		}
	}
	row := map[int64]int{}
	for i, id := range ids {
		row[id] = i + 1
	}
	for _, c := range []struct {
		p      lapse.AuditListParams
		cursor int // a row number, made the cursor's id
		want   string
	}{
		{lapse.AuditListParams{}, 0, "[1 2 3 4 5 6]"},
		{lapse.AuditListParams{Limit: -1}, 0, "[1 2 3 4 5 6]"},
		{lapse.AuditListParams{Limit: 2}, 0, "[1 2]"},
		{lapse.AuditListParams{}, 2, "[3 4 5 6]"},
		{lapse.AuditListParams{Limit: 2}, 2, "[3 4]"},
		{lapse.AuditListParams{}, 6, "[]"},
		{lapse.AuditListParams{Descending: true}, 0, "[6 5 4 3 2 1]"},
		{lapse.AuditListParams{Descending: true, Limit: 2}, 0, "[6 5]"},
		{lapse.AuditListParams{Descending: true}, 4, "[3 2 1]"},
		{lapse.AuditListParams{Descending: true, Limit: 1}, 4, "[3]"},
		{lapse.AuditListParams{Descending: true}, 1, "[]"},
		{lapse.AuditListParams{ActorName: "alice"}, 0, "[1 3 4]"},
		{lapse.AuditListParams{Action: "order.close"}, 0, "[2 3 6]"},
		{lapse.AuditListParams{Action: "order"}, 0, "[]"}, // equal, not a prefix
		{lapse.AuditListParams{Target: "order:A-1"}, 0, "[1 4 6]"},
		{lapse.AuditListParams{Batch: 5}, 0, "[2 3]"},
		{lapse.AuditListParams{ActorName: "bob", Action: "order.close", Target: "order:A-1"}, 0, "[6]"},
		{lapse.AuditListParams{ActorName: "alice", Descending: true}, 4, "[3 1]"},
		{lapse.AuditListParams{ActorName: "alice", Limit: 1}, 1, "[3]"},
		{lapse.AuditListParams{Batch: 6, Descending: true}, 0, "[6]"},
	} {
		if c.cursor > 0 {
			c.p.Cursor = ids[c.cursor-1]
		}
		es, err := s.AuditList(ctxT(t), &c.p)
		got := []int{}
		for _, e := range es {
			got = append(got, row[e.ID])
		}
		if err != nil || fmt.Sprint(got) != c.want {
			t.Errorf("AuditList(%+v) = rows %v, %v; want %s", c.p, got, err, c.want)
		}
	}
	if es := auditList(t, s); fmt.Sprint(auditSeqs(es)) != "[1 2 3 0 0 0]" {
		t.Errorf("seqs listed: %v, want the first three sealed", auditSeqs(es))
	}
}

// testAuditSealGuards: AuditSealUpdate writes nothing outside Tx, nor rows
// that do not follow the head, nor a row sealed already or not there; and
// AuditHeadLock is for transactions only.
func testAuditSealGuards(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	e1, e2 := newEntry(1), newEntry(2)
	mustAppend(t, s, e1)
	mustAppend(t, s, e2)
	sealAs := func(e *lapse.AuditEntry, seq int64, prev []byte) *lapse.AuditEntry {
		c := *e
		c.Seq, c.PrevHash = seq, prev
		c.Hash = lapse.AuditHash(prev, &c)
		return &c
	}
	if err := s.AuditSealUpdate(ctx, []*lapse.AuditEntry{sealAs(e1, 1, nil)}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("AuditSealUpdate outside Tx = %v, want an invalid error", err)
	}
	if _, _, _, err := s.AuditHeadLock(ctx); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("AuditHeadLock outside Tx = %v, want an invalid error", err)
	}
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		if _, _, locked, err := tx.AuditHeadLock(ctx); !locked || err != nil {
			return fmt.Errorf("AuditHeadLock = %v, %v; want the head", locked, err)
		}
		first := sealAs(e1, 1, nil)
		for name, rows := range map[string][]*lapse.AuditEntry{
			"row 2 onto an empty log":    {sealAs(e1, 2, nil)},
			"row 0":                      {sealAs(e1, 0, nil)},
			"row 1 chained to something": {sealAs(e1, 1, []byte("x"))},
			"a row that is not there":    {first, sealAs(&lapse.AuditEntry{ID: e2.ID + 1000}, 2, first.Hash)},
			"one row twice":              {first, sealAs(e1, 2, first.Hash)},
		} {
			if err := tx.AuditSealUpdate(ctx, rows); !errors.Is(err, lapse.ErrStale) {
				t.Errorf("AuditSealUpdate of %s = %v, want ErrStale", name, err)
			}
		}
		if seq, _, err := tx.AuditHead(ctx); seq != 0 || err != nil {
			t.Errorf("AuditHead after refused seals = %d, %v; want 0", seq, err)
		}
		if es, err := tx.AuditUnsealedList(ctx, 10); len(es) != 2 || err != nil {
			t.Errorf("unsealed rows after refused seals = %d, %v; want both", len(es), err)
		}
		return tx.AuditSealUpdate(ctx, []*lapse.AuditEntry{first, sealAs(e2, 2, first.Hash)})
	})
	if err != nil {
		t.Fatalf("Tx after refused seals = %v, want it to commit", err)
	}
	verify(t, s, 2, 0)
	err = accessTx(t, s, func(tx lapse.AccessStore) error {
		head, hash, _, err := tx.AuditHeadLock(ctx)
		if err != nil {
			return err
		}
		return tx.AuditSealUpdate(ctx, []*lapse.AuditEntry{sealAs(e1, head+1, hash)})
	})
	if !errors.Is(err, lapse.ErrStale) {
		t.Errorf("sealing a sealed row again = %v, want ErrStale", err)
	}
	verify(t, s, 2, 0)
}

// testAuditChainList: the sealed rows in seq order, paged, without the
// unsealed ones.
func testAuditChainList(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	for i := range 5 {
		mustAppend(t, s, newEntry(i))
	}
	mustSeal(t, s)
	mustAppend(t, s, newEntry(5))
	for _, c := range []struct {
		after int64
		limit int
		want  string
	}{
		{0, 0, "[1 2 3 4 5]"},
		{0, 2, "[1 2]"},
		{2, 2, "[3 4]"},
		{4, 0, "[5]"},
		{5, 10, "[]"},
	} {
		es, err := s.AuditChainList(ctx, c.after, c.limit)
		if got := fmt.Sprint(auditSeqs(es)); got != c.want || err != nil {
			t.Errorf("AuditChainList(%d, %d) = %s, %v; want %s", c.after, c.limit, got, err, c.want)
		}
	}
	verify(t, s, 5, 1)
}

// testCloseBatchLock: a batch's lock, shared or not, in a transaction or
// outside one, of a batch that is there or not, is no error, and an audit
// row of a batch (which takes the shared one) commits.
func testCloseBatchLock(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	b, err := s.CloseBatchCreate(ctx, &lapse.CloseBatch{CreatedBy: "cli:root", CreatedAt: base, Status: lapse.CloseBatchRunning}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, share := range []bool{true, false} {
		for _, id := range []int64{b.ID, b.ID + 1000} {
			if err := s.CloseBatchLock(ctx, id, share); err != nil {
				t.Errorf("CloseBatchLock(%d, %v) outside Tx = %v", id, share, err)
			}
			if err := accessTx(t, s, func(tx lapse.AccessStore) error { return tx.CloseBatchLock(ctx, id, share) }); err != nil {
				t.Errorf("CloseBatchLock(%d, %v) = %v", id, share, err)
			}
		}
	}
	err = accessTx(t, s, func(tx lapse.AccessStore) error {
		if err := tx.CloseBatchLock(ctx, b.ID, false); err != nil {
			return err
		}
		e := newEntry(1)
		e.Batch = b.ID
		if err := lapse.AuditAppend(ctx, tx, e); err != nil {
			return err
		}
		return tx.CloseBatchUpdate(ctx, &lapse.CloseBatch{ID: b.ID, Status: lapse.CloseBatchDone, FinishedAt: base})
	})
	if err != nil {
		t.Errorf("a batch's row and update under its exclusive lock: %v", err)
	}
	if es, err := s.AuditList(ctx, &lapse.AuditListParams{Batch: b.ID}); len(es) != 1 || err != nil {
		t.Errorf("the batch's rows = %d, %v; want 1", len(es), err)
	}
}

// RunAuditLate runs the test of rows that commit out of the order of their
// ids against the stores newStore makes, whose transactions must be able
// to write side by side (PostgreSQL and MySQL, not SQLite, whose
// transactions take turns from their start): a row whose transaction
// commits after a row of a higher id was sealed is sealed by the next
// pass, with the next seq, and the chain holds.
func RunAuditLate(t *testing.T, newStore Factory) {
	t.Run("AuditLate", func(t *testing.T) {
		t.Parallel()
		s, ok := newStore(t).(accessStore)
		if !ok {
			t.Fatal("the store is not a lapse.AccessStore")
		}
		ctx := ctxT(t)
		mustAppend(t, s, newEntry(1))
		mustSeal(t, s)
		late, early := newEntry(2), newEntry(3)
		appended, release := make(chan struct{}), make(chan struct{})
		lateErr := make(chan error, 1)
		go func() {
			lateErr <- accessTx(t, s, func(tx lapse.AccessStore) error {
				err := lapse.AuditAppend(ctx, tx, late)
				close(appended)
				if err != nil {
					return err
				}
				<-release
				return nil
			})
		}()
		<-appended
		mustAppend(t, s, early)
		if early.ID <= late.ID {
			t.Fatalf("ids %d then %d: want the second append's higher", late.ID, early.ID)
		}
		if n := mustSeal(t, s); n != 1 {
			t.Errorf("AuditSeal while the first row's transaction is open sealed %d rows, want the second", n)
		}
		verify(t, s, 2, 0)
		close(release)
		if err := <-lateErr; err != nil {
			t.Fatalf("the late transaction: %v", err)
		}
		verify(t, s, 2, 1)
		if n := mustSeal(t, s); n != 1 {
			t.Errorf("AuditSeal after the late commit sealed %d rows, want it", n)
		}
		es := auditList(t, s)
		if fmt.Sprint(auditIDs(es)) != fmt.Sprint([]int64{es[0].ID, late.ID, early.ID}) || fmt.Sprint(auditSeqs(es)) != "[1 3 2]" {
			t.Errorf("rows by id: ids %v, seqs %v; want the late row (id %d) sealed as 3, after id %d as 2",
				auditIDs(es), auditSeqs(es), late.ID, early.ID)
		}
		verify(t, s, 3, 0)
	})
}

// UpgradeAuditRows returns n rows of an audit log as Lapse appended them
// before rows were sealed behind the writes (migration 0020): each
// numbered and chained as it was appended. A store's upgrade test writes
// them into a database at the schema before that migration, migrates it,
// and hands the store to CheckAuditUpgrade.
func UpgradeAuditRows(n int) []*lapse.AuditEntry {
	rows := make([]*lapse.AuditEntry, n)
	var prev []byte
	for i := range rows {
		e := newEntry(i + 1)
		if i%2 == 1 {
			e.Params, e.Batch, e.Reason = nil, 3, "a reason"
		}
		e.Seq, e.PrevHash = int64(i+1), prev
		e.Hash = lapse.AuditHash(prev, e)
		rows[i], prev = e, e.Hash
	}
	return rows
}

// CheckAuditUpgrade checks a store migrated with the rows of
// UpgradeAuditRows in it: they are sealed, with ids equal to their seqs,
// as they were written, and the chain verifies; a row appended now gets an
// id above them and is sealed onto the chain's end.
func CheckAuditUpgrade(t *testing.T, s lapse.Store, old []*lapse.AuditEntry) {
	t.Helper()
	ctx := ctxT(t)
	as, ok := s.(lapse.AccessStore)
	if !ok {
		t.Fatalf("%T is not a lapse.AccessStore", s)
	}
	verify(t, as, int64(len(old)), 0)
	got := auditList(t, as)
	if len(got) != len(old) {
		t.Fatalf("%d rows after the upgrade, want %d", len(got), len(old))
	}
	for i, e := range got {
		want := *old[i]
		want.ID = want.Seq
		if fmt.Sprint(*e) != fmt.Sprint(want) {
			t.Errorf("row %d after the upgrade =\n%+v\nwant\n%+v", i+1, *e, want)
		}
	}
	e := newEntry(len(old) + 1)
	mustAppend(t, s, e)
	if e.ID <= int64(len(old)) {
		t.Errorf("a row appended after the upgrade has id %d, want one above %d", e.ID, len(old))
	}
	if n := mustSeal(t, s); n != 1 {
		t.Errorf("AuditSeal after the upgrade sealed %d rows, want 1", n)
	}
	if seq, hash, err := as.AuditHead(ctx); seq != int64(len(old)+1) || err != nil {
		t.Errorf("AuditHead = %d, %x, %v; want %d", seq, hash, err, len(old)+1)
	}
	verify(t, as, int64(len(old)+1), 0)
}
