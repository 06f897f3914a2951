package access_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// params decodes an audit row's details.
func params(t *testing.T, row *lapse.AuditEntry) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(row.Params, &m); err != nil {
		t.Fatalf("audit row %d (%s): params %q: %v", row.ID, row.Action, row.Params, err)
	}
	return m
}

// lockOut fails name's logins with a wrong password until they are locked
// out (LockoutAfter of the env's config, n).
func (e *env) lockOut(name, secret string, n int) {
	e.t.Helper()
	for range n {
		_, _, err := e.svc.Login(e.ctx, name, "not the password", e.code(secret), "192.0.2.7")
		wantErr(e.t, err, lapse.EUNAUTHORIZED, "")
	}
	if o := e.operator(name); o.FailedLogins != n || !e.clock.Now().Before(o.LockedUntil) {
		e.t.Fatalf("after %d failed logins: FailedLogins %d, LockedUntil %v", n, o.FailedLogins, o.LockedUntil)
	}
}

// same fails unless name's stored record is still before: a refusal
// changed nothing.
func (e *env) same(name string, before *lapse.Operator) {
	e.t.Helper()
	if after := e.operator(name); fmt.Sprint(*after) != fmt.Sprint(*before) {
		e.t.Fatalf("a refusal changed %s:\n%+v\nwas\n%+v", name, *after, *before)
	}
}

// TestEnableOperator: enable lets a disabled operator, and one locked out,
// log in again at once, with one audit row; an operator with nothing to
// clear is returned unchanged without a row; a principal without admin
// and an unknown name change nothing.
func TestEnableOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LockoutAfter: 3})
	o, secret := e.addOperator("alice", access.RoleOperator)
	token, _ := e.login("alice", secret)
	e.lockOut("alice", secret, 3)
	if _, _, err := e.svc.DisableOperator(e.ctx, e.root, "alice"); err != nil {
		t.Fatal(err)
	}
	before := e.operator("alice")

	key := &access.Principal{Kind: access.KindKey, Scopes: []string{access.ScopeOperationsWrite}}
	_, _, err := e.svc.EnableOperator(e.ctx, key, "alice")
	wantErr(t, err, lapse.EFORBIDDEN, "")
	_, _, err = e.svc.EnableOperator(e.ctx, e.root, "nobody")
	wantErr(t, err, lapse.ENOTFOUND, `no operator is named "nobody"`)
	e.same("alice", before)
	if n := len(e.audit("operator.enable")); n != 0 {
		t.Fatalf("%d enable rows after refusals, want 0", n)
	}

	e.clock.Advance(time.Second)
	got, changed, err := e.svc.EnableOperator(e.ctx, e.root, "alice")
	if err != nil || !changed || got.Name != "alice" || !got.DisabledAt.IsZero() || got.FailedLogins != 0 ||
		!got.LockedUntil.IsZero() || got.PasswordHash != "" || got.TOTPSecret != "" {
		t.Fatalf("EnableOperator = %+v, %v, %v", got, changed, err)
	}
	if st := e.operator("alice"); !st.DisabledAt.IsZero() || st.FailedLogins != 0 || !st.LockedUntil.IsZero() ||
		st.PasswordHash != before.PasswordHash || st.TOTPSecret != before.TOTPSecret || st.Role != access.RoleOperator {
		t.Fatalf("stored after enable: %+v", st)
	}
	row := e.lastAudit("operator.enable")
	if p := params(t, row); row.Target != "operator:"+itoa(o.ID) || row.Result != "ok" || row.ActorKind != access.KindCLI ||
		p["name"] != "alice" || p["was_disabled"] != true || p["failed_logins"] != 3.0 || p["locked_until"] == nil {
		t.Fatalf("audit row: %+v %s", row, row.Params)
	}
	// The session the disable ended stays ended; a login works at once,
	// within what was the lockout.
	_, err = e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	if !e.clock.Now().Before(before.LockedUntil) {
		t.Fatal("the test took the clock past the lockout")
	}
	e.login("alice", secret)

	// Nothing to clear: returned as it is, said so, no row.
	got, changed, err = e.svc.EnableOperator(e.ctx, e.root, "alice")
	if err != nil || changed || got.Name != "alice" || !got.DisabledAt.IsZero() {
		t.Fatalf("EnableOperator of an enabled operator = %+v, %v, %v", got, changed, err)
	}
	if n := len(e.audit("operator.enable")); n != 1 {
		t.Fatalf("%d enable rows, want 1: enabling an enabled operator wrote one", n)
	}

	// Locked out, not disabled: the lockout alone is cleared.
	e.lockOut("alice", secret, 3)
	if _, changed, err := e.svc.EnableOperator(e.ctx, e.root, "alice"); err != nil || !changed {
		t.Fatalf("EnableOperator of a locked-out operator: %v, %v", changed, err)
	}
	if p := params(t, e.lastAudit("operator.enable")); p["was_disabled"] != false || p["failed_logins"] != 3.0 {
		t.Fatalf("audit row of the unlock: %v", p)
	}
	e.login("alice", secret)
	e.noSecret(password, secret, before.PasswordHash)
}

