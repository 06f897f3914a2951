package access_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// four is an env with a maker (alice) and two approvers (bob, carol), all
// operators logged in, and a viewer (vic).
type four struct {
	*env
	alice, bob, carol, vic *access.Principal
	secrets                map[string]string
}

func newFour(t *testing.T, cfg access.Config) *four {
	t.Helper()
	f := &four{env: newEnv(t, cfg), secrets: map[string]string{}}
	for _, who := range []struct {
		name, role string
		p          **access.Principal
	}{{"alice", access.RoleOperator, &f.alice}, {"bob", access.RoleOperator, &f.bob}, {"carol", access.RoleAdmin, &f.carol}, {"vic", access.RoleViewer, &f.vic}} {
		_, secret := f.addOperator(who.name, who.role)
		f.secrets[who.name] = secret
		_, *who.p = f.login(who.name, secret)
	}
	return f
}

// request makes alice request a refund of amount.
func (f *four) request(amount int64) *lapse.Approval {
	f.t.Helper()
	a, err := f.svc.RequestApproval(f.ctx, f.alice, &lapse.Approval{
		Action: "refund.create", Target: "order:A-1", Amount: amount, Currency: "EUR",
		Request: []byte(`{"amount":` + itoa(amount) + `}`), Reason: "customer asked",
	}, "totp")
	if err != nil {
		f.t.Fatalf("RequestApproval: %v", err)
	}
	return a
}

// ran counts the calls of an execute function.
type ran struct{ n atomic.Int32 }

func (r *ran) execute(result string, err error) func(context.Context, *lapse.Approval) (string, error) {
	return func(_ context.Context, a *lapse.Approval) (string, error) {
		r.n.Add(1)
		if a.Status != lapse.ApprovalApproved {
			return "", errors.New("executed while " + string(a.Status))
		}
		return result, err
	}
}

func TestNeedsApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{ApprovalAmount: 10000, ApprovalCount: 50})
	e.addOperator("alice", access.RoleOperator)
	op, err := e.svc.OperatorPrincipal(e.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	key := &access.Principal{Kind: access.KindKey}
	for _, c := range []struct {
		p             *access.Principal
		amount, count int64
		want          bool
	}{
		{op, 10000, 0, false}, {op, 10001, 0, true}, {op, 0, 50, false}, {op, 0, 51, true},
		{key, 1 << 40, 1 << 20, false}, {access.CLI("root"), 1 << 40, 0, false}, {nil, 1 << 40, 0, false},
	} {
		if got, err := e.svc.NeedsApproval(e.ctx, c.p, c.amount, c.count); got != c.want || err != nil {
			t.Errorf("NeedsApproval(%v, %d, %d) = %v, %v", c.p, c.amount, c.count, got, err)
		}
	}
	never := e.service(e.db, access.Config{})
	if got, err := never.NeedsApproval(e.ctx, op, 1<<40, 1<<20); got || err != nil {
		t.Fatalf("zero thresholds: %v, %v; want no approval", got, err)
	}
}

