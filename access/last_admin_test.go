package access_test

import (
	"context"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
)

// TestLastAdminStays: disabling the last enabled admin operator, or giving
// them another role, is refused with a clear error and changes nothing (no
// row, their session goes on); with another enabled admin, either is done.
// A disabled admin is not one who remains, and a disabled admin's role
// changes freely.
func TestLastAdminStays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	e.addOperator("alice", access.RoleAdmin)
	_, bobSecret := e.addOperator("bob", access.RoleViewer)
	token, _ := e.login("bob", bobSecret)
	e.addOperator("carol", access.RoleOperator)
	before := e.operator("alice")

	_, _, err := e.svc.DisableOperator(e.ctx, e.root, "alice")
	wantErr(t, err, lapse.ECONFLICT, `operator "alice" is the last enabled admin`)
	for _, role := range []string{access.RoleOperator, access.RoleViewer} {
		_, _, err = e.svc.SetOperatorRole(e.ctx, e.root, "alice", role)
		wantErr(t, err, lapse.ECONFLICT, `operator "alice" is the last enabled admin`)
	}
	e.same("alice", before)
	if n := len(e.audit("operator.disable")) + len(e.audit("operator.role")); n != 0 {
		t.Fatalf("%d rows of refused changes, want 0", n)
	}
	// What does not take the admin away is done as before.
	if _, _, err := e.svc.ResetOperator(e.ctx, e.root, "alice", ""); err != nil {
		t.Fatalf("reset of the last admin: %v", err)
	}
	if _, changed, err := e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleAdmin); err != nil || changed {
		t.Fatalf("the last admin's own role again: %v, %v", changed, err)
	}

	// A second admin: the first may go, and then the second is the last.
	if _, _, err := e.svc.SetOperatorRole(e.ctx, e.root, "bob", access.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := e.svc.DisableOperator(e.ctx, e.root, "alice"); err != nil || !changed {
		t.Fatalf("disabling an admin while another remains: %v, %v", changed, err)
	}
	token, _ = e.login("bob", bobSecret)
	_, _, err = e.svc.SetOperatorRole(e.ctx, e.root, "bob", access.RoleOperator)
	wantErr(t, err, lapse.ECONFLICT, `operator "bob" is the last enabled admin`)
	_, _, err = e.svc.DisableOperator(e.ctx, e.root, "bob")
	wantErr(t, err, lapse.ECONFLICT, `operator "bob" is the last enabled admin`)
	if _, err := e.svc.Session(e.ctx, token); err != nil {
		t.Fatalf("a refused change ended the last admin's session: %v", err)
	}
	// The disabled admin's role changes: it takes no enabled admin away.
	if _, changed, err := e.svc.SetOperatorRole(e.ctx, e.root, "alice", access.RoleViewer); err != nil || !changed {
		t.Fatalf("role change of a disabled admin: %v, %v", changed, err)
	}
	// An admin enabled again is one who remains.
	if _, _, err := e.svc.SetOperatorRole(e.ctx, e.root, "carol", access.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if _, changed, err := e.svc.SetOperatorRole(e.ctx, e.root, "bob", access.RoleOperator); err != nil || !changed {
		t.Fatalf("demoting an admin while another remains: %v, %v", changed, err)
	}
	if got := e.operator("carol"); got.Role != access.RoleAdmin || !got.DisabledAt.IsZero() {
		t.Fatalf("carol: %+v", got)
	}
}

// TestLastAdminStaysConcurrently: two admins disabled at once, on
// PostgreSQL and MySQL, where the two transactions run side by side: one of
// them is refused, every time, so that an enabled admin remains.
func TestLastAdminStaysConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type store interface {
		lapse.Store
		Migrate(context.Context) error
	}
	for name, open := range map[string]func(t *testing.T) (store, error){
		"postgres": func(t *testing.T) (store, error) {
			return postgres.Open(ctx, testenv.PostgresSchema(t), postgres.Config{})
		},
		"mysql": func(t *testing.T) (store, error) {
			return mysql.Open(ctx, testenv.MySQLDatabase(t), mysql.Config{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, err := open(t)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if err := db.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			twoAdminsDisabledAtOnce(t, db)
		})
	}
}

func twoAdminsDisabledAtOnce(t *testing.T, db lapse.Store) {
	ctx := context.Background()
	svc, err := access.New(db, access.Config{HashParams: fastHash})
	if err != nil {
		t.Fatal(err)
	}
	root := access.CLI("root")
	for _, name := range []string{"alice", "bob"} {
		if _, _, err := svc.AddOperator(ctx, root, name, access.RoleAdmin, ""); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 20 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, name := range []string{"alice", "bob"} {
			wg.Go(func() { _, _, errs[i] = svc.DisableOperator(ctx, root, name) })
		}
		wg.Wait()
		ops, err := svc.Operators(ctx)
		if err != nil {
			t.Fatal(err)
		}
		enabled := 0
		for _, o := range ops {
			if o.DisabledAt.IsZero() {
				enabled++
			}
		}
		refused := 0
		for _, err := range errs {
			switch {
			case err == nil:
			case lapse.ErrorCode(err) == lapse.ECONFLICT:
				refused++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if enabled != 1 || refused != 1 {
			t.Fatalf("round %d: two admins disabled at once: %d enabled after, %d refused (%v); want 1 and 1", round, enabled, refused, errs)
		}
		for _, name := range []string{"alice", "bob"} {
			if _, _, err := svc.EnableOperator(ctx, root, name); err != nil {
				t.Fatal(err)
			}
		}
	}
}
