// Package postgres is the PostgreSQL store of Lapse: it implements
// lapse.Store with pgx, and carries its schema as embedded migrations.
//
// Every change of an order is a single SQL statement: the guarded UPDATE (or
// the INSERT of a new order) and the inserts of its log and outbox rows, and
// of the deliveries the events fan out to, are data-modifying CTEs that read
// the rows the UPDATE returned. A statement is atomic on its own, so a change
// is all or nothing without a transaction of its own, and costs one round
// trip whether or not it runs inside Tx. So are a delivery's claim and
// finish and every ledger move: a refused move writes nothing and raises no
// SQL error, so it leaves a caller's transaction usable.
//
// A process opens the store and migrates it on every start:
//
//	s, err := postgres.Open(ctx, "postgres://lapse@db:5432/lapse?search_path=lapse", postgres.Config{})
//	if err != nil { … }
//	defer s.Close()
//	if err := s.Migrate(ctx); err != nil { … }
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lapsehq/lapse"
)

var _ lapse.Store = (*Store)(nil)

// DefaultMaxConns is the pool size when neither Config nor the DSN sets one.
const DefaultMaxConns = 16

// Config tunes a Store. The zero Config is ready to use: every zero field
// takes its default.
type Config struct {
	// MaxConns bounds the connection pool. Zero means the DSN's
	// pool_max_conns, or DefaultMaxConns: the API, the deadline claimer and
	// every subscriber's delivery loop hold connections at once, so pgxpool's
	// own default (4 on a small machine) would starve them.
	MaxConns int32

	// StatementTimeout aborts any statement that runs longer (the server's
	// statement_timeout), so a slow query cannot hold a connection and its
	// locks indefinitely. Zero means 30s, or the DSN's statement_timeout when
	// it sets one; negative means no limit.
	StatementTimeout time.Duration

	// LockTimeout aborts a statement that waits longer for a lock (the
	// server's lock_timeout), so a transaction that holds a row too long
	// makes others fail fast instead of piling up. Zero means 5s, or the
	// DSN's lock_timeout; negative means no limit.
	LockTimeout time.Duration

	// IdleInTransactionTimeout ends sessions whose transaction sits idle
	// longer (idle_in_transaction_session_timeout), so a stuck caller cannot
	// keep claimed orders locked. Zero means 1m, or the DSN's value; negative
	// means no limit.
	IdleInTransactionTimeout time.Duration

	// ApplicationName shows in pg_stat_activity. Zero means "lapse", or the
	// DSN's application_name.
	ApplicationName string

	// ConnectTimeout bounds each attempt to connect to one host, so that a
	// primary that vanished without closing its sockets (a dead machine, a
	// partition) costs this long per new connection rather than the
	// kernel's minutes, and a multi-host DSN moves on to the next host.
	// Zero means 5s, or the DSN's connect_timeout; negative means no limit.
	ConnectTimeout time.Duration

	// DeadPeerTimeout breaks a connection whose server stopped answering
	// at the TCP level (a primary whose machine vanished, a partition)
	// after about this long, so that its statement fails with
	// lapse.ErrStoreUnavailable and the pool reconnects, instead of
	// waiting the kernel's fifteen minutes; a server that is merely slow
	// still answers TCP and is bounded by StatementTimeout. It is TCP
	// keepalive plus, on Linux, TCP_USER_TIMEOUT. Zero means
	// DefaultDeadPeerTimeout; negative leaves it to the kernel.
	DeadPeerTimeout time.Duration

	// BatchGather is how long a batch of the API's reads and writes (the
	// orders and API keys it reads, the orders it creates, the payments it
	// applies; see batch.go) waits for more calls when it holds fewer than
	// four and calls come at least two per BatchGather: at thousands of
	// requests a second, each request's statement and commit are then
	// shared, at the price of up to this much latency. Quieter or busier,
	// nothing waits. Zero means DefaultBatchGather; negative turns it off.
	BatchGather time.Duration
}

