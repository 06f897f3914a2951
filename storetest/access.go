package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// RunAccess runs the conformance tests of lapse.AccessStore against the
// stores made by newStore, which must also be AccessStores, as must the
// Store their Tx gives: API keys, operators and their sessions, approval
// requests, the audit log and manual close batches.
func RunAccess(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s accessStore)
	}{
		{"APIKey", testAPIKey},
		{"APIKeyRevoke", testAPIKeyRevoke},
		{"Operator", testOperator},
		{"OperatorLock", testOperatorLock},
		{"Session", testSession},
		{"Stake", testStake},
		{"AccessTimes", testAccessTimes},
		{"AccessInTx", testAccessInTx},
		{"Approval", testApproval},
		{"ApprovalList", testApprovalList},
		{"ApprovalDecide", testApprovalDecide},
		{"ApprovalDecideConcurrent", testApprovalDecideConcurrent},
		{"AuditAppend", testAuditAppend},
		{"AuditRollback", testAuditRollback},
		{"AuditConcurrent", testAuditConcurrent},
		{"AuditParams", testAuditParams},
		{"AuditList", testAuditList},
		{"AuditSealGuards", testAuditSealGuards},
		{"AuditChainList", testAuditChainList},
		{"CloseBatchLock", testCloseBatchLock},
		{"CloseBatch", testCloseBatch},
		{"CloseItems", testCloseItems},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			as, ok := s.(accessStore)
			if !ok {
				t.Fatalf("%T is not a lapse.AccessStore", s)
			}
			tt.fn(t, as)
		})
	}
}

// accessStore is a store that keeps access records.
type accessStore interface {
	lapse.Store
	lapse.AccessStore
}

// accessTx runs fn in a transaction of s, on the AccessStore that Tx gives.
// It is safe in any goroutine: it reports a Store that is no AccessStore as
// an error, not with t.Fatal.
func accessTx(t *testing.T, s lapse.Store, fn func(tx lapse.AccessStore) error) error {
	t.Helper()
	return s.Tx(ctxT(t), func(tx lapse.Store) error {
		as, ok := tx.(lapse.AccessStore)
		if !ok {
			return fmt.Errorf("the Store that Tx gives, %T, is not a lapse.AccessStore", tx)
		}
		return fn(as)
	})
}

// values is what xs point to, for printing and comparing with fmt.Sprint.
func values[T any](xs []*T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = *x
	}
	return out
}

// digest is a SHA-256 as a store keeps hashes, with a zero and a 0xff byte
// up front so that a store that keeps it as text fails.
func digest(s string) []byte {
	h := sha256.Sum256([]byte(s))
	h[0], h[1] = 0, 0xff
	return h[:]
}

func newKey(prefix string) *lapse.APIKey {
	return &lapse.APIKey{Prefix: prefix, Name: "service " + prefix, Scopes: []string{"orders:read", "orders:write", "refunds:create"},
		Hash: digest(prefix), CreatedAt: base, CreatedBy: "cli:root"}
}

func mustKey(t *testing.T, s lapse.AccessStore, k *lapse.APIKey) *lapse.APIKey {
	t.Helper()
	got, err := s.APIKeyCreate(ctxT(t), k)
	if err != nil {
		t.Fatalf("APIKeyCreate %s: %v", k.Prefix, err)
	}
	return got
}

func testAPIKey(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	if _, err := s.APIKeyGet(ctx, "lk_none"); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("APIKeyGet of an unknown prefix = %v, want ErrAccessNotFound", err)
	}
	if ks, err := s.APIKeyList(ctx); err != nil || len(ks) != 0 {
		t.Errorf("APIKeyList of no keys = %v, %v", ks, err)
	}
	b := newKey("lk_b")
	b.ID = 1000 // ignored
	a := newKey("lk_a")
	a.Scopes, a.CreatedBy = nil, "operator:alice"
	var want []*lapse.APIKey
	for _, k := range []*lapse.APIKey{b, a} {
		got := mustKey(t, s, k)
		w := *k
		w.ID = got.ID
		if got.ID <= 0 || got.ID == 1000 || fmt.Sprint(*got) != fmt.Sprint(w) {
			t.Errorf("APIKeyCreate returned\n%+v\nwant\n%+v", *got, w)
		}
		want = append(want, &w)
	}
	if want[1].ID <= want[0].ID {
		t.Errorf("the second key has ID %d, not above the first's %d", want[1].ID, want[0].ID)
	}
	taken := newKey("lk_b")
	taken.Name, taken.Hash = "another", digest("another")
	if _, err := s.APIKeyCreate(ctx, taken); !errors.Is(err, lapse.ErrAccessExists) {
		t.Errorf("APIKeyCreate of a taken prefix = %v, want ErrAccessExists", err)
	}
	for _, w := range want {
		if got, err := s.APIKeyGet(ctx, w.Prefix); err != nil || fmt.Sprint(*got) != fmt.Sprint(*w) {
			t.Errorf("APIKeyGet %s = %+v, %v; want %+v", w.Prefix, got, err, *w)
		}
	}
	// By ID, which is not the order of the prefixes.
	if ks, err := s.APIKeyList(ctx); err != nil || fmt.Sprint(values(ks)) != fmt.Sprint(values(want)) {
		t.Errorf("APIKeyList = %+v, %v; want %+v", values(ks), err, values(want))
	}
}

