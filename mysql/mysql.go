// Package mysql is the MySQL store of Lapse: it implements lapse.Store,
// lapse.SandboxStore and lapse.AccessStore on MySQL 8 (8.0.16 or later) and
// MariaDB (10.6 or later) with github.com/go-sql-driver/mysql, and carries
// its schema as embedded migrations. Its tests have run on MariaDB 10.11;
// MySQL 8 is provided for (variable names, error numbers) but has not been
// tested.
//
// MySQL has no UPDATE … RETURNING and no data-modifying CTEs, so every change
// that writes more than one row is a transaction of its own (or, inside Tx, a
// savepoint of the caller's): the guarded UPDATE, whose affected rows say
// whether the guard held, then the log, outbox and delivery rows, then a read
// of the row as it now is. A refused or failed change writes nothing and
// leaves a caller's transaction usable.
//
// Sessions run at READ COMMITTED, as the PostgreSQL store's do: each
// statement sees what committed before it, so a read after an insert that met
// a concurrent one's key sees the winner, and locking reads take no gap
// locks. InnoDB's default, REPEATABLE READ, would keep a transaction's first
// snapshot and show it stale data there.
//
// Times are BIGINT unix microseconds, UTC, as in the SQLite store: exact at
// the precision lapse.Truncate keeps, over every time a time.Time holds, and
// independent of the session's time zone and of sql_mode's rules for zero
// dates, which differ between MySQL and MariaDB. Short strings (order
// numbers, SKUs, idempotency keys, states) are VARBINARY, compared byte for
// byte like the other stores' text: utf8mb4_bin is a PAD SPACE collation, to
// which 'a' and 'a ' are one key. An argument tested against a literal
// rather than a column is compared in the connection's collation
// (utf8mb4_general_ci by default, to which a blank is the empty string), so
// that literal is a binary one, _binary followed by it. JSON is kept as
// text, so that the caller's bytes come back exactly as sent (MySQL's JSON
// type rewrites them).
//
// A process opens the store and migrates it on every start:
//
//	s, err := mysql.Open(ctx, "mysql://lapse:secret@db:3306/lapse", mysql.Config{})
//	if err != nil { … }
//	defer s.Close()
//	if err := s.Migrate(ctx); err != nil { … }
package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse"
)

var _ lapse.Store = (*Store)(nil)

// DefaultMaxConns is the pool size when Config.MaxConns is zero: the API,
// the deadline claimer and every subscriber's delivery loop hold connections
// at once.
const DefaultMaxConns = 16

// Defaults of Config.
const (
	DefaultStatementTimeout = 30 * time.Second
	DefaultLockTimeout      = 5 * time.Second
)

// Config tunes a Store. The zero Config is ready to use: every zero field
// takes its default.
type Config struct {
	// MaxConns bounds the connection pool. Zero means DefaultMaxConns.
	MaxConns int

	// StatementTimeout aborts a statement that runs longer, so that a slow
	// query cannot hold a connection and its locks indefinitely: MariaDB's
	// max_statement_time, which bounds every statement, or MySQL's
	// max_execution_time, which bounds SELECTs only. Zero means
	// DefaultStatementTimeout, or the DSN's setting of that variable;
	// negative means no limit.
	StatementTimeout time.Duration

	// LockTimeout fails a statement that waits longer for a row lock
	// (innodb_lock_wait_timeout, in whole seconds, at least one), so that a
	// transaction holding a row too long makes others fail fast instead of
	// piling up. Zero means DefaultLockTimeout, or the DSN's
	// innodb_lock_wait_timeout; negative means the server's own setting.
	LockTimeout time.Duration
}

// Validate reports a Config that cannot work.
func (c *Config) Validate() error {
	if c.MaxConns < 0 {
		return errors.New("mysql: MaxConns must not be negative")
	}
	return nil
}

// Store is a lapse.Store on MySQL or MariaDB. A Store from Open uses its
// pool; the Store that Tx passes to its function is bound to that
// transaction.
type Store struct {
	pool   *sql.DB
	server server
	tx     *sql.Tx  // nil outside Tx
	txs    *txState // the state of tx, shared by the Stores bound to it
}

// server is what Open learned of the database server.
type server struct {
	mariadb bool
	// rollbackOnTimeout is innodb_rollback_on_timeout, which the server
	// reads at its start: a lock wait timeout rolls back the whole
	// transaction, not only the statement.
	rollbackOnTimeout bool
}

