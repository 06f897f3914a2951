package access_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// hookStore is a PostgreSQL store that calls its hooks when a transaction
// whose context carries hookKey reads a session, locks an operator or
// decides an approval request:
// a test's way to run one transaction at a given point of another,
// without sleeping.
type hookStore struct {
	*postgres.Store
	sessionRead  func(ctx context.Context) // after a session is read
	operatorLock func(ctx context.Context) // before an operator is locked
	decide       func(ctx context.Context) // before an approval request is decided
}

type hookKey struct{}

func (h *hookStore) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return h.Store.Tx(ctx, func(tx lapse.Store) error {
		return fn(&hookStore{Store: tx.(*postgres.Store), sessionRead: h.sessionRead, operatorLock: h.operatorLock, decide: h.decide})
	})
}

func (h *hookStore) SessionGet(ctx context.Context, id []byte) (*lapse.Session, error) {
	s, err := h.Store.SessionGet(ctx, id)
	if ctx.Value(hookKey{}) != nil && h.sessionRead != nil {
		h.sessionRead(ctx)
	}
	return s, err
}

func (h *hookStore) ApprovalDecide(ctx context.Context, p *lapse.ApprovalDecideParams) (*lapse.Approval, error) {
	if ctx.Value(hookKey{}) != nil && h.decide != nil {
		h.decide(ctx)
	}
	return h.Store.ApprovalDecide(ctx, p)
}

func (h *hookStore) OperatorLock(ctx context.Context, name string) (*lapse.Operator, error) {
	if ctx.Value(hookKey{}) != nil && h.operatorLock != nil {
		h.operatorLock(ctx)
	}
	return h.Store.OperatorLock(ctx, name)
}

// TestLogoutDuringSecondFactor: an operator logs out while a second factor
// given in the same session (another tab, or whoever holds its cookie and
// a code) is being recorded. The second factor read the session before the
// logout ended it and writes it back; the session must stay ended. On
// PostgreSQL, whose transactions read what others committed, the second
// factor's write put back the expiry the logout had taken away: the session
// lived on after its logout, until it expired hours later.
func TestLogoutDuringSecondFactor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := postgres.Open(ctx, testenv.PostgresSchema(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	hs := &hookStore{Store: pg}
	e := &env{t: t, ctx: ctx, clock: lapse.NewManualClock(start), root: access.CLI("root")}
	e.svc = e.service(hs, access.Config{})
	_, enr, err := e.svc.AddOperator(ctx, e.root, "alice", access.RoleOperator, password)
	if err != nil {
		t.Fatal(err)
	}
	token, p := e.login("alice", enr.Secret)
	code := e.next(enr.Secret)

	// The logout runs while the second factor's transaction holds the
	// session it read, and the second factor goes on once the logout has
	// ended (without a fix) or waits for the operator's lock (with one).
	logoutCtx := context.WithValue(ctx, hookKey{}, "logout")
	logoutLocks := make(chan struct{}, 1)
	logoutDone := make(chan error, 1)
	started := false
	hs.operatorLock = func(ctx context.Context) {
		if ctx.Value(hookKey{}) == "logout" {
			logoutLocks <- struct{}{}
		}
	}
	hs.sessionRead = func(ctx context.Context) {
		if ctx.Value(hookKey{}) != "second factor" || started {
			return
		}
		started = true
		go func() { logoutDone <- e.svc.Logout(logoutCtx, token, "192.0.2.9") }()
		select {
		case <-logoutLocks:
		case err := <-logoutDone:
			logoutDone <- err
		}
	}
	if err := e.svc.VerifySecondFactor(context.WithValue(ctx, hookKey{}, "second factor"), p, code); err != nil {
		t.Fatalf("the second factor: %v", err)
	}
	if !started {
		t.Fatal("the second factor read no session")
	}
	if err := <-logoutDone; err != nil {
		t.Fatalf("the logout: %v", err)
	}
	if _, err := e.svc.Session(ctx, token); lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		t.Fatalf("the session logged out during a second factor is still in force: %v", err)
	}
	rows, err := pg.AuditList(ctx, &lapse.AuditListParams{Action: "logout"})
	if err != nil || len(rows) != 1 || rows[0].Result != "ok" || rows[0].ActorName != "alice" {
		t.Fatalf("logout rows: %v, %v", rows, err)
	}
}

// TestLogoutDuringSessionUse: a request through a session, which moves its
// idle end, read the session before a logout ended it; the move must not
// put back the end the logout took away, and the request is refused.
func TestLogoutDuringSessionUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := postgres.Open(ctx, testenv.PostgresSchema(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	hs := &hookStore{Store: pg}
	e := &env{t: t, ctx: ctx, clock: lapse.NewManualClock(start), root: access.CLI("root")}
	e.svc = e.service(hs, access.Config{})
	_, enr, err := e.svc.AddOperator(ctx, e.root, "alice", access.RoleOperator, password)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := e.login("alice", enr.Secret)
	e.clock.Advance(10 * time.Minute) // far enough that a use moves the end
	loggedOut := false
	hs.sessionRead = func(ctx context.Context) {
		if loggedOut {
			return
		}
		loggedOut = true
		if err := e.svc.Logout(context.Background(), token, "192.0.2.9"); err != nil {
			t.Errorf("the logout: %v", err)
		}
	}
	if _, err := e.svc.Session(context.WithValue(ctx, hookKey{}, "use"), token); lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		t.Fatalf("a use of a session logged out meanwhile: %v", err)
	}
	hs.sessionRead = nil
	if _, err := e.svc.Session(ctx, token); lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
		t.Fatalf("the session logged out during a use is in force again: %v", err)
	}
}