func testAPIKeyRevoke(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	k := mustKey(t, s, newKey("lk_r"))
	other := mustKey(t, s, newKey("lk_o"))
	want := *k
	want.RevokedAt = base.Add(time.Hour)
	if got, err := s.APIKeyRevoke(ctx, "lk_r", base.Add(time.Hour)); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("APIKeyRevoke = %+v, %v; want %+v", got, err, want)
	}
	// Revoking again keeps the first time.
	if got, err := s.APIKeyRevoke(ctx, "lk_r", base.Add(2*time.Hour)); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("APIKeyRevoke again = %+v, %v; want it revoked at the first time, %+v", got, err, want)
	}
	if got, err := s.APIKeyGet(ctx, "lk_r"); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("APIKeyGet of a revoked key = %+v, %v; want %+v", got, err, want)
	}
	if ks, err := s.APIKeyList(ctx); err != nil || fmt.Sprint(values(ks)) != fmt.Sprint(values([]*lapse.APIKey{&want, other})) {
		t.Errorf("APIKeyList = %+v, %v; want the revoked key and the other", values(ks), err)
	}
	if _, err := s.APIKeyRevoke(ctx, "lk_none", base); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("APIKeyRevoke of an unknown prefix = %v, want ErrAccessNotFound", err)
	}
}

func newOperator(name string) *lapse.Operator {
	return &lapse.Operator{Name: name, Role: "operator", PasswordHash: "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA",
		TOTPSecret: "JBSWY3DPEHPK3PXP", Lang: "en", TimeZone: "Asia/Shanghai", CreatedAt: base}
}

func mustOperator(t *testing.T, s lapse.AccessStore, name string) *lapse.Operator {
	t.Helper()
	o, err := s.OperatorCreate(ctxT(t), newOperator(name))
	if err != nil {
		t.Fatalf("OperatorCreate %s: %v", name, err)
	}
	return o
}

func operatorCount(t *testing.T, s lapse.AccessStore) int64 {
	t.Helper()
	n, err := s.OperatorCount(ctxT(t))
	if err != nil {
		t.Fatalf("OperatorCount: %v", err)
	}
	return n
}

