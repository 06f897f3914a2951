package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// wantUnavailable fails t unless err is lapse.ErrStoreUnavailable with the
// server's or the network's error still inside.
func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, lapse.ErrStoreUnavailable) || lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
		t.Errorf("%s: %v (code %s), want lapse.ErrStoreUnavailable", what, err, lapse.ErrorCode(err))
	}
}

// TestUnavailable locks the store's role out of the server, which ends its
// connections (57P01) and refuses new ones (53300): every kind of call says
// the store is unavailable, with the server's error inside. Let back in, the
// store works again and its sentinels are what they were.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	role := testenv.PostgresRole(t, testenv.PostgresSchema(t))
	s := openStore(t, role.DSN, postgres.Config{MaxConns: 2})
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("UN-01", &now, now)); err != nil {
		t.Fatal(err)
	}

	role.Refuse()
	_, _, err := s.OrderCreate(ctx, createParams("UN-02", &now, now))
	wantUnavailable(t, "OrderCreate", err)
	if pe, ok := errors.AsType[*pgconn.PgError](err); !ok || (pe.Code != "53300" && pe.Code != "57P01") {
		t.Errorf("OrderCreate: %v does not hold the server's refusal", err)
	}
	_, err = s.OrderGet(ctx, "UN-01")
	wantUnavailable(t, "OrderGet", err)
	_, err = s.OrderList(ctx, &lapse.OrderListParams{Limit: 10})
	wantUnavailable(t, "OrderList", err)
	wantUnavailable(t, "Tx", s.Tx(ctx, func(tx lapse.Store) error { return nil }))
	wantUnavailable(t, "Ping", s.Ping(ctx))

	role.Admit()
	if _, _, err := s.OrderCreate(ctx, createParams("UN-02", &now, now)); err != nil {
		t.Fatalf("OrderCreate once the role is let in again: %v", err)
	}
	if _, err := s.OrderGet(ctx, "NOPE"); !errors.Is(err, lapse.ErrOrderNotFound) || errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("OrderGet of a missing order: %v, want lapse.ErrOrderNotFound", err)
	}
	if _, _, err := s.OrderCreate(ctx, createParams("UN-02", &now, now.Add(time.Second))); err != nil {
		t.Errorf("OrderCreate again: %v", err)
	}
}

// TestUnavailableNoServer: a store whose server refuses TCP connections, or
// never answers them, fails to open with lapse.ErrStoreUnavailable.
func TestUnavailableNoServer(t *testing.T) {
	t.Parallel()
	closed := testenv.Refused(t)
	for what, addr := range map[string]string{"refused": closed, "unanswered": testenv.Unanswered(t)} {
		_, err := postgres.Open(context.Background(), "postgres://lapse@"+addr+"/lapse?connect_timeout=1", postgres.Config{})
		wantUnavailable(t, what, err)
	}
}

// TestUnavailablePoolWait: a call that waits for a pool connection past its
// deadline is unavailable; a statement that runs past it is not.
func TestUnavailablePoolWait(t *testing.T) {
	t.Parallel()
	s := openStore(t, testenv.PostgresSchema(t), postgres.Config{MaxConns: 1})
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
	pg := func(code string) error { return fmt.Errorf("postgres: order create: %w", &pgconn.PgError{Code: code}) }
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"too_many_connections", pg("53300"), true},
		{"admin_shutdown", pg("57P01"), true},
		{"crash_shutdown", pg("57P02"), true},
		{"cannot_connect_now", pg("57P03"), true},
		{"connection_failure", pg("08006"), true},
		{"read_only_sql_transaction (a demoted primary)", pg("25006"), true},
		{"connection reset", fmt.Errorf("failed to receive message: %w", reset), true},
		{"connection cut short", fmt.Errorf("unexpected EOF: %w", io.ErrUnexpectedEOF), true},
		{"closed connection", fmt.Errorf("wrapped: %w", pgconn.ErrConnClosed), true},
		{"waited for the pool past the deadline", context.DeadlineExceeded, true},
		{"unique_violation", pg("23505"), false},
		{"serialization_failure", pg("40001"), true},
		{"deadlock_detected", pg("40P01"), true},
		{"query_canceled (statement timeout)", pg("57014"), true},
		{"lock_not_available (lock timeout)", pg("55P03"), true},
		{"check_violation", pg("23514"), false},
		{"caller went away", fmt.Errorf("x: %w", context.Canceled), false},
		{"no rows", pgx.ErrNoRows, false},
		{"a store sentinel", lapse.ErrOrderNotFound, false},
	} {
		err := postgres.Unavailable(tt.err)
		if got := errors.Is(err, lapse.ErrStoreUnavailable); got != tt.want {
			t.Errorf("%s: unavailable = %v, want %v (%v)", tt.name, got, tt.want, err)
		}
		// The server gave up on the statement rather than on the session.
		code := ""
		if pe, ok := errors.AsType[*pgconn.PgError](tt.err); ok {
			code = pe.Code
		}
		if got, want := errors.Is(err, lapse.ErrStoreBusy), code == "40001" || code == "40P01" || code == "57014" || code == "55P03"; got != want {
			t.Errorf("%s: busy = %v, want %v (%v)", tt.name, got, want, err)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: the cause is lost: %v", tt.name, err)
		}
		if again := postgres.Unavailable(err); again != err {
			t.Errorf("%s: translated twice: %v", tt.name, again)
		}
	}
}

// TestMultiHost: a multi-host DSN with target_session_attrs=read-write, as
// for a primary with standbys, skips a host that does not answer (after
// ConnectTimeout, 5s by default) and works on the next; a DSN with no host
// of the kind it asks for is unavailable. (cmd/lapse TestPostgresFailover
// passes over a real standby.)
func TestMultiHost(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	hosts := func(host, attrs string) string {
		v := *u
		v.Host = host
		q := v.Query()
		q.Set("target_session_attrs", attrs)
		v.RawQuery = q.Encode()
		return v.String()
	}
	dead := testenv.Unanswered(t)
	ctx := context.Background()

	start := time.Now()
	s := openStore(t, hosts(dead+","+u.Host, "read-write"), postgres.Config{})
	if took := time.Since(start); took < postgres.DefaultConnectTimeout || took > 3*postgres.DefaultConnectTimeout {
		t.Errorf("the unanswered host cost %v, want about DefaultConnectTimeout (%v)", took, postgres.DefaultConnectTimeout)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.OrderCreate(ctx, createParams("MH-01", &now, now)); err != nil {
		t.Fatalf("OrderCreate through the multi-host DSN: %v", err)
	}

	start = time.Now()
	_, err = postgres.Open(ctx, hosts(dead+","+u.Host, "standby"), postgres.Config{ConnectTimeout: 300 * time.Millisecond})
	wantUnavailable(t, "Open with no standby among the hosts", err)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("ConnectTimeout 300ms: giving up took %v", took)
	}
}
