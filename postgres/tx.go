package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// Tx runs fn in one transaction on a Store bound to it, committing when fn
// returns nil. When fn returns an error Tx rolls back and returns that error
// unwrapped; when fn panics Tx rolls back and panics again.
//
// On a Store that is already bound to a transaction, Tx runs fn inside a
// savepoint of it (pgx's nested transaction): an error or a panic from fn
// undoes what fn wrote, and only that, and leaves the outer transaction
// usable, even after a statement inside fn failed; a nil from fn keeps its
// writes for the outer transaction to commit or roll back.
//
// A statement that fails outside a nested Tx (a unique violation, a lock
// timeout) aborts the transaction in PostgreSQL: fn should return the error.
// The store's documented refusals (lapse.ErrStale, lapse.ErrStockShort, …)
// are decided without a failing statement and leave it usable.
func (s *Store) Tx(ctx context.Context, fn func(tx lapse.Store) error) (err error) {
	var tx pgx.Tx
	if s.tx != nil {
		tx, err = s.tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("postgres: savepoint: %w", unavailable(err))
		}
	} else if tx, err = s.pool.Begin(ctx); err != nil {
		return fmt.Errorf("postgres: begin: %w", unavailable(err))
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		// Roll back even when ctx is done, so the connection goes back to
		// the pool clean rather than being closed.
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && err != nil {
			err = errors.Join(err, fmt.Errorf("postgres: rollback: %w", rbErr))
		}
	}()
	if err := fn(&Store{pool: s.pool, db: conn{tx}, tx: tx}); err != nil {
		return err
	}
	committed = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: commit: %w", unavailable(err))
	}
	return nil
}