func testOperator(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	for name, get := range map[string]func() (*lapse.Operator, error){
		"OperatorGet":  func() (*lapse.Operator, error) { return s.OperatorGet(ctx, "nobody") },
		"OperatorLock": func() (*lapse.Operator, error) { return s.OperatorLock(ctx, "nobody") },
	} {
		if _, err := get(); !errors.Is(err, lapse.ErrAccessNotFound) {
			t.Errorf("%s of an unknown name = %v, want ErrAccessNotFound", name, err)
		}
	}
	if n := operatorCount(t, s); n != 0 {
		t.Errorf("OperatorCount of none = %d", n)
	}
	in := newOperator("bob")
	in.ID = 1000 // ignored
	bob, err := s.OperatorCreate(ctx, in)
	if err != nil {
		t.Fatalf("OperatorCreate: %v", err)
	}
	wantBob := *in
	wantBob.ID = bob.ID
	if bob.ID <= 0 || bob.ID == 1000 || fmt.Sprint(*bob) != fmt.Sprint(wantBob) {
		t.Errorf("OperatorCreate returned\n%+v\nwant\n%+v", *bob, wantBob)
	}
	alice := mustOperator(t, s, "alice")
	if _, err := s.OperatorCreate(ctx, newOperator("alice")); !errors.Is(err, lapse.ErrAccessExists) {
		t.Errorf("OperatorCreate of a taken name = %v, want ErrAccessExists", err)
	}
	if got, err := s.OperatorGet(ctx, "alice"); err != nil || fmt.Sprint(*got) != fmt.Sprint(*alice) {
		t.Errorf("OperatorGet = %+v, %v; want %+v", got, err, *alice)
	}
	if got, err := s.OperatorLock(ctx, "alice"); err != nil || fmt.Sprint(*got) != fmt.Sprint(*alice) {
		t.Errorf("OperatorLock outside Tx = %+v, %v; want %+v", got, err, *alice)
	}
	if n := operatorCount(t, s); n != 2 {
		t.Errorf("OperatorCount = %d, want 2", n)
	}

	// Every field but ID, Name and CreatedAt is written.
	changed := &lapse.Operator{ID: alice.ID, Name: "mallory", Role: "admin", PasswordHash: "$argon2id$v=19$new", TOTPSecret: "NEWSECRET",
		FailedLogins: 5, LockedUntil: base.Add(15 * time.Minute), LastTOTPStep: 59_000_123, Lang: "zh", TimeZone: "Europe/Berlin",
		CreatedAt: base.Add(time.Hour), DisabledAt: base.Add(time.Minute)}
	if err := s.OperatorUpdate(ctx, changed); err != nil {
		t.Fatalf("OperatorUpdate: %v", err)
	}
	want := *changed
	want.Name, want.CreatedAt = alice.Name, alice.CreatedAt
	if got, err := s.OperatorGet(ctx, "alice"); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("OperatorGet after OperatorUpdate =\n%+v, %v\nwant\n%+v", got, err, want)
	}
	if _, err := s.OperatorGet(ctx, "mallory"); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("OperatorUpdate renamed the operator: OperatorGet of the new name = %v", err)
	}
	if n := operatorCount(t, s); n != 1 {
		t.Errorf("OperatorCount with alice disabled = %d, want 1", n)
	}
	// Zero values, times too, are written back as zero.
	cleared := *alice
	cleared.Role, cleared.TOTPSecret, cleared.Lang, cleared.TimeZone = "viewer", "", "", ""
	if err := s.OperatorUpdate(ctx, &cleared); err != nil {
		t.Fatalf("OperatorUpdate to zero values: %v", err)
	}
	if got, err := s.OperatorGet(ctx, "alice"); err != nil || fmt.Sprint(*got) != fmt.Sprint(cleared) {
		t.Errorf("OperatorGet after clearing =\n%+v, %v\nwant\n%+v", got, err, cleared)
	}
	if n := operatorCount(t, s); n != 2 {
		t.Errorf("OperatorCount with alice enabled again = %d, want 2", n)
	}
	if ops, err := s.OperatorList(ctx); err != nil || fmt.Sprint(values(ops)) != fmt.Sprint(values([]*lapse.Operator{bob, &cleared})) {
		t.Errorf("OperatorList = %+v, %v; want bob, alice", values(ops), err)
	}
	missing := *bob
	missing.ID = alice.ID + 1000
	if err := s.OperatorUpdate(ctx, &missing); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("OperatorUpdate of an unknown ID = %v, want ErrAccessNotFound", err)
	}
}

// testOperatorLock: read-modify-writes of one operator under OperatorLock,
// from two goroutines at once, lose no write.
func testOperatorLock(t *testing.T, s accessStore) {
	mustOperator(t, s, "carol")
	const workers, each = 2, 20
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				err := accessTx(t, s, func(tx lapse.AccessStore) error {
					o, err := tx.OperatorLock(ctxT(t), "carol")
					if err != nil {
						return err
					}
					o.FailedLogins++
					return tx.OperatorUpdate(ctxT(t), o)
				})
				if err != nil {
					t.Errorf("a counted failure: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if o, err := s.OperatorGet(ctxT(t), "carol"); err != nil || o.FailedLogins != workers*each {
		t.Errorf("after %d locked increments: %+v, %v", workers*each, o, err)
	}
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		_, err := tx.OperatorLock(ctxT(t), "nobody")
		return err
	})
	if !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("OperatorLock of an unknown name in Tx = %v, want ErrAccessNotFound", err)
	}
}

func newSession(token string, operatorID int64) *lapse.Session {
	return &lapse.Session{ID: digest(token), OperatorID: operatorID, CreatedAt: base, ExpiresAt: base.Add(12 * time.Hour),
		ClientAddr: "203.0.113.7"}
}

