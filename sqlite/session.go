package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

func sessionNotFound() error {
	return lapse.Refine(lapse.ErrAccessNotFound, "no such session")
}

// SessionCreate inserts s. An id that is taken (two tokens of one hash) is
// lapse.ErrAccessExists.
func (s *Store) SessionCreate(ctx context.Context, x *lapse.Session) error {
	err := s.write(ctx, func(w *writeTx) error {
		_, err := w.exec(ctx, `INSERT INTO sessions (id, operator_id, created_at, expires_at, second_factor_at, client_addr)
			VALUES (?, ?, ?, ?, ?, ?)`, x.ID, x.OperatorID, column.Micros(x.CreatedAt), column.Micros(x.ExpiresAt),
			column.ZeroMicros(x.SecondFactorAt), x.ClientAddr)
		if isUnique(err) {
			return lapse.Refine(lapse.ErrAccessExists, "a session with that id exists")
		}
		return err
	})
	if err != nil {
		return fail(err, "session create of operator %d", x.OperatorID)
	}
	return nil
}

// SessionGet returns the session with id, or lapse.ErrAccessNotFound.
func (s *Store) SessionGet(ctx context.Context, id []byte) (*lapse.Session, error) {
	var (
		x                lapse.Session
		created, expires int64
		secondFactor     sql.NullInt64
	)
	err := s.db().QueryRowContext(ctx, `SELECT id, operator_id, created_at, expires_at, second_factor_at, client_addr
		FROM sessions WHERE id = ?`, id).Scan(&x.ID, &x.OperatorID, &created, &expires, &secondFactor, &x.ClientAddr)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, sessionNotFound()
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: session get: %w", err)
	}
	x.CreatedAt, x.ExpiresAt, x.SecondFactorAt = column.Time(created), column.Time(expires), column.ZeroTime(secondFactor)
	return &x, nil
}

// SessionUpdate writes the expiry and second factor of s, or returns
// lapse.ErrAccessNotFound.
func (s *Store) SessionUpdate(ctx context.Context, x *lapse.Session) error {
	err := s.write(ctx, func(w *writeTx) error {
		return updateOne(ctx, w, sessionNotFound(), `UPDATE sessions SET expires_at = ?, second_factor_at = ? WHERE id = ?`,
			column.Micros(x.ExpiresAt), column.ZeroMicros(x.SecondFactorAt), x.ID)
	})
	if err != nil {
		return fail(err, "session update")
	}
	return nil
}

// SessionDelete deletes the session with id, if there is one.
func (s *Store) SessionDelete(ctx context.Context, id []byte) error {
	err := s.write(ctx, func(w *writeTx) error {
		_, err := w.exec(ctx, `DELETE FROM sessions WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fail(err, "session delete")
	}
	return nil
}

// SessionEndOperator ends the operator's sessions in force at at.
func (s *Store) SessionEndOperator(ctx context.Context, operatorID int64, at time.Time) error {
	err := s.write(ctx, func(w *writeTx) error {
		_, err := w.exec(ctx, `UPDATE sessions SET expires_at = ? WHERE operator_id = ? AND expires_at > ?`,
			column.Micros(at), operatorID, column.Micros(at))
		return err
	})
	if err != nil {
		return fail(err, "session end of operator %d", operatorID)
	}
	return nil
}
