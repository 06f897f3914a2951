package mysql_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
)

// wantUnavailable fails t unless err is lapse.ErrStoreUnavailable.
func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, lapse.ErrStoreUnavailable) || lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
		t.Errorf("%s: %v (code %s), want lapse.ErrStoreUnavailable", what, err, lapse.ErrorCode(err))
	}
}

// user is an account of the test server with every right on one database,
// which a test can lock out.
type user struct {
	name, dsn string
	t         *testing.T
}

// newUser creates an account with every right on the database of dbDSN (a
// DSN from testenv.MySQLDatabase) and drops it when the test ends. Create
// it before anything that connects as it, so that those close first.
func newUser(t *testing.T, dbDSN string) *user {
	t.Helper()
	u, err := url.Parse(dbDSN)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("lapse_u_%d", time.Now().UnixNano()%1e9)
	u.User = url.UserPassword(name, "pw")
	x := &user{name: name, dsn: u.String(), t: t}
	x.exec("CREATE USER '"+name+"'@'%' IDENTIFIED BY 'pw'", "GRANT ALL ON `"+u.Path[1:]+"`.* TO '"+name+"'@'%'")
	t.Cleanup(func() { x.exec("DROP USER '" + name + "'@'%'") })
	return x
}

// refuse locks the account, so that the server refuses its new
// connections, and kills the ones it has.
func (u *user) refuse() {
	u.t.Helper()
	u.exec("ALTER USER '" + u.name + "'@'%' ACCOUNT LOCK")
	admin := testenv.MySQLAdmin(u.t)
	rows, err := admin.Query("SELECT id FROM information_schema.processlist WHERE user = ?", u.name)
	if err != nil {
		u.t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			u.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id)) // it may have ended meanwhile
	}
}

// admit lets the account connect again.
func (u *user) admit() {
	u.t.Helper()
	u.exec("ALTER USER '" + u.name + "'@'%' ACCOUNT UNLOCK")
}

func (u *user) exec(stmts ...string) {
	u.t.Helper()
	admin := testenv.MySQLAdmin(u.t)
	for _, q := range stmts {
		if _, err := admin.Exec(q); err != nil {
			u.t.Errorf("%s: %v", q, err)
		}
	}
}

// TestUnavailable locks the store's account out of the server and kills its
// connections: every kind of call says the store is unavailable. Let back
// in, the store works again and its sentinels are what they were.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	u := newUser(t, testenv.MySQLDatabase(t))
	s := openStore(t, u.dsn, mysql.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("UN-01", &now, now)); err != nil {
		t.Fatal(err)
	}

	u.refuse()
	_, _, err := s.OrderCreate(ctx, createParams("UN-02", &now, now))
	wantUnavailable(t, "OrderCreate", err)
	if n := (*gomysql.MySQLError)(nil); errors.As(err, &n) && n.Number != 4151 && n.Number != 3118 && n.Number != 1927 {
		t.Errorf("OrderCreate: %v is not the server's refusal", err)
	}
	_, err = s.OrderGet(ctx, "UN-01")
	wantUnavailable(t, "OrderGet", err)
	_, err = s.OrderList(ctx, &lapse.OrderListParams{Limit: 10})
	wantUnavailable(t, "OrderList", err)
	wantUnavailable(t, "Tx", s.Tx(ctx, func(tx lapse.Store) error { return nil }))
	wantUnavailable(t, "Ping", s.Ping(ctx))

	u.admit()
	if _, _, err := s.OrderCreate(ctx, createParams("UN-02", &now, now)); err != nil {
		t.Fatalf("OrderCreate once the account is let in again: %v", err)
	}
	if _, err := s.OrderGet(ctx, "NOPE"); !errors.Is(err, lapse.ErrOrderNotFound) || errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("OrderGet of a missing order: %v, want lapse.ErrOrderNotFound", err)
	}
}