func testSession(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	dave, erin := mustOperator(t, s, "dave"), mustOperator(t, s, "erin")
	s1, s2, s3 := newSession("tok-1", dave.ID), newSession("tok-2", dave.ID), newSession("tok-3", erin.ID)
	for _, x := range []*lapse.Session{s1, s2, s3} {
		if err := s.SessionCreate(ctx, x); err != nil {
			t.Fatalf("SessionCreate: %v", err)
		}
	}
	if got, err := s.SessionGet(ctx, s1.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(*s1) {
		t.Errorf("SessionGet = %+v, %v; want %+v", got, err, *s1)
	}
	for _, id := range [][]byte{digest("tok-none"), s1.ID[:31], nil} {
		if _, err := s.SessionGet(ctx, id); !errors.Is(err, lapse.ErrAccessNotFound) {
			t.Errorf("SessionGet of unknown id %x = %v, want ErrAccessNotFound", id, err)
		}
	}

	// Only the expiry and the second factor are written.
	changed := *s1
	changed.ExpiresAt, changed.SecondFactorAt = base.Add(24*time.Hour), base.Add(time.Hour)
	changed.OperatorID, changed.CreatedAt, changed.ClientAddr = erin.ID, base.Add(time.Minute), "198.51.100.1"
	if err := s.SessionUpdate(ctx, &changed); err != nil {
		t.Fatalf("SessionUpdate: %v", err)
	}
	want := *s1
	want.ExpiresAt, want.SecondFactorAt = changed.ExpiresAt, changed.SecondFactorAt
	if got, err := s.SessionGet(ctx, s1.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("SessionGet after SessionUpdate = %+v, %v; want %+v", got, err, want)
	}
	want.SecondFactorAt = time.Time{}
	if err := s.SessionUpdate(ctx, &want); err != nil {
		t.Fatalf("SessionUpdate to no second factor: %v", err)
	}
	if got, err := s.SessionGet(ctx, s1.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("SessionGet after clearing the second factor = %+v, %v; want %+v", got, err, want)
	}
	if err := s.SessionUpdate(ctx, newSession("tok-none", dave.ID)); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("SessionUpdate of an unknown id = %v, want ErrAccessNotFound", err)
	}

	for range 2 { // the second time there is nothing to delete
		if err := s.SessionDelete(ctx, s1.ID); err != nil {
			t.Errorf("SessionDelete: %v", err)
		}
	}
	if _, err := s.SessionGet(ctx, s1.ID); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("SessionGet of a deleted session = %v, want ErrAccessNotFound", err)
	}
	// Ending an operator's sessions: those in force end then; one ended
	// before keeps its end; another operator's are left alone.
	s4 := newSession("tok-4", dave.ID)
	s4.ExpiresAt = base.Add(time.Hour)
	if err := s.SessionCreate(ctx, s4); err != nil {
		t.Fatalf("SessionCreate: %v", err)
	}
	end := base.Add(2 * time.Hour)
	for range 2 {
		if err := s.SessionEndOperator(ctx, dave.ID, end); err != nil {
			t.Errorf("SessionEndOperator: %v", err)
		}
	}
	for _, c := range []struct {
		x    *lapse.Session
		want time.Time
	}{{s2, end}, {s4, s4.ExpiresAt}, {s3, s3.ExpiresAt}} {
		want := *c.x
		want.ExpiresAt = c.want
		if got, err := s.SessionGet(ctx, c.x.ID); err != nil || fmt.Sprint(*got) != fmt.Sprint(want) {
			t.Errorf("SessionGet after SessionEndOperator(dave) = %+v, %v; want %+v", got, err, want)
		}
	}
}