// isolationVar is the name of the session's isolation level: MySQL 8
// dropped tx_isolation for transaction_isolation, which MariaDB before 11.1
// does not know.
func (v server) isolationVar() string {
	if v.mariadb {
		return "tx_isolation"
	}
	return "transaction_isolation"
}

// readOnlyVar is the name of the session's default access mode: MySQL 8
// dropped tx_read_only for transaction_read_only, which MariaDB before 11.1
// does not know.
func (v server) readOnlyVar() string {
	if v.mariadb {
		return "tx_read_only"
	}
	return "transaction_read_only"
}

// timeoutVar is the server's statement timeout and its value for d.
func (v server) timeoutVar(d time.Duration) (name, value string) {
	if v.mariadb {
		return "max_statement_time", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	}
	return "max_execution_time", strconv.FormatInt(d.Milliseconds(), 10)
}

// Minimum server versions: SKIP LOCKED came with MySQL 8.0.1 and MariaDB
// 10.6, and MySQL enforces CHECK constraints, which keep the stock ledger
// from going below what is reserved, only since 8.0.16.
var (
	minMySQL   = [3]int{8, 0, 16}
	minMariaDB = [3]int{10, 6, 0}
)

// Open connects to the database named by dsn, a URL
//
//	mysql://user:password@host:3306/database?param=value&…
//
// whose parameters are the driver's (tls, timeout, readTimeout, …; see
// github.com/go-sql-driver/mysql) or, for any other name, session variables
// set on every connection (sql_mode='…', quoted as SQL), each in lower case
// with one value: a number, a word, or a string in single quotes. The store sets the
// session's time zone (+00:00), character set (utf8mb4) and isolation level
// (READ COMMITTED) and the driver's parseTime, loc=UTC, interpolateParams,
// clientFoundRows and rejectReadOnly itself; a DSN that sets one of them
// otherwise is an error. It sets the session's sql_mode too, to sqlMode,
// so that the server's default cannot change what its SQL means; a DSN may
// set another only when it is strict and has no flag outside sqlModes
// (ANSI_QUOTES, PIPES_AS_CONCAT, ORACLE, NO_BACKSLASH_ESCAPES, … are
// refused). A write the server refuses as read-only, as a
// demoted primary does, is lapse.ErrStoreUnavailable, and its connection
// leaves the pool; a DSN that sets tx_read_only or transaction_read_only
// is refused, as the setting it is.
//
// Open fails when the server is older than MySQL 8.0.16 or MariaDB 10.6, when
// the session's sql_mode is not strict (STRICT_TRANS_TABLES or
// STRICT_ALL_TABLES: without it, values that do not fit are truncated rather
// than refused) or has a flag outside sqlModes, when it runs with autocommit, foreign_key_checks or
// unique_checks off, with an sql_select_limit or with read-only
// transactions (nothing written outside a transaction would commit, a key
// would not refuse what it must, a read would stop short, every write would
// be refused), or when the binary log is statement-based, which InnoDB
// refuses at READ COMMITTED. It fails with lapse.ErrStoreUnavailable when the
// server cannot be reached or refuses the connection. Call Migrate before use.
func Open(ctx context.Context, dsn string, cfg Config) (*Store, error) {
	return open(ctx, dsn, cfg)
}

// open is Open with the driver's options applied after the DSN's, which
// tests use to stand in for a server that changes under the store.
func open(ctx context.Context, dsn string, cfg Config, opts ...mysql.Option) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mc, err := driverConfig(dsn)
	if err != nil {
		return nil, err
	}
	if err := mc.Apply(opts...); err != nil {
		return nil, fmt.Errorf("mysql: open: %w", err)
	}
	srv, err := probe(ctx, mc)
	if err != nil {
		return nil, err
	}
	mc.Params[srv.isolationVar()] = "'READ-COMMITTED'"
	setTimeout(mc.Params, "innodb_lock_wait_timeout", cfg.LockTimeout, DefaultLockTimeout, func(d time.Duration) string {
		return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
	})
	name, _ := srv.timeoutVar(0)
	setTimeout(mc.Params, name, cfg.StatementTimeout, DefaultStatementTimeout, func(d time.Duration) string {
		_, v := srv.timeoutVar(d)
		return v
	})
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql: open: %w", err)
	}
	pool := sql.OpenDB(conn)
	conns := cmp.Or(cfg.MaxConns, DefaultMaxConns)
	pool.SetMaxOpenConns(conns)
	pool.SetMaxIdleConns(conns)
	pool.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{pool: pool, server: srv}
	if err := s.checkSession(ctx); err != nil {
		_ = pool.Close()
		return nil, err
	}
	return s, nil
}

