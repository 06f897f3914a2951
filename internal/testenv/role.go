package testenv

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Role is a login role of the test PostgreSQL that a test can lock out, to
// see what a store does while the server refuses its connections.
type Role struct {
	Name string
	DSN  string // schemaDSN as this role
	t    testing.TB
	base string // the superuser DSN of EnvPostgres
}

// PostgresRole creates a login role with every right on the schema of
// schemaDSN (a DSN from PostgresSchema), and drops it, with all it owns, when
// the test ends. Register it before anything that connects as the role, so
// that those connections are closed first.
func PostgresRole(t testing.TB, schemaDSN string) *Role {
	t.Helper()
	u, err := url.Parse(schemaDSN)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", schemaDSN, err)
	}
	schema := u.Query().Get("search_path")
	if schema == "" {
		t.Fatalf("%s names no schema (search_path)", schemaDSN)
	}
	r := &Role{Name: "lapse_test_role_" + randomHex(6), t: t, base: Require(t, EnvPostgres, "PostgreSQL")}
	u.User = url.User(r.Name)
	r.DSN = u.String()
	r.exec("CREATE ROLE "+r.Name+" LOGIN", "GRANT ALL ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+r.Name)
	t.Cleanup(func() {
		r.exec("ALTER ROLE "+r.Name+" CONNECTION LIMIT 0",
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '"+r.Name+"'",
			"DROP OWNED BY "+r.Name, "DROP ROLE "+r.Name)
	})
	return r
}

// Refuse makes the server refuse the role's new connections (SQLSTATE 53300,
// too many connections for role) and ends the ones it has (57P01,
// terminating connection due to administrator command).
//
// It returns once no connection of the role is left. A connection that
// passed the limit before it was set, and was still starting when the
// others were ended, shows in pg_stat_activity only after that: one such
// connection, kept by a pool, served every request of a test that counted
// on the refusal. So the role's connections are ended until none has been
// seen twice in a row (pg_terminate_backend does not wait for the end).
func (r *Role) Refuse() {
	r.t.Helper()
	r.exec("ALTER ROLE " + r.Name + " CONNECTION LIMIT 0")
	r.withConn(func(ctx context.Context, conn *pgx.Conn) {
		for none := 0; none < 2; time.Sleep(20 * time.Millisecond) {
			var left int
			// Each connection seen is ended, and counted.
			err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1`, r.Name).Scan(&left)
			if err != nil {
				r.t.Errorf("end the connections of %s: %v", r.Name, err)
				return
			}
			if left == 0 {
				none++
			} else {
				none = 0
			}
		}
	})
}

// Admit lets the role connect again.
func (r *Role) Admit() {
	r.t.Helper()
	r.exec("ALTER ROLE " + r.Name + " CONNECTION LIMIT -1")
}

func (r *Role) exec(stmts ...string) {
	r.t.Helper()
	r.withConn(func(ctx context.Context, conn *pgx.Conn) {
		for _, q := range stmts {
			if _, err := conn.Exec(ctx, q); err != nil {
				r.t.Errorf("%s: %v", q, err)
				return
			}
		}
	})
}

// withConn runs f on a connection of the superuser, within 30 s.
func (r *Role) withConn(f func(ctx context.Context, conn *pgx.Conn)) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.base)
	if err != nil {
		r.t.Errorf("connect to %s: %v", EnvPostgres, err)
		return
	}
	defer conn.Close(ctx)
	f(ctx, conn)
}