// TestApprovalCountAddsUp: the orders an operator puts at stake on their
// own word (Admit, without approval) add up toward ApprovalCount over the
// last ApprovalWindow (24 hours), so that 100 orders and then 100 more need
// a second operator as 200 at once do. Each operator has their own count;
// keys and the command line have none; what was held for approval does not
// count; once the window has passed an action counts no more. Of
// concurrent actions each is judged with those before it.
func TestApprovalCountAddsUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{ApprovalCount: 100})
	var alice, bob *access.Principal
	for name, p := range map[string]**access.Principal{"alice": &alice, "bob": &bob} {
		_, secret := e.addOperator(name, access.RoleOperator)
		_, *p = e.login(name, secret)
	}
	admit := func(p *access.Principal, count int64, want bool) {
		t.Helper()
		if got, err := e.svc.Admit(e.ctx, p, "close.batch", "close", 0, count); got != want || err != nil {
			t.Fatalf("Admit(%s, %d) = %v, %v; want %v", p.Name, count, got, err, want)
		}
	}
	needs := func(p *access.Principal, count int64, want bool) {
		t.Helper()
		if got, err := e.svc.NeedsApproval(e.ctx, p, 0, count); got != want || err != nil {
			t.Fatalf("NeedsApproval(%s, %d) = %v, %v; want %v", p.Name, count, got, err, want)
		}
	}
	admit(alice, 60, false)
	e.clock.Advance(time.Hour)
	needs(alice, 40, false)
	needs(alice, 41, true)
	admit(alice, 40, false)
	admit(alice, 1, true) // 101 in a day
	admit(alice, 1, true) // held for approval, it did not count
	needs(alice, 0, false)
	admit(bob, 100, false)
	admit(access.CLI("root"), 1000, false)
	admit(&access.Principal{Kind: access.KindKey, ID: "k"}, 1000, false)
	admit(alice, 0, false)

	// The first 60 leave the window 24 hours after they were made.
	e.clock.Advance(23*time.Hour - time.Microsecond)
	needs(alice, 1, true)
	e.clock.Advance(time.Microsecond)
	admit(alice, 60, false)
	needs(alice, 1, true)

	// Five concurrent closes of 34 by bob, a day later: two fit in his
	// 100, each judged with those admitted before it.
	e.clock.Advance(24 * time.Hour)
	var wg sync.WaitGroup
	var admitted atomic.Int32
	for range 5 {
		wg.Go(func() {
			if need, err := e.svc.Admit(e.ctx, bob, "close.batch", "close", 0, 34); err != nil {
				t.Errorf("Admit: %v", err)
			} else if !need {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 2 {
		t.Fatalf("%d of 5 concurrent closes of 34 admitted, want 2 (68 of 100; a third makes 102)", n)
	}
}

func TestApprove(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a := f.request(50000)
	if a.Status != lapse.ApprovalPending || a.MakerID != f.alice.OperatorID || a.MakerName != "alice" ||
		!a.CreatedAt.Equal(f.clock.Now()) || !a.ExpiresAt.Equal(f.clock.Now().Add(24*time.Hour)) || a.ID == 0 {
		t.Fatalf("request: %+v", a)
	}
	row := f.lastAudit("approval.request")
	if row.ApprovalID != a.ID || row.ActorName != "alice" || row.Target != "order:A-1" || row.Reason != "customer asked" {
		t.Fatalf("request row: %+v", row)
	}

	var r ran
	// Not the maker, not a key or the command line, not a viewer; not
	// without a second factor.
	_, err := f.svc.Approve(f.ctx, f.alice, a.ID, f.next(f.secrets["alice"]), r.execute("ok", nil))
	wantErr(t, err, lapse.EFORBIDDEN, "the operator who made a request cannot approve it")
	for _, by := range []*access.Principal{f.root, {Kind: access.KindKey, Scopes: []string{access.ScopeAdmin}}, f.vic, nil} {
		_, err := f.svc.Approve(f.ctx, by, a.ID, "", r.execute("ok", nil))
		wantErr(t, err, lapse.EFORBIDDEN, "")
	}
	_, err = f.svc.Approve(f.ctx, f.bob, a.ID, "", r.execute("ok", nil))
	wantErr(t, err, lapse.EFORBIDDEN, "this action needs a fresh second factor")
	_, err = f.svc.Approve(f.ctx, f.bob, a.ID, "000000", r.execute("ok", nil))
	wantErr(t, err, lapse.EFORBIDDEN, "")
	_, err = f.svc.Approve(f.ctx, f.bob, 999, f.next(f.secrets["bob"]), r.execute("ok", nil))
	wantErr(t, err, lapse.ENOTFOUND, "")
	if r.n.Load() != 0 {
		t.Fatal("executed without approval")
	}

	got, err := f.svc.Approve(f.ctx, f.bob, a.ID, f.next(f.secrets["bob"]), r.execute("refund R-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != lapse.ApprovalExecuted || got.Result != "refund R-1" || got.ApproverID != f.bob.OperatorID || got.ApproverName != "bob" || got.DecidedAt.IsZero() {
		t.Fatalf("approved: %+v", got)
	}
	if r.n.Load() != 1 {
		t.Fatalf("executed %d times", r.n.Load())
	}
	row = f.lastAudit("approval.approve")
	if row.ApprovalID != a.ID || row.Approver != "bob" || row.SecondFactor != "totp" || row.ActorName != "bob" {
		t.Fatalf("approve row: %+v", row)
	}
	_, err = f.svc.Approve(f.ctx, f.carol, a.ID, f.next(f.secrets["carol"]), r.execute("again", nil))
	wantErr(t, err, lapse.ECONFLICT, "executed")
	if stored, _ := f.svc.Approval(f.ctx, a.ID); stored.Status != lapse.ApprovalExecuted {
		t.Fatalf("stored: %+v", stored)
	}
}

func TestApproveFreshSecondFactorSuffices(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a := f.request(100)
	if err := f.svc.VerifySecondFactor(f.ctx, f.bob, f.next(f.secrets["bob"])); err != nil {
		t.Fatal(err)
	}
	var r ran
	got, err := f.svc.Approve(f.ctx, f.bob, a.ID, "", r.execute("done", nil))
	if err != nil || got.Status != lapse.ApprovalExecuted {
		t.Fatalf("Approve: %+v, %v", got, err)
	}
}

func TestApproveExecuteFails(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a := f.request(100)
	var r ran
	failure := lapse.Errorf(lapse.ECONFLICT, "the order was refunded meanwhile")
	got, err := f.svc.Approve(f.ctx, f.bob, a.ID, f.next(f.secrets["bob"]), r.execute("", failure))
	if !errors.Is(err, failure) {
		t.Fatalf("error %v, want execute's", err)
	}
	if got == nil || got.Status != lapse.ApprovalFailed || got.Result != "the order was refunded meanwhile" {
		t.Fatalf("failed: %+v", got)
	}
}

func TestApprovePanics(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a := f.request(100)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
		}()
		_, _ = f.svc.Approve(f.ctx, f.bob, a.ID, f.next(f.secrets["bob"]), func(context.Context, *lapse.Approval) (string, error) {
			panic("boom")
		})
	}()
	if got, _ := f.svc.Approval(f.ctx, a.ID); got.Status != lapse.ApprovalFailed {
		t.Fatalf("after a panic: %+v", got)
	}
}

func TestApprovalExpires(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{ApprovalTTL: time.Hour})
	a := f.request(100)
	b := f.request(200)
	if err := f.svc.VerifySecondFactor(f.ctx, f.bob, f.next(f.secrets["bob"])); err != nil {
		t.Fatal(err)
	}
	f.clock.Set(a.ExpiresAt.Add(-time.Microsecond))
	if got, err := f.svc.Approval(f.ctx, a.ID); err != nil || got.Status != lapse.ApprovalPending {
		t.Fatalf("before it expires: %+v, %v", got, err)
	}
	f.clock.Set(a.ExpiresAt)
	got, err := f.svc.Approval(f.ctx, a.ID)
	if err != nil || got.Status != lapse.ApprovalExpired {
		t.Fatalf("at ExpiresAt: %+v, %v", got, err)
	}
	if row := f.lastAudit("approval.expire"); row.ApprovalID != a.ID || row.ActorKind != "system" {
		t.Fatalf("expire row: %+v", row)
	}
	var r ran
	_, err = f.svc.Approve(f.ctx, f.carol, a.ID, f.next(f.secrets["carol"]), r.execute("ok", nil))
	wantErr(t, err, lapse.ECONFLICT, "expired")
	_, err = f.svc.Reject(f.ctx, f.alice, a.ID, "never mind")
	wantErr(t, err, lapse.ECONFLICT, "expired")

	// Listing expires the others: b leaves the pending list.
	pending, err := f.svc.Approvals(f.ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalPending})
	if err != nil || len(pending) != 0 {
		t.Fatalf("pending: %+v, %v", pending, err)
	}
	all, err := f.svc.Approvals(f.ctx, nil)
	if err != nil || len(all) != 2 || all[0].ID != b.ID || all[0].Status != lapse.ApprovalExpired || all[1].Status != lapse.ApprovalExpired {
		t.Fatalf("all: %+v, %v", all, err)
	}
	if n := len(f.audit("approval.expire")); n != 2 {
		t.Fatalf("%d expire rows, want 2", n)
	}
	if r.n.Load() != 0 {
		t.Fatal("an expired request was executed")
	}
}