// TestUnavailableReadOnly: a server that takes no writes, as a primary
// demoted in a failover does (read_only), refuses the store's writes with
// lapse.ErrStoreUnavailable, as PostgreSQL's read_only_sql_transaction
// (25006) is in its store, not as an internal error; reads go on, and each
// connection refused a write leaves the pool, so that once writes are taken
// again (the pool on the new primary) the next write succeeds. The tests
// may not set read_only on the shared server: sessions made read-only as
// the pool opens them (not by the DSN, which Open refuses) stand in for
// it; MariaDB answers them with 1792, SQLSTATE 25006 too.
func TestUnavailableReadOnly(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDatabase(t)
	ctx := context.Background()
	s, demote, err := mysql.OpenDemotable(ctx, dsn, mysql.Config{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("RO-01", &now, now)); err != nil {
		t.Fatal(err)
	}

	demote(true)
	if _, err := s.OrderGet(ctx, "RO-01"); err != nil {
		t.Errorf("OrderGet on a read-only server: %v", err)
	}
	_, _, err = s.OrderCreate(ctx, createParams("RO-02", &now, now))
	wantUnavailable(t, "OrderCreate", err)
	_, err = s.StockSet(ctx, &lapse.StockSetParams{SKU: "tea", OnHand: 1, At: now})
	wantUnavailable(t, "StockSet", err)
	if _, err := s.OrderGet(ctx, "RO-02"); !errors.Is(err, lapse.ErrOrderNotFound) {
		t.Errorf("OrderGet of an order refused as read-only: %v, want lapse.ErrOrderNotFound", err)
	}
	// The read above left its read-only connection idle in the pool: the
	// write below is refused on it, and the connection closed.
	_, _, err = s.OrderCreate(ctx, createParams("RO-02", &now, now))
	wantUnavailable(t, "OrderCreate on an idle read-only connection", err)

	// Writes are taken again: no read-only connection is left to refuse one.
	demote(false)
	if _, _, err := s.OrderCreate(ctx, createParams("RO-02", &now, now)); err != nil {
		t.Errorf("OrderCreate once writes are taken again: %v", err)
	}

	// A connection that turned read-only under the store, as those to a
	// primary demoted under them do, leaves the pool at its first refused
	// write: the pool moves to a server that takes writes, here a session
	// that does.
	one := openStore(t, dsn, mysql.Config{MaxConns: 1})
	if _, err := one.Exec(ctx, "SET SESSION "+one.ReadOnlyVar()+" = 1"); err != nil {
		t.Fatal(err)
	}
	_, _, err = one.OrderCreate(ctx, createParams("RO-03", &now, now))
	wantUnavailable(t, "OrderCreate on a connection turned read-only", err)
	if _, _, err := one.OrderCreate(ctx, createParams("RO-04", &now, now)); err != nil {
		t.Errorf("OrderCreate after a write refused as read-only: %v; want it written on a new connection", err)
	}
}

// TestUnavailableNoServer: a store whose server refuses TCP connections, or
// never answers them, fails to open with lapse.ErrStoreUnavailable.
func TestUnavailableNoServer(t *testing.T) {
	t.Parallel()
	closed := testenv.Refused(t)
	for what, addr := range map[string]string{"refused": closed, "unanswered": testenv.Unanswered(t)} {
		_, err := mysql.Open(context.Background(), "mysql://lapse@"+addr+"/lapse?timeout=1s", mysql.Config{})
		wantUnavailable(t, what, err)
	}
}

// TestUnavailablePoolWait: a call that waits for a pool connection past its
// deadline is unavailable; a statement that runs past it is not.
func TestUnavailablePoolWait(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.MySQLDatabase(t), mysql.Config{MaxConns: 1})
	ctx := context.Background()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Tx(ctx, func(lapse.Store) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := s.OrderGet(wctx, "ANY")
	cancel()
	wantUnavailable(t, "OrderGet beside a held pool", err)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = s.Sleep(sctx, 5*time.Second)
	cancel()
	if err == nil || errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("a statement past its deadline: %v, want a timeout that is not lapse.ErrStoreUnavailable", err)
	}
}

// TestUnavailableErrors: which driver errors mean the database is unavailable.
func TestUnavailableErrors(t *testing.T) {
	t.Parallel()
	my := func(n uint16) error { return fmt.Errorf("mysql: create order: %w", &gomysql.MySQLError{Number: n}) }
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"too many connections", my(1040), true},
		{"max_user_connections", my(1203), true},
		{"account locked (MariaDB)", my(4151), true},
		{"account locked (MySQL)", my(3118), true},
		{"access denied", my(1045), true},
		{"server shutdown", my(1053), true},
		{"connection killed", my(1927), true},
		{"read_only (a demoted primary)", my(1290), true},
		{"read-only transaction", my(1792), true},
		{"read-only mode", my(1836), true},
		{"innodb_read_only", my(1874), true},
		{"connection reset", fmt.Errorf("read: %w", reset), true},
		{"connection broke mid-statement", fmt.Errorf("x: %w", gomysql.ErrInvalidConn), true},
		{"connection broke before the statement", driver.ErrBadConn, true},
		{"connection cut short", fmt.Errorf("x: %w", io.ErrUnexpectedEOF), true},
		{"duplicate entry", my(1062), false},
		{"deadlock", my(1213), true},
		{"lock wait timeout", my(1205), true},
		{"statement timeout (MariaDB)", my(1969), true},
		{"statement timeout (MySQL)", my(3024), true},
		{"query killed", my(1317), true},
		{"a statement past the caller's deadline", context.DeadlineExceeded, false},
		{"caller went away", fmt.Errorf("x: %w", context.Canceled), false},
		{"a store sentinel", lapse.ErrOrderNotFound, false},
	} {
		err := mysql.Unavailable(tt.err)
		if got := errors.Is(err, lapse.ErrStoreUnavailable); got != tt.want {
			t.Errorf("%s: unavailable = %v, want %v (%v)", tt.name, got, tt.want, err)
		}
		// The server gave up on the statement rather than on the session.
		n := uint16(0)
		if me, ok := errors.AsType[*gomysql.MySQLError](tt.err); ok {
			n = me.Number
		}
		if got, want := errors.Is(err, lapse.ErrStoreBusy), n == 1213 || n == 1205 || n == 1969 || n == 3024 || n == 1317; got != want {
			t.Errorf("%s: busy = %v, want %v (%v)", tt.name, got, want, err)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: the cause is lost: %v", tt.name, err)
		}
		if again := mysql.Unavailable(err); again != err {
			t.Errorf("%s: translated twice: %v", tt.name, again)
		}
	}
}