// testStake: the stakes of an operator add up after a time, to the
// microsecond: a stake at since is not after it. Each operator's are their
// own; none is 0. In a transaction a stake is summed with the rest once it
// is written, and gone with the transaction's rollback.
func testStake(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	dave, erin := mustOperator(t, s, "dave"), mustOperator(t, s, "erin")
	sum := func(operatorID int64, since time.Time) int64 {
		t.Helper()
		n, err := s.StakeSum(ctx, operatorID, since)
		if err != nil {
			t.Fatalf("StakeSum: %v", err)
		}
		return n
	}
	if n := sum(dave.ID, time.Time{}); n != 0 {
		t.Fatalf("StakeSum with no stakes = %d, want 0", n)
	}
	for i, st := range []*lapse.Stake{
		{OperatorID: dave.ID, Action: "close.batch", Target: "close", Count: 60, At: base},
		{OperatorID: dave.ID, Action: "group.fire", Target: "group:G-1", Count: 40, At: base.Add(time.Hour)},
		{OperatorID: dave.ID, Action: "close.batch", Target: "close", Count: 1 << 40, At: base.Add(2 * time.Hour)},
		{OperatorID: erin.ID, Action: "close.batch", Target: "close", Count: 7, At: base.Add(time.Hour)},
	} {
		if err := s.StakeCreate(ctx, st); err != nil {
			t.Fatalf("StakeCreate %d: %v", i, err)
		}
	}
	for _, c := range []struct {
		since time.Time
		want  int64
	}{
		{base.Add(-time.Microsecond), 60 + 40 + 1<<40},
		{base, 40 + 1<<40},
		{base.Add(time.Hour - time.Microsecond), 40 + 1<<40},
		{base.Add(time.Hour), 1 << 40},
		{base.Add(2 * time.Hour), 0},
	} {
		if n := sum(dave.ID, c.since); n != c.want {
			t.Errorf("StakeSum of dave after %v = %d, want %d", c.since, n, c.want)
		}
	}
	if n := sum(erin.ID, time.Time{}); n != 7 {
		t.Errorf("StakeSum of erin = %d, want 7", n)
	}

	errRollback := errors.New("roll back")
	err := accessTx(t, s, func(tx lapse.AccessStore) error {
		if err := tx.StakeCreate(ctx, &lapse.Stake{OperatorID: erin.ID, Action: "close.batch", Count: 3, At: base.Add(3 * time.Hour)}); err != nil {
			return err
		}
		if n, err := tx.StakeSum(ctx, erin.ID, base); err != nil || n != 10 {
			return fmt.Errorf("StakeSum in the transaction = %d, %v; want 10", n, err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	if n := sum(erin.ID, time.Time{}); n != 7 {
		t.Errorf("StakeSum of erin after a rollback = %d, want 7", n)
	}
}

// testAccessTimes: access records keep times as Store does, to the
// microsecond (truncated) in UTC, and a zero time as zero.
func testAccessTimes(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	east := time.FixedZone("UTC+8", 8*60*60)
	at := base.Add(time.Hour + 1999*time.Nanosecond).In(east)
	wantAt := base.Add(time.Hour + time.Microsecond)
	same := func(what string, got, want time.Time) {
		t.Helper()
		if got != want {
			t.Errorf("%s came back as %v, want %v", what, got, want)
		}
	}
	k := newKey("lk_t")
	k.CreatedAt = at
	mustKey(t, s, k)
	if _, err := s.APIKeyRevoke(ctx, "lk_t", at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.APIKeyGet(ctx, "lk_t")
	if err != nil {
		t.Fatal(err)
	}
	same("a key's CreatedAt", got.CreatedAt, wantAt)
	same("a key's RevokedAt", got.RevokedAt, wantAt.Add(time.Minute))

	o := newOperator("tim")
	o.CreatedAt, o.LockedUntil = at, at.Add(-time.Nanosecond)
	if _, err := s.OperatorCreate(ctx, o); err != nil {
		t.Fatal(err)
	}
	op, err := s.OperatorGet(ctx, "tim")
	if err != nil {
		t.Fatal(err)
	}
	same("an operator's CreatedAt", op.CreatedAt, wantAt)
	same("an operator's LockedUntil", op.LockedUntil, base.Add(time.Hour+time.Microsecond))
	same("an operator's DisabledAt", op.DisabledAt, time.Time{})

	ss := newSession("tok-t", op.ID)
	ss.CreatedAt, ss.ExpiresAt = at, at.Add(time.Hour)
	if err := s.SessionCreate(ctx, ss); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SessionGet(ctx, ss.ID); err != nil {
		t.Fatal(err)
	} else {
		same("a session's CreatedAt", got.CreatedAt, wantAt)
		same("a session's ExpiresAt", got.ExpiresAt, wantAt.Add(time.Hour))
		same("a session's SecondFactorAt", got.SecondFactorAt, time.Time{})
	}

	a := newApproval("order:T-1", at)
	ap, err := s.ApprovalCreate(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.ApprovalGet(ctx, ap.ID); err != nil {
		t.Fatal(err)
	} else {
		same("an approval's CreatedAt", got.CreatedAt, wantAt)
		same("an approval's ExpiresAt", got.ExpiresAt, wantAt.Add(24*time.Hour))
		same("an approval's DecidedAt", got.DecidedAt, time.Time{})
	}

	b, err := s.CloseBatchCreate(ctx, &lapse.CloseBatch{Selector: []byte(`{}`), CreatedBy: "cli:root", CreatedAt: at,
		Status: lapse.CloseBatchRunning}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.CloseBatchGet(ctx, b.ID); err != nil {
		t.Fatal(err)
	} else {
		same("a batch's CreatedAt", got.CreatedAt, wantAt)
		same("a batch's FinishedAt", got.FinishedAt, time.Time{})
	}
}

// testAccessInTx: the access methods of a transaction's Store write in it,
// roll back with it, and refuse (a taken name, a stale decision, a missing
// row) without spoiling it.
func testAccessInTx(t *testing.T, s accessStore) {
	ctx := ctxT(t)
	mustKey(t, s, newKey("lk_taken"))
	mustOperator(t, s, "taken")
	ap, err := s.ApprovalCreate(ctx, newApproval("order:TX-1", base))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = accessTx(t, s, func(tx lapse.AccessStore) error {
		mustKey(t, tx, newKey("lk_gone"))
		mustOperator(t, tx, "gone")
		if _, err := tx.APIKeyRevoke(ctx, "lk_taken", base); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want fn's error", err)
	}
	if _, err := s.APIKeyGet(ctx, "lk_gone"); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("a key created in a rolled back Tx: %v", err)
	}
	if _, err := s.OperatorGet(ctx, "gone"); !errors.Is(err, lapse.ErrAccessNotFound) {
		t.Errorf("an operator created in a rolled back Tx: %v", err)
	}
	if k, err := s.APIKeyGet(ctx, "lk_taken"); err != nil || !k.RevokedAt.IsZero() {
		t.Errorf("a key revoked in a rolled back Tx: %+v, %v", k, err)
	}

	is := func(want error) func(error) bool { return func(err error) bool { return errors.Is(err, want) } }
	refusals := []struct {
		name string
		ok   func(error) bool
		call func(tx lapse.AccessStore) error
	}{
		{"key exists", is(lapse.ErrAccessExists), func(tx lapse.AccessStore) error {
			_, err := tx.APIKeyCreate(ctx, newKey("lk_taken"))
			return err
		}},
		{"operator exists", is(lapse.ErrAccessExists), func(tx lapse.AccessStore) error {
			_, err := tx.OperatorCreate(ctx, newOperator("taken"))
			return err
		}},
		{"no operator", is(lapse.ErrAccessNotFound), func(tx lapse.AccessStore) error {
			_, err := tx.OperatorLock(ctx, "nobody")
			return err
		}},
		{"no session", is(lapse.ErrAccessNotFound), func(tx lapse.AccessStore) error {
			return tx.SessionUpdate(ctx, newSession("tok-none", 1))
		}},
		{"approval stale", is(lapse.ErrStale), func(tx lapse.AccessStore) error {
			_, err := tx.ApprovalDecide(ctx, &lapse.ApprovalDecideParams{ID: ap.ID, From: lapse.ApprovalApproved, To: lapse.ApprovalExecuted,
				DecidedAt: base})
			return err
		}},
		{"no batch", is(lapse.ErrAccessNotFound), func(tx lapse.AccessStore) error {
			return tx.CloseBatchUpdate(ctx, &lapse.CloseBatch{ID: 1000, Status: lapse.CloseBatchDone})
		}},
	}
	err = accessTx(t, s, func(tx lapse.AccessStore) error {
		for _, r := range refusals {
			if err := r.call(tx); !r.ok(err) {
				t.Errorf("%s = %v", r.name, err)
			}
		}
		mustKey(t, tx, newKey("lk_after"))
		return lapse.AuditAppend(ctx, tx, newEntry(1))
	})
	if err != nil {
		t.Fatalf("Tx after refusals = %v, want it to commit", err)
	}
	if _, err := s.APIKeyGet(ctx, "lk_after"); err != nil {
		t.Errorf("the key created after refusals: %v", err)
	}
	if es := auditList(t, s); len(es) != 1 {
		t.Errorf("audit rows = %d, want the row appended after refusals", len(es))
	}
}