// TestSetOperatorRole: a new role is written and ends the operator's
// sessions, with one audit row naming both roles; the same role again
// changes nothing and ends nothing; an unknown role, a principal without
// admin and an unknown name change nothing.
func TestSetOperatorRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	o, secret := e.addOperator("alice", access.RoleViewer)
	token, p := e.login("alice", secret)
	if p.Can(access.ScopeRefundsWrite) {
		t.Fatalf("a viewer can refund: %+v", p)
	}
	before := e.operator("alice")

	key := &access.Principal{Kind: access.KindKey, Scopes: []string{access.ScopeOperationsWrite}}
	_, _, err := e.svc.SetOperatorRole(e.ctx, key, "alice", access.RoleAdmin)
	wantErr(t, err, lapse.EFORBIDDEN, "")
	for _, role := range []string{"root", "", "Admin"} {
		_, _, err = e.svc.SetOperatorRole(e.ctx, e.root, "alice", role)
		wantErr(t, err, lapse.EINVALID, "role")
	}
	_, _, err = e.svc.SetOperatorRole(e.ctx, e.root, "nobody", access.RoleAdmin)
	wantErr(t, err, lapse.ENOTFOUND, `no operator is named "nobody"`)
	e.same("alice", before)
	if _, err := e.svc.Session(e.ctx, token); err != nil {
		t.Fatalf("a refused role change ended the session: %v", err)
	}
	if n := len(e.audit("operator.role")); n != 0 {
		t.Fatalf("%d role rows after refusals, want 0", n)
	}

	got, changed, err := e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleOperator)
	if err != nil || !changed || got.Role != access.RoleOperator || got.PasswordHash != "" || got.TOTPSecret != "" {
		t.Fatalf("SetOperatorRole = %+v, %v, %v", got, changed, err)
	}
	if st := e.operator("alice"); st.Role != access.RoleOperator || st.PasswordHash != before.PasswordHash || !st.DisabledAt.IsZero() {
		t.Fatalf("stored after the role change: %+v", st)
	}
	_, err = e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	row := e.lastAudit("operator.role")
	if row.Target != "operator:"+itoa(o.ID) || row.Result != "ok" || string(row.Params) != `{"from":"viewer","name":"alice","to":"operator"}` {
		t.Fatalf("audit row: %+v %s", row, row.Params)
	}
	token, p = e.login("alice", secret)
	if !p.Can(access.ScopeRefundsWrite) || p.Can(access.ScopeAdmin) {
		t.Fatalf("a login after the change to operator: %+v", p)
	}

	// The same role again: nothing changes, the session goes on.
	got, changed, err = e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleOperator)
	if err != nil || changed || got.Role != access.RoleOperator {
		t.Fatalf("SetOperatorRole to the same role = %+v, %v, %v", got, changed, err)
	}
	if _, err := e.svc.Session(e.ctx, token); err != nil {
		t.Fatalf("the same role again ended the session: %v", err)
	}
	if n := len(e.audit("operator.role")); n != 1 {
		t.Fatalf("%d role rows, want 1", n)
	}

	// The last admin is not demoted (TestLastAdminStays); with another,
	// they are.
	if _, _, err := e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleViewer)
	wantErr(t, err, lapse.ECONFLICT, "last enabled admin")
	e.addOperator("bob", access.RoleAdmin)
	if _, changed, err := e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleViewer); err != nil || !changed {
		t.Fatalf("demoting an admin while another remains: %v, %v", changed, err)
	}
	// A disabled operator's role changes; they stay disabled.
	if _, _, err := e.svc.DisableOperator(e.ctx, e.root, "alice"); err != nil {
		t.Fatal(err)
	}
	if got, _, err := e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleOperator); err != nil || got.DisabledAt.IsZero() {
		t.Fatalf("role change of a disabled operator = %+v, %v", got, err)
	}
	e.noSecret(password, secret, before.PasswordHash)
}

