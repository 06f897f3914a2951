package access_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

func TestSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{SessionTTL: time.Hour, SessionIdle: time.Hour}) // no shorter idle limit
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

// TestSessionIdle: a session ends SessionIdle after its last use, and a use
// moves that end, never past SessionTTL from the login; the end is written
// once a minute at most. A browser left signed in lasted the whole
// SessionTTL (12h by default), whether anyone used it or not.
func TestSessionIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{SessionTTL: 2 * time.Hour, SessionIdle: 10 * time.Minute})
	_, secret := e.addOperator("alice", access.RoleViewer)
	use := func(token string) error {
		t.Helper()
		_, err := e.svc.Session(e.ctx, token)
		return err
	}
	stored := func(p *access.Principal) time.Time {
		t.Helper()
		ss, err := e.db.SessionGet(e.ctx, p.Session.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ss.ExpiresAt
	}

	token, p := e.login("alice", secret)
	if !p.Session.ExpiresAt.Equal(e.clock.Now().Add(10 * time.Minute)) {
		t.Fatalf("a new session ends at %v, want 10m after its login at %v", p.Session.ExpiresAt, e.clock.Now())
	}
	e.clock.Advance(10*time.Minute - time.Microsecond)
	if err := use(token); err != nil {
		t.Fatalf("used just before it idles out: %v", err)
	}
	if got, want := stored(p), e.clock.Now().Add(10*time.Minute); !got.Equal(want) {
		t.Fatalf("after a use the session ends at %v, want %v", got, want)
	}
	// Within the minute, a use writes nothing.
	end := stored(p)
	e.clock.Advance(30 * time.Second)
	if err := use(token); err != nil || !stored(p).Equal(end) {
		t.Fatalf("a use within the minute: %v, end %v, want %v unwritten", err, stored(p), end)
	}
	e.clock.Advance(10 * time.Minute)
	if err := use(token); lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		t.Fatalf("a session idle past 10m: %v", err)
	}

	// In use every 9 minutes, it still ends 2h after its login.
	token, p = e.login("alice", secret)
	last := p.Session.CreatedAt.Add(2 * time.Hour)
	for e.clock.Now().Add(9 * time.Minute).Before(last) {
		e.clock.Advance(9 * time.Minute)
		if err := use(token); err != nil {
			t.Fatalf("a session in use %v after its login: %v", e.clock.Now().Sub(p.Session.CreatedAt), err)
		}
	}
	if got := stored(p); !got.Equal(last) {
		t.Fatalf("a session in use ends at %v, want %v, 2h after its login", got, last)
	}
	e.clock.Set(last)
	if err := use(token); lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		t.Fatalf("a session in use 2h after its login: %v", err)
	}

	// A session made when sessions lasted longer idles out as the others.
	long := e.service(e.db, access.Config{SessionTTL: 2 * time.Hour, SessionIdle: 2 * time.Hour})
	token, p, err := long.Login(e.ctx, "alice", password, e.next(secret), "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := use(token); err != nil {
		t.Fatal(err)
	}
	if got, want := stored(p), e.clock.Now().Add(10*time.Minute); !got.Equal(want) {
		t.Fatalf("a session made to last 2h ends at %v after a use, want %v", got, want)
	}
	e.clock.Advance(10 * time.Minute)
	if err := use(token); lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		t.Fatalf("a session made to last 2h, idle 10m: %v", err)
	}
}

// newTokenLike is a well-formed token that no login made.
func newTokenLike() string { return "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" }