// probe connects once with mc to learn which server it is, and refuses one
// too old for the store.
func probe(ctx context.Context, mc *mysql.Config) (server, error) {
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return server{}, fmt.Errorf("mysql: open: %w", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	var version string
	var rollbackOnTimeout bool
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@GLOBAL.innodb_rollback_on_timeout").Scan(&version, &rollbackOnTimeout); err != nil {
		return server{}, fmt.Errorf("mysql: open: %w", unavailableWait(err))
	}
	srv, v, err := parseVersion(version)
	if err != nil {
		return server{}, err
	}
	srv.rollbackOnTimeout = rollbackOnTimeout
	least, name := minMySQL, "MySQL"
	if srv.mariadb {
		least, name = minMariaDB, "MariaDB"
	}
	if older(v, least) {
		return server{}, fmt.Errorf("mysql: the server is %s %s; the store needs %s %d.%d.%d or later", name, version, name, least[0], least[1], least[2])
	}
	return srv, nil
}

// parseVersion reads VERSION(): "8.0.36", "8.4.0-log",
// "10.11.6-MariaDB-0+deb12u1", or with MariaDB's replication prefix,
// "5.5.5-10.11.6-MariaDB".
func parseVersion(version string) (server, [3]int, error) {
	srv := server{mariadb: strings.Contains(version, "MariaDB")}
	s := version
	if srv.mariadb {
		s = strings.TrimPrefix(s, "5.5.5-")
	}
	var v [3]int
	for i := range v {
		end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
		if end < 0 {
			end = len(s)
		}
		n, err := strconv.Atoi(s[:end])
		if err != nil {
			return srv, v, fmt.Errorf("mysql: cannot read the server version %q", version)
		}
		v[i] = n
		s = strings.TrimPrefix(s[end:], ".")
	}
	return srv, v, nil
}

func older(v, least [3]int) bool {
	for i := range v {
		if v[i] != least[i] {
			return v[i] < least[i]
		}
	}
	return false
}

