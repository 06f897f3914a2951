package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lapsehq/lapse"
)

// Tx runs fn in one transaction, on a Store bound to it, and commits when fn
// returns nil. Otherwise it rolls back and returns fn's error as it is; a
// panic in fn rolls back and panics on.
//
// The transaction begins IMMEDIATE on the single writer connection, so it
// holds SQLite's write lock from the start: no other writer, in this process
// or another, runs until it ends, and what fn reads cannot change under it.
// That is how OrderClaimDue claims inside Tx. Reads through the bound Store
// see the transaction's own writes.
//
// On a Store that is already bound to a transaction, Tx runs fn in that
// transaction, inside a savepoint: an error from fn undoes what fn wrote and
// leaves the rest of the transaction to its owner.
//
// fn must use the Store it is given. A write through the outer Store would
// wait for the writer connection that this transaction holds, until ctx ends.
func (s *Store) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	if s.tx != nil {
		return savepoint(ctx, s.tx, func() error { return fn(s) })
	}
	return s.begin(ctx, func(tx *sql.Tx) error {
		return fn(&Store{writer: s.writer, gate: s.gate, priority: s.priority, reader: s.reader, ckpt: s.ckpt, stmts: s.stmts, tx: tx})
	})
}

// begin runs fn in a new transaction of the writer connection. Every write
// and every Tx begins here: a file locked by another process past the busy
// timeout is lapse.ErrStoreUnavailable.
func (s *Store) begin(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.gate.acquire(ctx, s.priority); err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	defer s.gate.release()
	// After the transaction ends, before the gate opens: the connection is
	// idle and no other writer can take it.
	defer s.stmts.prepare(ctx, s.writer)
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", unavailable(err))
	}
	ending := false
	defer func() {
		if !ending { // fn failed or panicked; a panic carries on after this
			_ = tx.Rollback() // fails only when the transaction already ended
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	ending = true // a failed COMMIT rolls back by itself
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", unavailable(err))
	}
	return nil
}

// savepoint runs fn inside a savepoint of tx and undoes what fn wrote when
// it fails or panics.
func savepoint(ctx context.Context, tx *sql.Tx, fn func() error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT lapse"); err != nil {
		return fmt.Errorf("sqlite: savepoint: %w", err)
	}
	done := false
	defer func() {
		if !done {
			// ROLLBACK TO keeps the savepoint open; RELEASE closes it. Both
			// fail only when the transaction already ended.
			ctx := context.WithoutCancel(ctx)
			_, _ = tx.ExecContext(ctx, "ROLLBACK TO lapse")
			_, _ = tx.ExecContext(ctx, "RELEASE lapse")
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	done = true
	if _, err := tx.ExecContext(ctx, "RELEASE lapse"); err != nil {
		return fmt.Errorf("sqlite: release savepoint: %w", err)
	}
	return nil
}

// write runs fn, one store method's writes, all or nothing: in a transaction
// of its own, or in a savepoint of the transaction the Store is bound to, so
// that a method that fails inside a caller's Tx leaves nothing behind either.
func (s *Store) write(ctx context.Context, fn func(w *writeTx) error) error {
	run := func(tx *sql.Tx) error {
		w := &writeTx{tx: tx, cache: s.stmts}
		defer w.close()
		return fn(w)
	}
	if s.tx != nil {
		return savepoint(ctx, s.tx, func() error { return run(s.tx) })
	}
	return s.begin(ctx, run)
}

// writeTx is a transaction with the statements prepared in it, so that a
// batch compiles each statement once rather than once a row, and the
// writer connection's statements from the cache.
type writeTx struct {
	tx    *sql.Tx
	cache *stmtCache
	stmts map[string]*sql.Stmt
}

func (w *writeTx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (w *writeTx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// stmt is query for the transaction: the writer connection's, or prepared
// in the transaction, once.
func (w *writeTx) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if cached := w.cache.get(query); cached != nil {
		st = w.tx.StmtContext(ctx, cached)
	} else {
		var err error
		if st, err = w.tx.PrepareContext(ctx, query); err != nil {
			return nil, err
		}
	}
	if w.stmts == nil {
		w.stmts = map[string]*sql.Stmt{}
	}
	w.stmts[query] = st
	return st, nil
}

func (w *writeTx) close() {
	for _, st := range w.stmts {
		_ = st.Close() // closing a prepared statement of a live connection does not fail
	}
}