// TestApprovalsExpiredInPlace: a request that expires as a list of pending
// ones is read leaves it, and the pending requests behind it take its place,
// so that a page is short only at the end of the list and no pending request
// is left off it; a list of the expired ones holds every request past its
// ExpiresAt, also those no one has read since.
func TestApprovalsExpiredInPlace(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{ApprovalTTL: time.Hour})
	short := f.service(f.db, access.Config{ApprovalTTL: time.Minute})
	requestShort := func(target string) *lapse.Approval {
		t.Helper()
		a, err := short.RequestApproval(f.ctx, f.alice, &lapse.Approval{
			Action: "refund.create", Target: target, Amount: 100, Currency: "EUR", Request: []byte(`{"amount":100}`),
		}, "totp")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ids := func(as []*lapse.Approval) []int64 {
		var out []int64
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	a := f.request(100)            // pending for an hour
	b := requestShort("order:A-2") // due in a minute
	c := f.request(300)            // pending for an hour
	f.clock.Advance(time.Minute)
	page, err := f.svc.Approvals(f.ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalPending, Limit: 2})
	if err != nil || !slices.Equal(ids(page), []int64{c.ID, a.ID}) {
		t.Fatalf("a page of 2 pending: %v, %v; want [%d %d] (%d expired)", ids(page), err, c.ID, a.ID, b.ID)
	}

	d := requestShort("order:A-4")
	f.clock.Advance(time.Minute)
	expired, err := f.svc.Approvals(f.ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalExpired})
	if err != nil || !slices.Equal(ids(expired), []int64{d.ID, b.ID}) {
		t.Fatalf("expired: %v, %v; want [%d %d]", ids(expired), err, d.ID, b.ID)
	}
	if got, err := f.svc.Approval(f.ctx, d.ID); err != nil || got.Status != lapse.ApprovalExpired {
		t.Fatalf("d after the list: %+v, %v", got, err)
	}
	if n := len(f.audit("approval.expire")); n != 2 {
		t.Fatalf("%d expire rows, want 2", n)
	}
}