// checkSession refuses a session that the store cannot run safely in, as
// the pool's connections are set up.
func (s *Store) checkSession(ctx context.Context) error {
	var sqlMode, zone, isolation, selectLimit, client, connection string
	var results sql.NullString
	var autocommit, foreignKeys, uniqueChecks, readOnly bool
	err := s.queryRow(ctx, "SELECT @@SESSION.sql_mode, @@SESSION.time_zone, @@SESSION."+s.server.isolationVar()+
		", @@SESSION.autocommit, @@SESSION.foreign_key_checks, @@SESSION.unique_checks, @@SESSION.sql_select_limit"+
		", @@SESSION.character_set_client, @@SESSION.character_set_connection, @@SESSION.character_set_results"+
		", @@SESSION."+s.server.readOnlyVar()).
		Scan(&sqlMode, &zone, &isolation, &autocommit, &foreignKeys, &uniqueChecks, &selectLimit, &client, &connection, &results, &readOnly)
	if err != nil {
		return fmt.Errorf("mysql: open: %w", err)
	}
	// The driver sets all three to utf8mb4 (charset); a DSN that sets one
	// of them otherwise as a session variable would have the server read
	// the store's text, or answer it, in another character set: a reason, a
	// note or an event's payload kept or delivered with ? for what that set
	// lacks. No conversion of results (NULL) is as good as utf8mb4.
	if client != "utf8mb4" || connection != "utf8mb4" || results.Valid && results.String != "utf8mb4" {
		return fmt.Errorf("mysql: open: the session's character sets are %s (client), %s (connection) and %s (results), not utf8mb4: text would be read or answered in another; leave character_set_* out of the DSN",
			client, connection, cmp.Or(results.String, "none"))
	}
	// Switches that make the server silently do less than a statement says
	// (the DSN's or the server's): with autocommit off, every statement
	// outside Tx opens a transaction that nothing commits, a write answered
	// as done and rolled back with its connection; without the key checks,
	// a key that should refuse a row (an order number taken, a payment
	// recorded) may let it in; with a select limit, a read returns some of
	// its rows as if they were all.
	switch {
	case !autocommit:
		return errors.New("mysql: open: the session runs with autocommit off (autocommit=0, the DSN's or the server's): the store's writes outside a transaction would never commit; leave autocommit on")
	case !foreignKeys || !uniqueChecks:
		return errors.New("mysql: open: the session runs with foreign_key_checks or unique_checks off (the DSN's or the server's): the keys the store relies on would not refuse what they must; leave both on")
	case readOnly:
		// Every write would be refused as a demoted primary's is, and its
		// connection replaced by another just as read-only: 503 for ever.
		return fmt.Errorf("mysql: open: the session's transactions are read-only (%s=1, the DSN's or the server's): the store could write nothing; leave it off", s.server.readOnlyVar())
	case selectLimit != "18446744073709551615":
		return fmt.Errorf("mysql: open: the session's sql_select_limit is %s: every read would stop there as if it had found all; leave it at its default", selectLimit)
	}
	if err := checkSQLMode("the session's", sqlMode); err != nil {
		return fmt.Errorf("mysql: open: %w", err)
	}
	if zone != "+00:00" || !strings.EqualFold(strings.ReplaceAll(isolation, "_", "-"), "READ-COMMITTED") {
		return fmt.Errorf("mysql: open: the session runs at time zone %s and isolation %s, not +00:00 and READ COMMITTED", zone, isolation)
	}
	// binlog_format is deprecated in MySQL: a server without it logs rows.
	var logBin int
	var binlogFormat string
	err = s.queryRow(ctx, "SELECT @@GLOBAL.log_bin, @@SESSION.binlog_format").Scan(&logBin, &binlogFormat)
	if errorNumber(err) == 1193 { // ER_UNKNOWN_SYSTEM_VARIABLE
		return nil
	}
	if err != nil {
		return fmt.Errorf("mysql: open: %w", err)
	}
	if logBin == 1 && strings.EqualFold(binlogFormat, "STATEMENT") {
		return errors.New("mysql: open: the binary log is statement-based (binlog_format=STATEMENT), which InnoDB refuses at READ COMMITTED; use ROW or MIXED")
	}
	return nil
}

// sqlMode is the session's sql_mode that the store sets on every connection
// unless the DSN sets one that checkSQLMode allows: strict, so that a value
// that does not fit is refused rather than cut short, and nothing else that
// changes how its SQL parses or compares. The server's own default, which
// a new session otherwise takes, may hold any mode (ANSI_QUOTES, ORACLE,
// …); the store's statements never run under it.
const sqlMode = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"

// sqlModes are the sql_mode flags a session of the store may have. Every
// other flag changes what the store's SQL means, or may (an unknown one is
// refused rather than guessed at): ANSI_QUOTES reads "…" as a name,
// PIPES_AS_CONCAT reads || as concatenation, NO_BACKSLASH_ESCAPES reads
// \ in a literal as itself, HIGH_NOT_PRECEDENCE and IGNORE_SPACE parse
// expressions otherwise, SIMULTANEOUS_ASSIGNMENT (MariaDB) changes what an
// UPDATE's later assignments see, EMPTY_STRING_IS_NULL (MariaDB) makes the empty string
// NULL, PAD_CHAR_TO_FULL_LENGTH pads what CHAR columns return,
// NO_UNSIGNED_SUBTRACTION and NO_AUTO_VALUE_ON_ZERO change arithmetic and
// keys, and the combinations ANSI, ORACLE, MSSQL, DB2, POSTGRESQL and MAXDB
// bring several of these.
var sqlModes = map[string]bool{
	"STRICT_TRANS_TABLES":        true,
	"STRICT_ALL_TABLES":          true,
	"ERROR_FOR_DIVISION_BY_ZERO": true,
	"NO_ENGINE_SUBSTITUTION":     true,
	"NO_ZERO_DATE":               true,
	"NO_ZERO_IN_DATE":            true,
	"NO_AUTO_CREATE_USER":        true, // MariaDB's default; gone from MySQL 8
	"ONLY_FULL_GROUP_BY":         true, // refuses queries, never changes one
	"TRADITIONAL":                true, // strict and the date checks above
}

