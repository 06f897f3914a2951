package access_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alexedwards/argon2id"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

func TestAddOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	o, enr, err := e.svc.AddOperator(e.ctx, e.root, "alice", access.RoleOperator, "")
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "alice" || o.Role != "operator" || o.PasswordHash != "" || o.TOTPSecret != "" || !o.CreatedAt.Equal(start) {
		t.Fatalf("operator: %+v", o)
	}
	if len(enr.Password) < access.MinPasswordLen || enr.Secret == "" ||
		!strings.HasPrefix(enr.URI, "otpauth://totp/Lapse:alice?") || !strings.Contains(enr.URI, "secret="+enr.Secret) || enr.QR == "" {
		t.Fatalf("enrolment: %+v", enr)
	}
	stored := e.operator("alice")
	if !strings.HasPrefix(stored.PasswordHash, "$argon2id$") || stored.TOTPSecret != enr.Secret {
		t.Fatalf("stored: %+v", stored)
	}
	if _, _, err := e.svc.Login(e.ctx, "alice", enr.Password, e.next(enr.Secret), ""); err != nil {
		t.Fatalf("login with the generated password: %v", err)
	}
	row := e.lastAudit("operator.add")
	if row.Target != "operator:"+itoa(o.ID) || string(row.Params) != `{"name":"alice","role":"operator"}` {
		t.Fatalf("audit row: %+v", row)
	}
	e.noSecret(enr.Password, enr.Secret, stored.PasswordHash)

	_, _, err = e.svc.AddOperator(e.ctx, e.root, "alice", access.RoleViewer, "")
	wantErr(t, err, lapse.ECONFLICT, "alice")
	_, _, err = e.svc.AddOperator(e.ctx, e.root, "bob", "root", "")
	wantErr(t, err, lapse.EINVALID, "role")
	_, _, err = e.svc.AddOperator(e.ctx, e.root, "bob", access.RoleViewer, "short pass")
	wantErr(t, err, lapse.EINVALID, "password")
	_, _, err = e.svc.AddOperator(e.ctx, e.root, "", access.RoleViewer, "")
	wantErr(t, err, lapse.EINVALID, "name")
	key := &access.Principal{Kind: access.KindKey, Scopes: []string{access.ScopeOperationsWrite}}
	_, _, err = e.svc.AddOperator(e.ctx, key, "bob", access.RoleViewer, "")
	wantErr(t, err, lapse.EFORBIDDEN, "")

	ops, err := e.svc.Operators(e.ctx)
	if err != nil || len(ops) != 1 || ops[0].PasswordHash != "" || ops[0].TOTPSecret != "" {
		t.Fatalf("Operators: %+v, %v", ops, err)
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	o, secret := e.addOperator("alice", access.RoleOperator)
	token, p, err := e.svc.Login(e.ctx, "alice", password, e.next(secret), "192.0.2.9")
	if err != nil {
		t.Fatal(err)
	}
	if len(token) != 43 || p.Kind != "operator" || p.ID != itoa(o.ID) || p.OperatorID != o.ID || p.Name != "alice" ||
		p.Role != "operator" || p.Can(access.ScopeAdmin) || !p.Can(access.ScopeRefundsWrite) || p.ClientAddr != "192.0.2.9" {
		t.Fatalf("principal: %+v", p)
	}
	now := e.clock.Now()
	// It ends when idle for 30 minutes (its uses move that, up to 12h after
	// the login: TestSessionIdle).
	if p.Session == nil || !p.Session.ExpiresAt.Equal(now.Add(30*time.Minute)) || !p.Session.CreatedAt.Equal(now) || !p.Session.SecondFactorAt.IsZero() {
		t.Fatalf("session: %+v", p.Session)
	}
	if e.svc.SecondFactorFresh(p) {
		t.Fatal("a login counts as a second factor")
	}
	row := e.lastAudit("login")
	if row.Result != "ok" || row.ActorName != "alice" || row.ActorID != itoa(o.ID) || row.ClientAddr != "192.0.2.9" || row.SecondFactor != "" {
		t.Fatalf("audit row: %+v", row)
	}
	e.noSecret(token, password, secret)
	if st := e.operator("alice"); st.LastTOTPStep != now.Unix()/30 {
		t.Fatalf("LastTOTPStep %d, want %d", st.LastTOTPStep, now.Unix()/30)
	}
}

func TestLoginRefusesTheSameWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LockoutAfter: 100})
	_, secret := e.addOperator("alice", access.RoleOperator)
	e.clock.Advance(30 * time.Second)
	good := e.code(secret)
	wrongCode := "000000"
	if good == wrongCode {
		wrongCode = "111111"
	}
	cases := []struct{ name, password, code, reason string }{
		{"alice", "wrong password!", good, "wrong password"},
		{"alice", "", good, "wrong password"},
		{"alice", password, "", "no code"},
		{"alice", password, wrongCode, "wrong code"},
		{"alice", password, "12345", "malformed code"},
		{"mallory", password, good, "unknown operator"},
		{"", password, good, "unknown operator"},
	}
	for _, c := range cases {
		_, _, err := e.svc.Login(e.ctx, c.name, c.password, c.code, "")
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
		if lapse.ErrorMessage(err) != "name, password or code is wrong" {
			t.Errorf("%+v: %q", c, lapse.ErrorMessage(err))
		}
		if row := e.lastAudit("login"); row.Result != c.reason || row.ActorName != c.name {
			t.Errorf("%+v: audit row %+v", c, row)
		}
	}
	if n := e.operator("alice").FailedLogins; n != 5 {
		t.Fatalf("FailedLogins %d, want 5", n)
	}
	// The code was never accepted, so it still works, and resets the count.
	if _, _, err := e.svc.Login(e.ctx, "alice", password, good, ""); err != nil {
		t.Fatal(err)
	}
	if n := e.operator("alice").FailedLogins; n != 0 {
		t.Fatalf("FailedLogins %d after a good login, want 0", n)
	}
	e.noSecret(password, good, "wrong password!")
}

func TestLoginCodeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, secret := e.addOperator("alice", access.RoleOperator)
	code := e.next(secret)
	if _, _, err := e.svc.Login(e.ctx, "alice", password, code, ""); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.svc.Login(e.ctx, "alice", password, code, "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
	if row := e.lastAudit("login"); row.Result != "code already used" {
		t.Fatalf("audit row: %+v", row)
	}
	// Skew: the previous step's code is good when it is newer than the
	// last accepted; the step before is not.
	e.clock.Advance(90 * time.Second)
	prev, err := totpAt(secret, e.clock.Now().Add(-30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.Login(e.ctx, "alice", password, prev, ""); err != nil {
		t.Fatalf("a code one step old: %v", err)
	}
	e.clock.Advance(90 * time.Second)
	old, _ := totpAt(secret, e.clock.Now().Add(-60*time.Second))
	_, _, err = e.svc.Login(e.ctx, "alice", password, old, "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	next, _ := totpAt(secret, e.clock.Now().Add(30*time.Second))
	if _, _, err := e.svc.Login(e.ctx, "alice", password, next, ""); err != nil {
		t.Fatalf("a code one step ahead: %v", err)
	}
	// Having taken the step ahead, the current step's code is older.
	_, _, err = e.svc.Login(e.ctx, "alice", password, e.code(secret), "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
}

func TestLoginLockout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LockoutAfter: 3, LockoutBase: time.Minute, LockoutMax: 4 * time.Minute})
	_, secret := e.addOperator("alice", access.RoleOperator)
	wrong := func() {
		t.Helper()
		_, _, err := e.svc.Login(e.ctx, "alice", "not the password", e.next(secret), "")
		wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
	}
	locked := func(until time.Time) {
		t.Helper()
		o := e.operator("alice")
		if !o.LockedUntil.Equal(until) {
			t.Fatalf("LockedUntil %v, want %v", o.LockedUntil, until)
		}
		before := o.FailedLogins
		_, _, err := e.svc.Login(e.ctx, "alice", password, e.code(secret), "")
		wantErr(t, err, lapse.EUNAUTHORIZED, "locked until "+until.Format(time.RFC3339))
		if n := e.operator("alice").FailedLogins; n != before {
			t.Fatalf("a login while locked out counted: %d, want %d", n, before)
		}
		if row := e.lastAudit("login"); !strings.Contains(row.Result, "locked until") {
			t.Fatalf("audit row: %+v", row)
		}
	}
	wrong()
	wrong()
	if o := e.operator("alice"); o.FailedLogins != 2 || !o.LockedUntil.IsZero() {
		t.Fatalf("after 2: %+v", o)
	}
	wrong()
	locked(e.clock.Now().Add(time.Minute))
	e.clock.Advance(time.Minute - 30*time.Second) // next() adds the other 30s
	wrong()
	locked(e.clock.Now().Add(2 * time.Minute))
	e.clock.Advance(2*time.Minute - 30*time.Second)
	wrong()
	locked(e.clock.Now().Add(4 * time.Minute))
	e.clock.Advance(4*time.Minute - 30*time.Second)
	wrong()
	locked(e.clock.Now().Add(4 * time.Minute)) // at the most
	if n := e.operator("alice").FailedLogins; n != 6 {
		t.Fatalf("FailedLogins %d, want 6", n)
	}
	e.clock.Advance(4 * time.Minute)
	e.login("alice", secret)
	if o := e.operator("alice"); o.FailedLogins != 0 || !o.LockedUntil.IsZero() {
		t.Fatalf("a good login did not reset: %+v", o)
	}
	wrong() // counting starts over
	if o := e.operator("alice"); o.FailedLogins != 1 || !o.LockedUntil.IsZero() {
		t.Fatalf("after reset: %+v", o)
	}
}

// TestLoginConcurrentGuesses checks that guesses racing each other get no
// more answers than the count allows: each is counted, or refused as
// locked out, and the count stops at LockoutAfter.
func TestLoginConcurrentGuesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LockoutAfter: 3})
	_, secret := e.addOperator("alice", access.RoleOperator)
	code := e.next(secret)
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		// Each from an address of its own, which the limit per address
		// (TestLoginLimitPerAddress) would otherwise stop first.
		wg.Go(func() {
			_, _, errs[i] = e.svc.Login(e.ctx, "alice", "guess number "+itoa(int64(i)), code, "192.0.2."+itoa(int64(i)))
		})
	}
	wg.Wait()
	lockedOut := 0
	for _, err := range errs {
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
		if strings.Contains(err.Error(), "locked until") {
			lockedOut++
		}
	}
	if o := e.operator("alice"); o.FailedLogins != 3 || o.LockedUntil.IsZero() {
		t.Fatalf("after concurrent guesses: FailedLogins %d, LockedUntil %v", o.FailedLogins, o.LockedUntil)
	}
	if lockedOut != len(errs)-3 {
		t.Fatalf("%d refused as locked out, want %d", lockedOut, len(errs)-3)
	}
	rows := e.audit("login")
	if len(rows) != len(errs) {
		t.Fatalf("%d login rows, want %d", len(rows), len(errs))
	}
	if n := len(slices.DeleteFunc(rows, func(r *lapse.AuditEntry) bool { return r.Result != "wrong password" })); n != 3 {
		t.Fatalf("%d rows say wrong password, want 3", n)
	}
}

func TestLoginDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, secret := e.addOperator("alice", access.RoleOperator)
	token, _ := e.login("alice", secret)
	key := &access.Principal{Kind: access.KindKey, Scopes: []string{access.ScopeOrdersWrite}}
	_, _, err := e.svc.DisableOperator(e.ctx, key, "alice")
	wantErr(t, err, lapse.EFORBIDDEN, "")
	o, changed, err := e.svc.DisableOperator(e.ctx, e.root, "alice")
	if err != nil || !changed || o.DisabledAt.IsZero() || o.PasswordHash != "" {
		t.Fatalf("DisableOperator: %+v, changed %v, %v", o, changed, err)
	}
	_, err = e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	_, _, err = e.svc.Login(e.ctx, "alice", password, e.next(secret), "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
	if row := e.lastAudit("login"); row.Result != "operator disabled" {
		t.Fatalf("audit row: %+v", row)
	}
	if again, changed, err := e.svc.DisableOperator(e.ctx, e.root, "alice"); err != nil || changed || !again.DisabledAt.Equal(o.DisabledAt) {
		t.Fatalf("DisableOperator again: %+v, changed %v, %v; want it as it was, nothing changed", again, changed, err)
	}
	if n := len(e.audit("operator.disable")); n != 1 {
		t.Fatalf("%d disable rows, want 1", n)
	}
	_, _, err = e.svc.DisableOperator(e.ctx, e.root, "nobody")
	wantErr(t, err, lapse.ENOTFOUND, "")
}

// TestLoginDefaultHash runs a login with argon2id's default cost, as a
// Service configured with no HashParams has.
func TestLoginDefaultHash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	svc := e.service(e.db, access.Config{HashParams: argon2id.DefaultParams})
	_, enr, err := svc.AddOperator(e.ctx, e.root, "alice", access.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	if h := e.operator("alice").PasswordHash; !strings.HasPrefix(h, "$argon2id$v=19$m=65536,t=1,") {
		t.Fatalf("hash %q", h)
	}
	if _, _, err := svc.Login(e.ctx, " alice ", enr.Password, e.next(enr.Secret), ""); err != nil {
		t.Fatal(err)
	}
	_, _, err = svc.Login(e.ctx, "bob", enr.Password, e.next(enr.Secret), "")
	wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
}
