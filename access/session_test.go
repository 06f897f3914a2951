package access_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

func TestSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{SessionTTL: time.Hour})
	o, secret := e.addOperator("alice", access.RoleViewer)
	token, _ := e.login("alice", secret)
	p, err := e.svc.Session(e.ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "operator" || p.OperatorID != o.ID || p.Role != "viewer" || !p.Can(access.ScopeOrdersRead) || p.Can(access.ScopeOrdersWrite) || p.Session == nil {
		t.Fatalf("principal: %+v", p)
	}
	e.clock.Advance(time.Hour - time.Microsecond)
	if _, err := e.svc.Session(e.ctx, token); err != nil {
		t.Fatalf("just before it expires: %v", err)
	}
	e.clock.Advance(time.Microsecond)
	_, err = e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "the session is not valid or has ended")
	for _, bad := range []string{"", "nonsense", newTokenLike()} {
		_, err := e.svc.Session(e.ctx, bad)
		wantErr(t, err, lapse.EUNAUTHORIZED, "the session is not valid or has ended")
		_, err = e.svc.SessionHolder(e.ctx, bad)
		wantErr(t, err, lapse.EUNAUTHORIZED, "the session is not valid or has ended")
	}
	// The ended session still tells whose it was, for the audit row of
	// a request refused for it; it lets no one act.
	if p, err := e.svc.SessionHolder(e.ctx, token); err != nil || p.OperatorID != o.ID || p.Name != "alice" {
		t.Fatalf("the holder of the ended session: %+v, %v", p, err)
	}
}

func TestLogout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	o, secret := e.addOperator("alice", access.RoleViewer)
	token, _ := e.login("alice", secret)
	other, _ := e.login("alice", secret)
	if err := e.svc.Logout(e.ctx, token, "192.0.2.7"); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	if _, err := e.svc.Session(e.ctx, other); err != nil {
		t.Fatalf("the other session ended too: %v", err)
	}
	row := e.lastAudit("logout")
	if row.ActorName != "alice" || row.ActorID != itoa(o.ID) || row.Result != "ok" || row.ClientAddr != "192.0.2.7" {
		t.Fatalf("audit row: %+v", row)
	}
	if err := e.svc.Logout(e.ctx, token, ""); err != nil {
		t.Fatalf("logout twice: %v", err)
	}
	if err := e.svc.Logout(e.ctx, "nonsense", ""); err != nil {
		t.Fatalf("logout of nonsense: %v", err)
	}
	if n := len(e.audit("logout")); n != 1 {
		t.Fatalf("%d logout rows, want 1", n)
	}
	// The session logged out still tells whose it was, for the audit row
	// of a request refused for it; it lets no one act.
	if p, err := e.svc.SessionHolder(e.ctx, token); err != nil || p.OperatorID != o.ID || p.Name != "alice" {
		t.Fatalf("the holder of the session logged out: %+v, %v", p, err)
	}
	e.clock.Advance(time.Microsecond)
	_, err = e.svc.Session(e.ctx, token)
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	e.noSecret(token, other)
}

// newTokenLike is a well-formed token that no login made.
func newTokenLike() string { return "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" }
