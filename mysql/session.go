package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// SessionCreate inserts s. An id that exists, which a token's hash should
// never meet, is an error that is lapse.ErrAccessExists; an operator that
// does not exist is an error wrapping lapse.ErrAccessNotFound.
func (s *Store) SessionCreate(ctx context.Context, ss *lapse.Session) error {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO operator_sessions (id, operator_id, created_at, expires_at, second_factor_at, client_addr)
			VALUES (?, ?, ?, ?, ?, ?)`, ss.ID, ss.OperatorID, column.Micros(ss.CreatedAt), column.Micros(ss.ExpiresAt),
			column.ZeroMicros(ss.SecondFactorAt), ss.ClientAddr)
	})
	if isDuplicate(err) {
		return lapse.Refine(lapse.ErrAccessExists, "a session with that id exists")
	}
	if errorNumber(err) == 1452 { // ER_NO_REFERENCED_ROW_2: operator_sessions_operator_fk
		return accessNotFound("no operator with id %d", ss.OperatorID)
	}
	if err != nil {
		return fmt.Errorf("mysql: create session of operator %d: %w", ss.OperatorID, err)
	}
	return nil
}

// SessionGet returns the session with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) SessionGet(ctx context.Context, id []byte) (*lapse.Session, error) {
	var (
		ss               lapse.Session
		created, expires int64
		secondFactor     sql.NullInt64
	)
	err := s.queryRow(ctx, `SELECT id, operator_id, created_at, expires_at, second_factor_at, client_addr
		FROM operator_sessions WHERE id = ?`, id).Scan(&ss.ID, &ss.OperatorID, &created, &expires, &secondFactor, &ss.ClientAddr)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, accessNotFound("no such session")
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get session: %w", err)
	}
	ss.CreatedAt, ss.ExpiresAt, ss.SecondFactorAt = column.Time(created), column.Time(expires), column.ZeroTime(secondFactor)
	return &ss, nil
}

// SessionUpdate writes the session's expiry and second factor, or returns
// an error wrapping lapse.ErrAccessNotFound when there is no session with
// s.ID.
func (s *Store) SessionUpdate(ctx context.Context, ss *lapse.Session) error {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `UPDATE operator_sessions SET expires_at = ?, second_factor_at = ? WHERE id = ?`,
			column.Micros(ss.ExpiresAt), column.ZeroMicros(ss.SecondFactorAt), ss.ID)
	})
	if err != nil {
		return fmt.Errorf("mysql: update session of operator %d: %w", ss.OperatorID, err)
	}
	if affected(res) == 0 {
		return accessNotFound("no such session")
	}
	return nil
}

// SessionDelete deletes the session with id; none is not an error.
func (s *Store) SessionDelete(ctx context.Context, id []byte) error {
	if _, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `DELETE FROM operator_sessions WHERE id = ?`, id)
	}); err != nil {
		return fmt.Errorf("mysql: delete session: %w", err)
	}
	return nil
}

// SessionEndOperator ends the operator's sessions in force at at.
func (s *Store) SessionEndOperator(ctx context.Context, operatorID int64, at time.Time) error {
	if _, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `UPDATE operator_sessions SET expires_at = ? WHERE operator_id = ? AND expires_at > ?`,
			column.Micros(at), operatorID, column.Micros(at))
	}); err != nil {
		return fmt.Errorf("mysql: end the sessions of operator %d: %w", operatorID, err)
	}
	return nil
}