// TestApproveRace: two approvers at once; one approves, execute runs once,
// the other is told someone else decided.
func TestApproveRace(t *testing.T) {
	t.Parallel()
	for range 5 {
		f := newFour(t, access.Config{})
		a := f.request(100)
		for _, who := range []string{"bob", "carol"} {
			p := map[string]*access.Principal{"bob": f.bob, "carol": f.carol}[who]
			if err := f.svc.VerifySecondFactor(f.ctx, p, f.code(f.secrets[who])); err != nil {
				t.Fatal(err)
			}
		}
		var r ran
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, p := range []*access.Principal{f.bob, f.carol} {
			wg.Go(func() { _, errs[i] = f.svc.Approve(f.ctx, p, a.ID, "", r.execute("ok", nil)) })
		}
		wg.Wait()
		if r.n.Load() != 1 {
			t.Fatalf("executed %d times", r.n.Load())
		}
		lost := 0
		for _, err := range errs {
			if err != nil {
				wantErr(t, err, lapse.ECONFLICT, "")
				lost++
			}
		}
		if lost != 1 {
			t.Fatalf("errors %v: want one conflict", errs)
		}
		if n := len(f.audit("approval.approve")); n != 1 {
			t.Fatalf("%d approve rows, want 1", n)
		}
	}
}

func TestReject(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a := f.request(100)
	_, err := f.svc.Reject(f.ctx, f.vic, a.ID, "no")
	wantErr(t, err, lapse.EFORBIDDEN, "")
	_, err = f.svc.Reject(f.ctx, f.root, a.ID, "no")
	wantErr(t, err, lapse.EFORBIDDEN, "")
	// A reason that is not one line of at most 500 bytes is refused, not
	// cleaned or cut, and decides nothing.
	for _, bad := range []string{"two\nlines", "nul\x00", strings.Repeat("x", lapse.MaxReasonLen+1), "\xff"} {
		_, err = f.svc.Reject(f.ctx, f.bob, a.ID, bad)
		wantErr(t, err, lapse.EINVALID, "reason")
	}
	if got, _ := f.svc.Approval(f.ctx, a.ID); got.Status != lapse.ApprovalPending {
		t.Fatalf("a refused reason decided the request: %+v", got)
	}
	got, err := f.svc.Reject(f.ctx, f.bob, a.ID, "not this one")
	if err != nil || got.Status != lapse.ApprovalRejected || got.ApproverName != "bob" || got.Result != "not this one" {
		t.Fatalf("Reject: %+v, %v", got, err)
	}
	row := f.lastAudit("approval.reject")
	if row.ApprovalID != a.ID || row.Reason != "not this one" || row.ActorName != "bob" {
		t.Fatalf("reject row: %+v", row)
	}
	var r ran
	_, err = f.svc.Approve(f.ctx, f.carol, a.ID, f.next(f.secrets["carol"]), r.execute("ok", nil))
	wantErr(t, err, lapse.ECONFLICT, "rejected")
	_, err = f.svc.Reject(f.ctx, f.bob, a.ID, "again")
	wantErr(t, err, lapse.ECONFLICT, "rejected")

	// The maker may withdraw their own request.
	b := f.request(100)
	if got, err := f.svc.Reject(f.ctx, f.alice, b.ID, "withdrawn"); err != nil || got.Status != lapse.ApprovalRejected || got.ApproverName != "alice" {
		t.Fatalf("withdraw: %+v, %v", got, err)
	}
	_, err = f.svc.RequestApproval(f.ctx, f.root, &lapse.Approval{Action: "refund.create"}, "")
	wantErr(t, err, lapse.EINVALID, "")
	_, err = f.svc.RequestApproval(f.ctx, f.alice, &lapse.Approval{}, "totp")
	wantErr(t, err, lapse.EINVALID, "action")
}
