package access_test

import (
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestLogoutEverywhere: an operator ends every session of theirs at once,
// the one they act through too, and no other operator's; one audit row
// says so; a principal whose session ended since can end nothing more.
func TestLogoutEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	o, secret := e.addOperator("alice", access.RoleOperator)
	_, bobSecret := e.addOperator("bob", access.RoleOperator)
	here, p := e.login("alice", secret)
	there, _ := e.login("alice", secret)
	bob, _ := e.login("bob", bobSecret)

	err := e.svc.LogoutEverywhere(e.ctx, &access.Principal{Kind: access.KindKey, Scopes: []string{access.ScopeAdmin}}, "192.0.2.7")
	wantErr(t, err, lapse.EINVALID, "only an operator has sessions")
	if err := e.svc.LogoutEverywhere(e.ctx, p, "192.0.2.7"); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{here, there} {
		_, err := e.svc.Session(e.ctx, token)
		wantErr(t, err, lapse.EUNAUTHORIZED, "the session is not valid or has ended")
	}
	if _, err := e.svc.Session(e.ctx, bob); err != nil {
		t.Fatalf("another operator's session ended: %v", err)
	}
	row := e.lastAudit("logout.all")
	if row.ActorName != "alice" || row.ActorID != itoa(o.ID) || row.Target != "operator:"+itoa(o.ID) || row.Result != "ok" || row.ClientAddr != "192.0.2.7" {
		t.Fatalf("audit row: %+v", row)
	}
	// The principal of a session ended is refused, and writes nothing.
	err = e.svc.LogoutEverywhere(e.ctx, p, "192.0.2.7")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	if n := len(e.audit("logout.all")); n != 1 {
		t.Fatalf("%d logout.all rows, want 1", n)
	}
	// They may log in again.
	if token, _ := e.login("alice", secret); token == "" {
		t.Fatal("no token")
	}
}

// TestEndOperatorSessions: an admin logs another operator out everywhere;
// anyone else is refused and ends nothing; the operator may log in again.
func TestEndOperatorSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	o, secret := e.addOperator("alice", access.RoleOperator)
	_, bobSecret := e.addOperator("bob", access.RoleOperator)
	here, _ := e.login("alice", secret)
	there, _ := e.login("alice", secret)
	bobToken, bob := e.login("bob", bobSecret)

	for _, by := range []*access.Principal{bob, {Kind: access.KindKey, Scopes: []string{access.ScopeOperationsWrite}}, nil} {
		_, err := e.svc.EndOperatorSessions(e.ctx, by, "alice")
		wantErr(t, err, lapse.EFORBIDDEN, "needs the admin scope")
	}
	_, err := e.svc.EndOperatorSessions(e.ctx, e.root, "nobody")
	wantErr(t, err, lapse.ENOTFOUND, `no operator is named "nobody"`)
	for _, token := range []string{here, there} {
		if _, err := e.svc.Session(e.ctx, token); err != nil {
			t.Fatalf("a refusal ended a session: %v", err)
		}
	}
	if n := len(e.audit("operator.logout")); n != 0 {
		t.Fatalf("%d rows after refusals", n)
	}

	got, err := e.svc.EndOperatorSessions(e.ctx, e.root, " alice ")
	if err != nil || got.Name != "alice" || got.PasswordHash != "" || got.TOTPSecret != "" || !got.DisabledAt.IsZero() {
		t.Fatalf("EndOperatorSessions = %+v, %v", got, err)
	}
	for _, token := range []string{here, there} {
		_, err := e.svc.Session(e.ctx, token)
		wantErr(t, err, lapse.EUNAUTHORIZED, "")
	}
	if _, err := e.svc.Session(e.ctx, bobToken); err != nil {
		t.Fatalf("bob's session ended: %v", err)
	}
	row := e.lastAudit("operator.logout")
	if row.ActorKind != access.KindCLI || row.Target != "operator:"+itoa(o.ID) || row.Result != "ok" || string(row.Params) != `{"name":"alice"}` {
		t.Fatalf("audit row: %+v %s", row, row.Params)
	}
	e.login("alice", secret)
}
