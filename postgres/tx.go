package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
)

// Tx runs fn in one transaction on a Store bound to it, committing when fn
// returns nil. When fn returns an error Tx rolls back and returns that error
// unwrapped; when fn panics Tx rolls back and panics again. On a Store that
// is already bound to a transaction, Tx runs fn in that same transaction.
//
// A statement that fails inside the transaction (a unique violation, a lock
// timeout) aborts it in PostgreSQL: fn should return the error.
func (s *Store) Tx(ctx context.Context, fn func(tx lapse.Store) error) (err error) {
	if s.tx != nil {
		return fn(s)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
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