// Defaults of Config.
const (
	DefaultStatementTimeout         = 30 * time.Second
	DefaultLockTimeout              = 5 * time.Second
	DefaultIdleInTransactionTimeout = time.Minute
	DefaultApplicationName          = "lapse"
	DefaultConnectTimeout           = 5 * time.Second
	DefaultBatchGather              = time.Millisecond

	// PingAfterIdle is how long a connection may sit idle in the pool
	// before it is pinged when handed out. pgxpool's own default, one
	// second, equals the Claimer's --max-sleep, so an idle Claimer paid a
	// ping for every look at the next deadline: two round trips where one
	// does. A connection that broke within this time fails its statement
	// with lapse.ErrStoreUnavailable and leaves the pool, as a busy one
	// does.
	PingAfterIdle = 10 * time.Second
)

// Validate reports a Config that cannot work.
func (c *Config) Validate() error {
	if c.MaxConns < 0 {
		return errors.New("postgres: MaxConns must not be negative")
	}
	return nil
}

// Store is a lapse.Store on PostgreSQL. A Store from Open uses its pool; the
// Store that Tx passes to its function is bound to that transaction.
type Store struct {
	pool *pgxpool.Pool
	db   db     // pool, or tx inside Tx
	tx   pgx.Tx // nil outside Tx

	// Batches of concurrent calls outside Tx (batch.go); nil inside Tx.
	payments     *paymentBatcher // applied payments (payment_batch.go)
	orderReads   *orderReader    // OrderGet (order_batch.go)
	keyReads     *keyReader      // APIKeyGet (apikey.go)
	orderCreates *orderCreator   // OrderCreate, OrderCreateWith (order_create_batch.go)
}

// db is what both *pgxpool.Pool and pgx.Tx offer, so that every method has
// one code path in and out of a transaction. Store.db is always a conn, which
// reports an unreachable database as lapse.ErrStoreUnavailable.
type db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// Open connects to the database at dsn, a PostgreSQL URL or keyword/value
// string. Unknown DSN parameters such as search_path are sent to the server
// as session settings; the store's tables are found through the search_path.
// Open fails when the database does not answer, with
// lapse.ErrStoreUnavailable, and when the session's default isolation level
// is not READ COMMITTED or its session_replication_role is not origin (see
// checkSession). Call Migrate before use.
//
// For a primary with standbys and automatic failover (pg_auto_failover,
// Patroni), name every node and ask for the writable one:
//
//	postgres://lapse@db1:5432,db2:5432/lapse?target_session_attrs=read-write
//
// Each new connection goes to whichever node is the primary then. A
// connection to a primary that died fails its statement with
// lapse.ErrStoreUnavailable and leaves the pool; one idle for longer than
// PingAfterIdle is checked before it is handed out; so the pool moves to the
// new primary by itself.
// A statement whose connection broke may or may not have committed: the
// caller must not report it as done.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	switch {
	case cfg.MaxConns > 0:
		pc.MaxConns = cfg.MaxConns
	case !strings.Contains(dsn, "pool_max_conns"):
		pc.MaxConns = DefaultMaxConns
	}
	switch {
	case cfg.ConnectTimeout < 0:
		pc.ConnConfig.ConnectTimeout = 0
	case cfg.ConnectTimeout > 0:
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	case pc.ConnConfig.ConnectTimeout == 0:
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	deadPeer := cfg.DeadPeerTimeout
	if deadPeer == 0 {
		deadPeer = DefaultDeadPeerTimeout
	}
	pc.ConnConfig.DialFunc = dialer(pc.ConnConfig.ConnectTimeout, deadPeer).DialContext
	if pc.PingTimeout == 0 {
		// The check of a connection that sat idle in the pool.
		pc.PingTimeout = pc.ConnConfig.ConnectTimeout
	}
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > PingAfterIdle
	}
	params := pc.ConnConfig.RuntimeParams
	setDuration(params, "statement_timeout", cfg.StatementTimeout, DefaultStatementTimeout)
	setDuration(params, "lock_timeout", cfg.LockTimeout, DefaultLockTimeout)
	setDuration(params, "idle_in_transaction_session_timeout", cfg.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)
	switch {
	case cfg.ApplicationName != "":
		params["application_name"] = cfg.ApplicationName
	case params["application_name"] == "":
		params["application_name"] = DefaultApplicationName
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	// NewWithConfig connects lazily; fail here rather than on first use.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", unavailable(err))
	}
	if err := checkSession(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	s := &Store{pool: pool, db: conn{pool}}
	gather := cfg.BatchGather
	if gather == 0 {
		gather = DefaultBatchGather
	}
	s.payments, s.orderReads, s.keyReads = newPaymentBatcher(s, gather), newOrderReader(s, gather), newKeyReader(s, gather)
	s.orderCreates = newOrderCreator(s, gather)
	return s, nil
}

