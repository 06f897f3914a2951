package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

// txState is the state of one transaction, shared by the Stores bound to it.
type txState struct {
	// broken is the error after which the server may have rolled the
	// transaction back (a deadlock, a lost connection), or a savepoint
	// could not be rolled back to. Once set, every statement and the commit
	// fail: what the transaction wrote before it may be gone, and what it
	// would write after it must not commit alone.
	broken error
	// savepoints counts the savepoints that write holds open.
	savepoints int
	// wrote is set once a statement that may write has succeeded in the
	// transaction: until then, a Tx that InnoDB rolls back has done
	// nothing that running its fn again could do twice.
	wrote bool
}

func (t *txState) breakOn(err error) {
	if t.broken == nil {
		t.broken = err
	}
}

// querier is what a statement runs on: a connection of the pool, or the
// transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// on runs fn, one statement, on the transaction or on a connection of the
// pool. Every statement of the store passes through it, so that its errors
// are translated by unavailable; taking the connection first tells a wait
// for the pool, which is unavailable when it outlasts the caller's deadline,
// from a statement that outlasts it.
func (s *Store) on(ctx context.Context, fn func(q querier) error) error {
	if s.tx != nil {
		if s.txs.broken != nil {
			return fmt.Errorf("the transaction was rolled back: %w", unavailable(s.txs.broken))
		}
		err := fn(s.tx)
		if err != nil && s.server.endsTransaction(err) {
			s.txs.breakOn(err)
		}
		return unavailable(err)
	}
	c, err := s.pool.Conn(ctx)
	if err != nil {
		return unavailableWait(err)
	}
	defer c.Close()
	return unavailable(fn(c))
}

// exec runs a statement that returns no rows: one that may write, as the
// transaction records (txState.wrote).
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := s.command(ctx, query, args...)
	if err == nil && s.tx != nil {
		s.txs.wrote = true
	}
	return res, err
}