// checkSQLMode refuses an sql_mode (whose's: the DSN's or the session's)
// that is not strict or has a flag outside sqlModes.
func checkSQLMode(whose, mode string) error {
	modes := strings.Split(strings.ToUpper(mode), ",")
	if !contains(modes, "STRICT_TRANS_TABLES") && !contains(modes, "STRICT_ALL_TABLES") {
		return fmt.Errorf("%s sql_mode (%q) is not strict: without STRICT_TRANS_TABLES or STRICT_ALL_TABLES the server stores what does not fit truncated or zeroed instead of refusing it; leave sql_mode out of the DSN, and the store sets its own", whose, mode)
	}
	for _, m := range modes {
		if m = strings.TrimSpace(m); m != "" && !sqlModes[m] {
			return fmt.Errorf("%s sql_mode (%q) has %s, which changes how the store's SQL parses or compares (the store allows only %s); leave sql_mode out of the DSN, and the store sets its own", whose, mode, m, allowedModes())
		}
	}
	return nil
}

func allowedModes() string {
	names := make([]string, 0, len(sqlModes))
	for m := range sqlModes {
		names = append(names, m)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// dsnSQLMode reads the DSN's sql_mode parameter, a quoted SQL string
// ('A,B') or a single bare name, and returns it as the session variable's
// value, quoted, or an error when the store cannot run under it.
func dsnSQLMode(v string) (string, error) {
	mode, quoted := strings.CutPrefix(v, "'")
	if quoted {
		var ok bool
		if mode, ok = strings.CutSuffix(mode, "'"); !ok {
			return "", errors.New("mysql: the DSN's sql_mode is not a quoted SQL string: sql_mode='STRICT_ALL_TABLES', URL-escaped")
		}
	}
	for _, r := range mode {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == ',' && quoted) {
			return "", errors.New("mysql: the DSN's sql_mode is not a quoted list of modes: sql_mode='STRICT_ALL_TABLES', URL-escaped")
		}
	}
	if err := checkSQLMode("mysql: the DSN's", mode); err != nil {
		return "", err
	}
	return "'" + strings.ToUpper(mode) + "'", nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// owned are the DSN parameters the store sets itself, with whether a value
// the DSN gives agrees with it.
var owned = map[string]func(v string) bool{
	"parseTime":             isTrue,
	"interpolateParams":     isTrue,
	"loc":                   func(v string) bool { return v == "UTC" },
	"clientFoundRows":       isTrue,
	"rejectReadOnly":        isTrue,
	"multiStatements":       func(v string) bool { return !isTrue(v) },
	"columnsWithAlias":      func(v string) bool { return !isTrue(v) },
	"charset":               func(v string) bool { return v == "utf8mb4" },
	"collation":             func(v string) bool { return strings.HasPrefix(v, "utf8mb4_") },
	"time_zone":             func(v string) bool { return v == "'+00:00'" },
	"tx_isolation":          isReadCommitted,
	"transaction_isolation": isReadCommitted,
}

// sessionVarName reports whether name is a system variable's name as the
// server spells it: lower-case letters, digits and underscores.
func sessionVarName(name string) bool {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return name != ""
}

// sessionVarValue reports whether v is one value of SET: a number or a
// word ('-', '.', '+' allowed), or a string in single quotes with no quote
// or backslash inside.
func sessionVarValue(v string) bool {
	if inner, ok := strings.CutPrefix(v, "'"); ok {
		inner, ok = strings.CutSuffix(inner, "'")
		return ok && !strings.ContainsAny(inner, `'\`)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.+", r)) {
			return false
		}
	}
	return v != ""
}

func isTrue(v string) bool { return v == "true" || v == "1" }

// isFalse reports whether a session variable's value in a DSN is off.
func isFalse(v string) bool {
	return v == "0" || strings.EqualFold(v, "false") || strings.EqualFold(v, "off") || strings.EqualFold(v, "'off'") || v == "'0'"
}
func isReadCommitted(v string) bool { return strings.EqualFold(v, "'READ-COMMITTED'") }

// driverConfig translates a mysql:// URL to the driver's configuration. Its
// errors never repeat the DSN, which holds a password.
func driverConfig(dsn string) (*mysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "mysql" || u.Host == "" || u.Opaque != "" {
		return nil, errors.New("mysql: the DSN must be a URL mysql://user:password@host:port/database")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, errors.New("mysql: the DSN names no database: mysql://user:password@host:port/database")
	}
	q := u.Query()
	collation := "utf8mb4_general_ci"
	for name, agrees := range owned {
		if !q.Has(name) {
			continue
		}
		if v := q.Get(name); !agrees(v) {
			return nil, fmt.Errorf("mysql: the DSN sets %s=%s; the store sets %s itself", name, v, name)
		} else if name == "collation" {
			collation = v
		}
		q.Del(name)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	mc, err := mysql.ParseDSN("tcp(" + host + ")/?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("mysql: the DSN's parameters: %w", err)
	}
	// Every other parameter is a session variable, which the driver sets
	// with SET name = value on every connection, all in one statement, in
	// no fixed order. A name in another case (SQL_MODE, Time_Zone) or a
	// value that is more than one (5, sql_mode='…') would set a variable
	// that the store sets or checks too, on some connections and not
	// others, whichever came last.
	for name, v := range mc.Params {
		if !sessionVarName(name) {
			return nil, fmt.Errorf("mysql: the DSN's parameter %s is neither the driver's nor a session variable in lower case", name)
		}
		if !sessionVarValue(v) {
			return nil, fmt.Errorf("mysql: the DSN's %s is not one value (a number, a word, or a string in single quotes)", name)
		}
	}
	// A DSN that makes the session's transactions read-only would have
	// every write refused, as a demoted primary's are, on every connection
	// the pool makes: a store answering 503 for ever for what is a setting.
	// Checked here, before any connection, so that the error says so.
	for _, name := range []string{"tx_read_only", "transaction_read_only"} {
		if v, ok := mc.Params[name]; ok && !isFalse(v) {
			return nil, fmt.Errorf("mysql: the DSN sets %s=%s: every write of the store would be refused as read-only; take %s out of the DSN (a server that turns read-only later, as a demoted primary does, is answered as unavailable)", name, v, name)
		}
	}
	mc.DBName = db
	if u.User != nil {
		mc.User = u.User.Username()
		mc.Passwd, _ = u.User.Password()
	}
	mc.Collation = collation
	mc.Loc = time.UTC
	mc.ParseTime = true
	mc.InterpolateParams = true // one round trip per statement, not a prepare and an execute
	mc.ClientFoundRows = true   // affected rows are the rows a guard matched, changed or not
	// A connection whose write the server refuses as read-only (a primary
	// demoted in a failover, read_only) is closed rather than given back:
	// the pool moves to the server that takes writes, as the PostgreSQL
	// store's does. The refused statement ran nothing.
	mc.RejectReadOnly = true
	mc.MultiStatements = false
	mc.Logger = &mysql.NopLogger{} // every error it would log is returned too
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	mc.Params["time_zone"] = "'+00:00'"
	// The session's sql_mode is the store's, or the DSN's when it is one
	// the store can run under: never the server's default, whatever it is.
	mode := "'" + sqlMode + "'"
	if v, ok := mc.Params["sql_mode"]; ok {
		if mode, err = dsnSQLMode(v); err != nil {
			return nil, err
		}
	}
	mc.Params["sql_mode"] = mode
	return mc, nil
}

// setTimeout sets a session variable: d when positive, else what the DSN
// says, else def. A negative d leaves the server's own setting.
func setTimeout(params map[string]string, name string, d, def time.Duration, format func(time.Duration) string) {
	switch {
	case d < 0:
		delete(params, name)
	case d > 0:
		params[name] = format(d)
	case params[name] == "":
		params[name] = format(def)
	}
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var err error
	if s.tx != nil {
		var one int
		err = s.queryRow(ctx, "SELECT 1").Scan(&one)
	} else if err = s.pool.PingContext(ctx); err != nil {
		err = unavailableWait(err)
	}
	if err != nil {
		return fmt.Errorf("mysql: ping: %w", err)
	}
	return nil
}

// ServerTime reads the server's SYSDATE(6): the time of the read, where
// NOW(6) is the start of the statement. The session's time zone is UTC.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.queryRow(ctx, "SELECT SYSDATE(6)").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("mysql: server time: %w", err)
	}
	return lapse.Truncate(t), nil
}

// Close closes the pool. On a Store bound to a transaction it does nothing:
// the transaction belongs to Tx.
func (s *Store) Close() error {
	if s.tx != nil {
		return nil
	}
	return s.pool.Close()
}