// checkSession refuses a session that the store cannot run safely in, the
// DSN's settings or the role's or database's defaults (ALTER ROLE … SET):
//
//   - a default isolation level other than READ COMMITTED: the store's
//     reads after an insert that met a concurrent one's key must see the
//     winner, which a snapshot taken earlier in the transaction does not;
//   - session_replication_role other than origin: foreign keys are
//     triggers, which a replica session does not fire, so that a key would
//     let in what it must refuse.
func checkSession(ctx context.Context, pool *pgxpool.Pool) error {
	var isolation, role string
	err := pool.QueryRow(ctx, `SELECT current_setting('default_transaction_isolation'), current_setting('session_replication_role')`).
		Scan(&isolation, &role)
	if err != nil {
		return fmt.Errorf("postgres: open: %w", unavailable(err))
	}
	if isolation != "read committed" {
		return fmt.Errorf("postgres: open: the session's default_transaction_isolation is %s (the DSN's, the role's or the database's), not read committed, which the store's transactions rely on; leave it at read committed", isolation)
	}
	if role != "origin" {
		return fmt.Errorf("postgres: open: the session's session_replication_role is %s (the DSN's, the role's or the database's): foreign keys would not be checked; leave it at origin", role)
	}
	return nil
}

// setDuration sets a millisecond server setting: d when set, else what the
// DSN says, else def. A negative d turns the limit off (0 to the server).
func setDuration(params map[string]string, name string, d, def time.Duration) {
	switch {
	case d < 0:
		params[name] = "0"
	case d > 0:
		params[name] = strconv.FormatInt(d.Milliseconds(), 10)
	case params[name] == "":
		params[name] = strconv.FormatInt(def.Milliseconds(), 10)
	}
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var err error
	if s.tx != nil {
		err = s.tx.Conn().Ping(ctx)
	} else {
		err = s.pool.Ping(ctx)
	}
	if err != nil {
		return fmt.Errorf("postgres: ping: %w", unavailable(err))
	}
	return nil
}

// ServerTime reads the server's clock_timestamp(): the time of the read,
// where now() is the start of the transaction.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("postgres: server time: %w", unavailable(err))
	}
	return lapse.Truncate(t), nil
}

// Close closes the pool and waits for its connections to be returned. On a
// Store bound to a transaction it does nothing: the transaction belongs to
// Tx.
func (s *Store) Close() error {
	if s.tx == nil {
		s.pool.Close()
	}
	return nil
}

// isUniqueViolation reports whether err is a violation of the named unique
// constraint.
func isUniqueViolation(err error, constraint string) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == constraint {
		return pe, true
	}
	return nil, false
}

// isCheckViolation reports whether err is a violation of the named check
// constraint.
func isCheckViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && pe.ConstraintName == constraint
}

// isForeignKeyViolation reports whether err is a violation of the named
// foreign key.
func isForeignKeyViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503" && pe.ConstraintName == constraint
}