// TestResetOperator: a reset gives a new password and TOTP secret, clears
// the lockout and the step of the old secret's last code, and ends the
// operator's sessions, with one audit row holding neither; then the
// operator logs in with the new password and a code of the new secret,
// even in the very step of their last code, and with neither old one.
// Bad passwords, a principal without admin and an unknown name change
// nothing.
func TestResetOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{LockoutAfter: 3})
	o, oldSecret := e.addOperator("alice", access.RoleOperator)
	token, _ := e.login("alice", oldSecret)
	e.lockOut("alice", oldSecret, 3)
	before := e.operator("alice")
	if before.LastTOTPStep != e.clock.Now().Unix()/30 {
		t.Fatalf("LastTOTPStep %d: the test wants it at the current step", before.LastTOTPStep)
	}

	key := &access.Principal{Kind: access.KindKey, Scopes: []string{access.ScopeOperationsWrite}}
	_, _, err := e.svc.ResetOperator(e.ctx, key, "alice", "")
	wantErr(t, err, lapse.EFORBIDDEN, "")
	_, _, err = e.svc.ResetOperator(e.ctx, e.root, "alice", "short pass")
	wantErr(t, err, lapse.EINVALID, "at least 12 characters")
	_, _, err = e.svc.ResetOperator(e.ctx, e.root, "alice", strings.Repeat("x", access.MaxPasswordLen+1))
	wantErr(t, err, lapse.EINVALID, "at most 1024 characters")
	_, _, err = e.svc.ResetOperator(e.ctx, e.root, "nobody", "")
	wantErr(t, err, lapse.ENOTFOUND, `no operator is named "nobody"`)
	e.same("alice", before)
	if _, err := e.svc.Session(e.ctx, token); err != nil {
		t.Fatalf("a refused reset ended the session: %v", err)
	}
	if n := len(e.audit("operator.reset")); n != 0 {
		t.Fatalf("%d reset rows after refusals, want 0", n)
	}

	const newPassword = "a brand new passphrase"
	got, enr, err := e.svc.ResetOperator(e.ctx, e.root, "alice", newPassword)
	if err != nil || got.Name != "alice" || got.PasswordHash != "" || got.TOTPSecret != "" {
		t.Fatalf("ResetOperator = %+v, %v", got, err)
	}
	if enr.Password != "" || enr.Secret == "" || enr.Secret == oldSecret || enr.QR == "" ||
		!strings.HasPrefix(enr.URI, "otpauth://totp/Lapse:alice?") || !strings.Contains(enr.URI, "secret="+enr.Secret) {
		t.Fatalf("enrolment: %+v", enr)
	}
	st := e.operator("alice")
	if st.TOTPSecret != enr.Secret || st.PasswordHash == before.PasswordHash || !strings.HasPrefix(st.PasswordHash, "$argon2id$") ||
		st.FailedLogins != 0 || !st.LockedUntil.IsZero() || st.LastTOTPStep != 0 || st.Role != access.RoleOperator || !st.DisabledAt.IsZero() {
		t.Fatalf("stored after the reset: %+v", st)
	}
	_, err = e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	row := e.lastAudit("operator.reset")
	if row.Target != "operator:"+itoa(o.ID) || row.Result != "ok" || string(row.Params) != `{"approvals_cancelled":0,"name":"alice","password_generated":false}` {
		t.Fatalf("audit row: %+v %s", row, row.Params)
	}

	// The new secret's code of the step the old secret's last code took
	// is good: that step was the old secret's.
	if _, _, err := e.svc.Login(e.ctx, "alice", newPassword, e.code(enr.Secret), "192.0.2.1"); err != nil {
		t.Fatalf("a login with the new password and secret: %v", err)
	}
	_, _, err = e.svc.Login(e.ctx, "alice", password, e.next(enr.Secret), "192.0.2.1")
	wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
	if r := e.lastAudit("login"); r.Result != "wrong password" {
		t.Fatalf("the old password: audit row %+v", r)
	}
	_, _, err = e.svc.Login(e.ctx, "alice", newPassword, e.code(oldSecret), "192.0.2.1")
	wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
	if r := e.lastAudit("login"); r.Result != "wrong code" {
		t.Fatalf("the old secret: audit row %+v", r)
	}
	e.noSecret(password, newPassword, oldSecret, enr.Secret, before.PasswordHash, st.PasswordHash)

	// No password given: one is made, shown once, and works; a disabled
	// operator is reset and stays disabled.
	if _, _, err := e.svc.DisableOperator(e.ctx, e.root, "alice"); err != nil {
		t.Fatal(err)
	}
	got, enr, err = e.svc.ResetOperator(e.ctx, e.root, "alice", "")
	if err != nil || len(enr.Password) < access.MinPasswordLen || got.DisabledAt.IsZero() {
		t.Fatalf("ResetOperator of a disabled operator, password made = %+v, %+v, %v", got, enr, err)
	}
	if p := params(t, e.lastAudit("operator.reset")); p["password_generated"] != true {
		t.Fatalf("audit row of a made password: %v", p)
	}
	if _, _, err := e.svc.EnableOperator(e.ctx, e.root, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.Login(e.ctx, "alice", enr.Password, e.next(enr.Secret), "192.0.2.1"); err != nil {
		t.Fatalf("a login with the made password: %v", err)
	}
	e.noSecret(enr.Password, enr.Secret)
}

