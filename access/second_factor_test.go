package access_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

func TestSecondFactor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{SecondFactorWindow: 5 * time.Minute})
	_, secret := e.addOperator("alice", access.RoleOperator)
	token, p := e.login("alice", secret)
	if e.svc.SecondFactorFresh(p) {
		t.Fatal("fresh after login")
	}
	code := e.next(secret)
	if err := e.svc.VerifySecondFactor(e.ctx, p, code); err != nil {
		t.Fatal(err)
	}
	at := e.clock.Now()
	if !p.Session.SecondFactorAt.Equal(at) || !e.svc.SecondFactorFresh(p) {
		t.Fatalf("after a code: %+v", p.Session)
	}
	row := e.lastAudit("second_factor")
	if row.Result != "ok" || row.SecondFactor != "totp" || row.ActorName != "alice" {
		t.Fatalf("audit row: %+v", row)
	}
	// Kept in the session, so the next request sees it.
	p2, err := e.svc.Session(e.ctx, token)
	if err != nil || !p2.Session.SecondFactorAt.Equal(at) || !e.svc.SecondFactorFresh(p2) {
		t.Fatalf("the next request: %+v, %v", p2, err)
	}
	// The window's end.
	e.clock.Set(at.Add(5*time.Minute - time.Microsecond))
	if !e.svc.SecondFactorFresh(p2) {
		t.Fatal("stale before the window ends")
	}
	e.clock.Set(at.Add(5 * time.Minute))
	if e.svc.SecondFactorFresh(p2) {
		t.Fatal("fresh at the window's end")
	}
	// The same code again while the second factor it gave is fresh (a form
	// sent twice): admitted, the second factor's time unchanged.
	e.clock.Set(at.Add(10 * time.Second))
	if err := e.svc.VerifySecondFactor(e.ctx, p, code); err != nil {
		t.Fatalf("the code again while fresh: %v", err)
	}
	if !p.Session.SecondFactorAt.Equal(at) {
		t.Fatalf("the code again moved the second factor's time: %+v", p.Session)
	}
	if row := e.lastAudit("second_factor"); row.Result != "ok: code already used, the second factor still fresh" || row.SecondFactor != "totp" {
		t.Fatalf("audit row: %+v", row)
	}
	e.noSecret(code, secret, token)
}

// TestSecondFactorOnce: a code is good once. Used again once the second
// factor it gave is no longer fresh, it is refused, says so (it used to
// say the code was wrong), and counts toward the lockout.
func TestSecondFactorOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{SecondFactorWindow: 20 * time.Second})
	_, secret := e.addOperator("alice", access.RoleOperator)
	_, p := e.login("alice", secret)
	code := e.next(secret)
	if err := e.svc.VerifySecondFactor(e.ctx, p, code); err != nil {
		t.Fatal(err)
	}
	at := e.clock.Now()
	e.clock.Set(at.Add(25 * time.Second)) // within the code's time, past the window
	wantErr(t, e.svc.VerifySecondFactor(e.ctx, p, code), lapse.EFORBIDDEN, "the code was used already: give the next one")
	if row := e.lastAudit("second_factor"); row.Result != "code already used" {
		t.Fatalf("audit row: %+v", row)
	}
	if o := e.operator("alice"); o.FailedLogins != 1 {
		t.Fatalf("failed attempts %d, want 1", o.FailedLogins)
	}
}

func TestSecondFactorOnlyOperators(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	key := &access.Principal{Kind: access.KindKey, ID: "abcdefghijkl", Scopes: []string{access.ScopeRefundsWrite}}
	for _, p := range []*access.Principal{key, e.root, nil} {
		wantErr(t, e.svc.VerifySecondFactor(e.ctx, p, "123456"), lapse.EINVALID, "only operators give a second factor")
		if e.svc.SecondFactorFresh(p) {
			t.Fatal("fresh")
		}
	}
	for _, p := range []*access.Principal{key, e.root} {
		if used, err := e.svc.RequireSecondFactor(e.ctx, p, ""); used != "" || err != nil {
			t.Fatalf("RequireSecondFactor(%s) = %q, %v", p.Kind, used, err)
		}
	}
}

func TestRequireSecondFactor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, secret := e.addOperator("alice", access.RoleOperator)
	_, p := e.login("alice", secret)
	_, err := e.svc.RequireSecondFactor(e.ctx, p, "")
	wantErr(t, err, lapse.EFORBIDDEN, "this action needs a fresh second factor")
	if used, err := e.svc.RequireSecondFactor(e.ctx, p, e.next(secret)); used != "totp" || err != nil {
		t.Fatalf("with a code: %q, %v", used, err)
	}
	if used, err := e.svc.RequireSecondFactor(e.ctx, p, ""); used != "totp" || err != nil {
		t.Fatalf("fresh: %q, %v", used, err)
	}
	e.clock.Advance(5 * time.Minute)
	_, err = e.svc.RequireSecondFactor(e.ctx, p, "")
	wantErr(t, err, lapse.EFORBIDDEN, "this action needs a fresh second factor")
	_, err = e.svc.RequireSecondFactor(e.ctx, p, "999999x")
	wantErr(t, err, lapse.EFORBIDDEN, "the code is wrong")
}

// TestSecondFactorLockout: wrong codes count with failed logins, lock the
// operator out of both, and a locked-out operator's codes are not checked.
func TestSecondFactorLockout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LockoutAfter: 3})
	_, secret := e.addOperator("alice", access.RoleOperator)
	_, p := e.login("alice", secret)
	_, _, err := e.svc.Login(e.ctx, "alice", "a wrong password", e.next(secret), "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	for range 2 {
		e.clock.Advance(30 * time.Second)
		wantErr(t, e.svc.VerifySecondFactor(e.ctx, p, "000000"), lapse.EFORBIDDEN, "the code is wrong")
	}
	o := e.operator("alice")
	if o.FailedLogins != 3 || !o.LockedUntil.Equal(e.clock.Now().Add(time.Minute)) {
		t.Fatalf("after 3 failures: %+v", o)
	}
	err = e.svc.VerifySecondFactor(e.ctx, p, e.next(secret))
	wantErr(t, err, lapse.EFORBIDDEN, "locked until")
	_, _, err = e.svc.Login(e.ctx, "alice", password, e.code(secret), "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "locked until")
	if n := e.operator("alice").FailedLogins; n != 3 {
		t.Fatalf("FailedLogins %d while locked out, want 3", n)
	}
	e.clock.Advance(time.Minute)
	if err := e.svc.VerifySecondFactor(e.ctx, p, e.next(secret)); err != nil {
		t.Fatalf("after the lockout: %v", err)
	}
	wantErr(t, e.svc.VerifySecondFactor(e.ctx, p, " "), lapse.EINVALID, "code")
}

func TestSecondFactorEndedSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, secret := e.addOperator("alice", access.RoleOperator)
	token, p := e.login("alice", secret)
	if err := e.svc.Logout(e.ctx, token, ""); err != nil {
		t.Fatal(err)
	}
	code := e.next(secret)
	wantErr(t, e.svc.VerifySecondFactor(e.ctx, p, code), lapse.EUNAUTHORIZED, "")
	if o := e.operator("alice"); o.LastTOTPStep == e.clock.Now().Unix()/30 || o.FailedLogins != 0 {
		t.Fatalf("an ended session's code was taken or counted: %+v", o)
	}
	if row := e.lastAudit("second_factor"); !strings.Contains(row.Result, "session ended") {
		t.Fatalf("audit row: %+v", row)
	}
}
