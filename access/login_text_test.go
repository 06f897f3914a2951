package access_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
	"github.com/lapsehq/lapse/sqlite"
)

// TestLoginNameNotText: a login as a name that no store can keep as text
// (a NUL, bytes that are not UTF-8: a console form can send either) names
// no operator. It is the answer of any failed login and leaves its row,
// "unknown operator", on every store: PostgreSQL refuses such a name in a
// query, and the login failed as an internal error with no row.
func TestLoginNameNotText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type store interface {
		lapse.Store
		lapse.AccessStore
		Migrate(context.Context) error
	}
	for name, open := range map[string]func(t *testing.T) (store, error){
		"sqlite": func(t *testing.T) (store, error) {
			return sqlite.Open(ctx, filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
		},
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
			svc, err := access.New(db, access.Config{HashParams: fastHash})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := svc.AddOperator(ctx, access.CLI("root"), "alice", access.RoleOperator, password); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"al\x00ice", "alice\x00", "\xffalice", "al\xc3ice"} {
				_, _, err := svc.Login(ctx, n, password, "123456", "192.0.2.1")
				wantErr(t, err, lapse.EUNAUTHORIZED, "name, password or code is wrong")
				rows, err := db.AuditList(ctx, &lapse.AuditListParams{Action: "login", Descending: true, Limit: 1})
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) != 1 || rows[0].Result != "unknown operator" || rows[0].ActorName != lapse.CleanReason(n) || rows[0].Target != "" {
					t.Fatalf("login as %q: last login row %+v; want one of an unknown operator", n, rows)
				}
			}
			if _, err := lapse.AuditSeal(ctx, db, 100); err != nil {
				t.Fatal(err)
			}
			if c, err := lapse.AuditVerify(ctx, db, 100); err != nil || c.Rows != 5 {
				t.Fatalf("AuditVerify = %+v, %v; want 5 rows", c, err)
			}
		})
	}
}