// command runs a statement that returns no rows without counting it as a
// write: a savepoint's.
func (s *Store) command(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := s.on(ctx, func(q querier) error {
		var err error
		res, err = q.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// affected is the number of rows a statement matched (clientFoundRows).
func affected(res sql.Result) int64 {
	n, _ := res.RowsAffected() // the driver's result always knows it
	return n
}

// scanner is a row to scan: *sql.Rows or row.
type scanner interface{ Scan(dest ...any) error }

// row is a query of one row, run when it is scanned.
type row struct {
	s     *Store
	ctx   context.Context
	query string
	args  []any
}

func (s *Store) queryRow(ctx context.Context, query string, args ...any) row {
	return row{s, ctx, query, args}
}

// Scan runs the query and scans its first row, or returns sql.ErrNoRows.
func (r row) Scan(dest ...any) error {
	return r.s.on(r.ctx, func(q querier) error { return q.QueryRowContext(r.ctx, r.query, r.args...).Scan(dest...) })
}

// queryAll runs query and reads every row with scan.
func queryAll[T any](ctx context.Context, s *Store, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := s.on(ctx, func(q querier) error {
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	return out, err
}

// Tx runs fn in one transaction on a Store bound to it, committing when fn
// returns nil. When fn returns an error Tx rolls back and returns that error
// unwrapped; when fn panics Tx rolls back and panics again.
//
// On a Store that is already bound to a transaction, Tx runs fn inside a
// savepoint of it: an error or a panic from fn rolls back to the savepoint,
// undoing what fn wrote and only that, and leaves the outer transaction
// usable, even after a statement inside fn failed; a nil from fn releases
// the savepoint and keeps fn's writes for the outer transaction to commit or
// roll back. InnoDB keeps the row locks that fn took until the outer
// transaction ends.
//
// The transaction runs at READ COMMITTED. A store method that fails inside
// it writes nothing and leaves it usable, as a savepoint of its own rolls
// back. A deadlock, for which InnoDB rolls the whole transaction back, a
// lock wait timeout on a server with innodb_rollback_on_timeout, or a lost
// connection breaks it instead, in a nested Tx too: every later call in it
// fails, and so does the commit, so that what fn writes after it cannot
// commit without what came before. A lock wait timeout otherwise undoes its
// statement alone, and a nested Tx around it goes as any failed one.
//
// A Tx that is not nested, whose fn failed with a deadlock that InnoDB
// broke by rolling its transaction back before any statement in it wrote (a
// locking read or the first insert was the victim), runs fn again in a new
// transaction, up to txDeadlockAttempts times in all: nothing of the first
// run is left to do twice, for a fn that calls the Store's methods and keeps
// what they return. PostgreSQL does not deadlock there, and its store's Tx
// runs fn once.
func (s *Store) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	if s.tx != nil {
		return s.savepoint(ctx, "mysql: ", func() error { return fn(s) })
	}
	for attempt := 1; ; attempt++ {
		again := false
		err := s.begin(ctx, "mysql: ", func(tx *Store) error {
			err := fn(tx)
			again = isDeadlock(err) && isDeadlock(tx.txs.broken) && !tx.txs.wrote
			return err
		})
		if err == nil || !again || attempt == txDeadlockAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// txDeadlockAttempts bounds how often Tx runs fn when InnoDB keeps choosing
// its transaction as a deadlock's victim before anything in it wrote. The
// creators of one key that wait for an insert of it that rolls back (an
// order whose stock was refused, created again by its client's retries)
// are such victims, all but one of them each time.
const txDeadlockAttempts = 8

// begin runs fn in a new transaction and commits it when fn returns nil.
// It returns fn's error as it is, and its own prefixed with prefix.
func (s *Store) begin(ctx context.Context, prefix string, fn func(tx *Store) error) error {
	tx, err := s.pool.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%sbegin: %w", prefix, unavailableWait(err))
	}
	bound := &Store{pool: s.pool, server: s.server, tx: tx, txs: &txState{}}
	ending := false
	defer func() {
		if !ending { // fn failed or panicked; a panic carries on after this
			_ = tx.Rollback() // fails only when the transaction already ended
		}
	}()
	if err := fn(bound); err != nil {
		return err
	}
	if err := bound.txs.broken; err != nil {
		return fmt.Errorf("%scommit: the transaction was rolled back: %w", prefix, unavailable(err))
	}
	ending = true // a failed COMMIT rolls back by itself
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%scommit: %w", prefix, unavailable(err))
	}
	return nil
}

// deadlockAttempts bounds how often a store method runs when InnoDB keeps
// choosing its transaction as a deadlock's victim.
const deadlockAttempts = 3

// write runs fn, the statements of one store method, all or nothing, and
// returns its result. Outside Tx it runs in a transaction of its own, run
// again from the start when InnoDB rolls it back to break a deadlock
// (concurrent inserts of one key can deadlock when the first rolls back);
// inside Tx it runs in a savepoint of the caller's transaction, so that a
// method that fails leaves nothing behind and the transaction usable.
func write[T any](ctx context.Context, s *Store, fn func(w *Store) (T, error)) (T, error) {
	var v T
	if s.tx != nil {
		err := s.savepoint(ctx, "", func() error {
			var err error
			v, err = fn(s)
			return err
		})
		return v, err
	}
	for attempt := 1; ; attempt++ {
		err := s.begin(ctx, "", func(tx *Store) error {
			var err error
			v, err = fn(tx)
			return err
		})
		if err == nil || !isDeadlock(err) || attempt == deadlockAttempts || ctx.Err() != nil {
			return v, err
		}
	}
}

// autocommit runs fn, one statement of a store method, and retries it when
// InnoDB chose it as a deadlock's victim. Inside Tx it runs once, in the
// caller's transaction: a failed statement undoes itself there.
func autocommit[T any](s *Store, fn func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn()
		if err == nil || s.tx != nil || !isDeadlock(err) || attempt == deadlockAttempts {
			return v, err
		}
	}
}

// savepoint runs fn inside a savepoint of the transaction and rolls back to
// it when fn fails or panics. InnoDB keeps the row locks that the rolled
// back statements took until the transaction ends. It returns fn's error as
// it is, and its own prefixed with prefix.
func (s *Store) savepoint(ctx context.Context, prefix string, fn func() error) error {
	s.txs.savepoints++
	defer func() { s.txs.savepoints-- }()
	name := "lapse_" + strconv.Itoa(s.txs.savepoints)
	if _, err := s.command(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("%ssavepoint: %w", prefix, err)
	}
	done := false
	defer func() {
		if done {
			return
		}
		ctx := context.WithoutCancel(ctx)
		if _, err := s.command(ctx, "ROLLBACK TO SAVEPOINT "+name); err != nil {
			// What fn wrote may still be in the transaction: it must not
			// commit.
			s.txs.breakOn(err)
			return
		}
		_, _ = s.command(ctx, "RELEASE SAVEPOINT "+name)
	}()
	if err := fn(); err != nil {
		return err
	}
	done = true
	if _, err := s.command(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("%srelease savepoint: %w", prefix, err)
	}
	return nil
}

// Rows of one multi-row INSERT: enough to spare round trips, few enough
// that a statement stays well under max_allowed_packet (16 MiB by default
// on MariaDB) and finishes within the statement timeout.
const (
	batchRows  = 500
	batchBytes = 1 << 20
)

// inserts writes rows with multi-row INSERTs, in the order added, flushing a
// statement when it holds batchRows rows or about batchBytes of values.
type inserts struct {
	s      *Store
	prefix string // INSERT INTO t (cols) VALUES
	row    string // (?, ?, …)
	suffix string // after the rows: ON DUPLICATE KEY UPDATE …, or none
	args   []any
	rows   int
	size   int
}

// inserts returns a writer of rows of the INSERT prefix, each with the
// placeholders of row.
func (s *Store) inserts(prefix, row string) *inserts {
	return &inserts{s: s, prefix: prefix, row: row}
}

// values is the placeholders of a row of n columns.
func values(n int) string { return "(" + marks(n) + ")" }

func (b *inserts) add(ctx context.Context, args ...any) error {
	b.args = append(b.args, args...)
	b.rows++
	for _, a := range args {
		switch v := a.(type) {
		case string:
			b.size += len(v)
		case []byte:
			b.size += len(v)
		default:
			b.size += 8
		}
	}
	if b.rows >= batchRows || b.size >= batchBytes {
		return b.flush(ctx)
	}
	return nil
}

func (b *inserts) flush(ctx context.Context) error {
	if b.rows == 0 {
		return nil
	}
	q := b.prefix + strings.TrimSuffix(strings.Repeat(b.row+", ", b.rows), ", ") + b.suffix
	_, err := b.s.exec(ctx, q, b.args...)
	b.args, b.rows, b.size = b.args[:0], 0, 0
	return err
}

// marks is n comma-separated placeholders.
func marks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// int64Args are ids as statement arguments.
func int64Args(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

func stringArgs(ss []string) []any {
	args := make([]any, len(ss))
	for i, s := range ss {
		args[i] = s
	}
	return args
}

// fail wraps err, the failure of op, with the package and op: except a
// *lapse.Error, which the store made for its caller and returns as it is.
func fail(err error, op string, args ...any) error {
	if e, ok := err.(*lapse.Error); ok {
		return e
	}
	return fmt.Errorf("mysql: %s: %w", fmt.Sprintf(op, args...), err)
}

// nullInt64 is n as stored, NULL when zero.
func nullInt64(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

func scanInt64(r scanner) (int64, error) {
	var n int64
	err := r.Scan(&n)
	return n, err
}