// TestOperatorNameAsLoginReadsIt: the commands on an operator find them by
// the name with space around it, as a login does, and change them.
func TestOperatorNameAsLoginReadsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	_, secret := e.addOperator("alice", access.RoleOperator)
	const spaced = " alice\t"
	if _, _, err := e.svc.Login(e.ctx, spaced, password, e.next(secret), "192.0.2.1"); err != nil {
		t.Fatalf("login as %q: %v", spaced, err)
	}
	if o, changed, err := e.svc.DisableOperator(e.ctx, e.root, spaced); err != nil || !changed || o.Name != "alice" {
		t.Fatalf("DisableOperator(%q) = %+v, %v, %v", spaced, o, changed, err)
	}
	if o, changed, err := e.svc.EnableOperator(e.ctx, e.root, spaced); err != nil || !changed || o.Name != "alice" {
		t.Fatalf("EnableOperator(%q) = %+v, %v, %v", spaced, o, changed, err)
	}
	if o, changed, err := e.svc.SetOperatorRole(e.ctx, e.root, spaced, access.RoleViewer); err != nil || !changed || o.Role != access.RoleViewer {
		t.Fatalf("SetOperatorRole(%q) = %+v, %v, %v", spaced, o, changed, err)
	}
	if o, enr, err := e.svc.ResetOperator(e.ctx, e.root, spaced, ""); err != nil || o.Name != "alice" || !strings.Contains(enr.URI, "Lapse:alice?") {
		t.Fatalf("ResetOperator(%q) = %+v, %v", spaced, o, err)
	}
	for _, action := range []string{"operator.disable", "operator.enable", "operator.role", "operator.reset"} {
		if p := params(t, e.lastAudit(action)); p["name"] != "alice" {
			t.Fatalf("%s row names %v", action, p["name"])
		}
	}
	_, _, err := e.svc.DisableOperator(e.ctx, e.root, "  ")
	wantErr(t, err, lapse.ENOTFOUND, `no operator is named ""`)
}
