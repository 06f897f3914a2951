// Package sqlite is the SQLite store of Lapse: a lapse.Store kept in one
// database file, through the pure Go driver modernc.org/sqlite.
//
// SQLite lets one connection write at a time. The store therefore keeps two
// pools on the file: a writer of exactly one connection, whose transactions
// begin IMMEDIATE and so take the write lock at once, and a pool of readers.
// Every write, a single statement too, runs on the writer, so the store's own
// writes queue in Go rather than fail with SQLITE_BUSY; in WAL mode readers
// see the last commit and never wait for the writer. The busy timeout only
// matters when another process opens the same file.
//
// Times are stored as INTEGER unix microseconds, the precision lapse.Truncate
// keeps, and read back in UTC, so a time read back equals the time written.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

var _ lapse.Store = (*Store)(nil)

// DefaultBusyTimeout is Config.BusyTimeout when it is zero.
const DefaultBusyTimeout = 5 * time.Second

// Config tunes a Store. The zero value is ready to use.
type Config struct {
	// BusyTimeout is how long a statement waits for a lock that another
	// process holds on the same file before it fails. Default
	// DefaultBusyTimeout.
	BusyTimeout time.Duration

	// Readers is the most connections that read outside transactions at
	// once. Default 4, or GOMAXPROCS when that is larger.
	Readers int
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.BusyTimeout < 0:
		return c, lapse.FieldError("busy_timeout", "must not be negative")
	case c.Readers < 0:
		return c, lapse.FieldError("readers", "must not be negative")
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.Readers == 0 {
		c.Readers = max(4, runtime.GOMAXPROCS(0))
	}
	return c, nil
}

// Store is a lapse.Store in an SQLite database file. It is safe for
// concurrent use. The Store that Tx passes to its function is bound to that
// transaction and must not outlive it.
type Store struct {
	writer   *sql.DB    // one connection: every write runs on it
	gate     *writeGate // the queue for writer
	priority bool       // writes go ahead of the others' (Priority)
	reader   *sql.DB    // reads outside transactions
	ckpt     *checkpointer
	stmts    *stmtCache // statements the writer connection keeps prepared
	tx       *sql.Tx    // set on a Store bound to a transaction
}

// Open opens the database file at path, creating it when missing, and checks
// that it answers. It does not change the schema: call Migrate.
//
// path is a file name, not a "file:" URI: the store sets the URI's
// parameters itself. ":memory:" is refused, because each connection of the
// store would get a database of its own.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, lapse.FieldError("path", "must name a database file, not %q", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := createPrivate(abs); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}

	writer, err := openPool(ctx, dsn(abs, cfg, "_txlock", "immediate"), 1)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// SQLite keeps the old journal mode, without an error, where it cannot
	// use WAL (some network file systems). Without WAL a reader blocks the
	// writer, and the store's two pools would fail each other with
	// SQLITE_BUSY.
	var mode string
	if err := writer.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		_ = writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: journal mode is %s, not WAL", path, mode)
	}
	// The writer connected first and switched the file to WAL, so readers
	// open a database that is already in WAL mode. query_only makes a write
	// that bypassed the writer fail at once rather than contend for the lock.
	reader, err := openPool(ctx, dsn(abs, cfg, "_query_only", "1"), cfg.Readers)
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	ckpt, err := startCheckpointer(ctx, dsn(abs, cfg, "_txlock", "deferred"), checkpointInterval)
	if err != nil {
		_ = errors.Join(reader.Close(), writer.Close())
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return &Store{writer: writer, gate: &writeGate{}, reader: reader, ckpt: ckpt, stmts: newStmtCache()}, nil
}

// dsn is the driver's name for the file at the absolute path abs. The
// pragmas travel in the name so that every connection a pool opens, now or
// after one is recycled, gets them.
func dsn(abs string, cfg Config, key, value string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// The checkpointer copies the WAL into the file in the background; a
	// writer checkpoints itself only when the WAL has grown this far.
	q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", fallbackCheckpointPages))
	q.Add("_pragma", "foreign_keys(1)")
	// A statement that writes many rows, and a store method inside a
	// caller's Tx (a savepoint), copy each page to a journal of their own
	// before they first change it, so that a failure undoes them alone. In
	// memory, not a temporary file: a page costs a copy, not a write. It
	// holds pages the transaction changed, and the database's durability
	// does not depend on it.
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set(key, value)
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter
	}
	// A file: URI, so that ? # and % in the path are escaped, not parsed.
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

func openPool(ctx context.Context, dsn string, conns int) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// Ping checks that the database answers a read. It does not wait for the
// writer, which a long transaction may hold.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db().QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// serverTimeLayout is how SQLite's strftime('%Y-%m-%d %H:%M:%f') writes a
// time.
const serverTimeLayout = "2006-01-02 15:04:05.000"

// ServerTime reads SQLite's 'now', which is this process's clock to the
// millisecond: an embedded database has no clock of its own.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	var v string
	if err := s.db().QueryRowContext(ctx, "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("sqlite: server time: %w", err)
	}
	t, err := time.Parse(serverTimeLayout, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: server time %q: %w", v, err)
	}
	return t.UTC(), nil
}

// Priority returns a Store on the same file and connections whose writes
// wait for the writer ahead of the others': the store of the deadline
// engine's and the deliverer's work (engine.Config.WorkStore), so that a
// flood of API writes does not make due orders close late. When both kinds
// of writer wait they take turns, so neither starves. Close it or s, not
// both.
func (s *Store) Priority() *Store {
	p := *s
	p.priority = true
	return &p
}

// Close closes both pools. On a Store bound to a transaction it does
// nothing: Tx ends the transaction, and the pools belong to the outer Store.
func (s *Store) Close() error {
	if s.tx != nil {
		return nil
	}
	return errors.Join(s.ckpt.close(), s.reader.Close(), s.stmts.close(), s.writer.Close())
}

// queryer is what reads run on: the reader pool, or the transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// db is where a read runs. Inside a transaction it must be the transaction,
// to see its writes and, for a claim, to read under its write lock.
func (s *Store) db() queryer {
	if s.tx != nil {
		return s.tx
	}
	return s.reader
}

// fail wraps err, the failure of op, with the package and op: except a
// *lapse.Error, which the store made for its caller and returns as it is.
func fail(err error, op string, args ...any) error {
	if e, ok := err.(*lapse.Error); ok {
		return e
	}
	return fmt.Errorf("sqlite: %s: %w", fmt.Sprintf(op, args...), err)
}

// nullInt64 is n as stored, NULL when zero.
func nullInt64(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

// queryAll runs query on q and reads every row with scan.
func queryAll[T any](ctx context.Context, q queryer, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// createPrivate creates the database file at path, empty (which SQLite
// takes for a new database), readable and writable by its owner only, when
// there is none: it holds every operator's second-factor secret and every
// order. SQLite would create it under the umask, usually readable by
// everyone, and makes its -wal and -shm files with the mode of the
// database's. An existing file keeps its mode.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}
