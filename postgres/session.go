package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

// SessionCreate inserts s. A session whose id exists is lapse.ErrAccessExists
// (a token is random: it means a bug), raising no SQL error; one of an
// operator that does not exist is lapse.ErrAccessNotFound, which the
// foreign key raises.
func (s *Store) SessionCreate(ctx context.Context, ss *lapse.Session) error {
	tag, err := s.db.Exec(ctx, `INSERT INTO sessions (id, operator_id, created_at, expires_at, second_factor_at, client_addr)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`,
		ss.ID, ss.OperatorID, ss.CreatedAt, ss.ExpiresAt, nullTime(ss.SecondFactorAt), ss.ClientAddr)
	if isForeignKeyViolation(err, "sessions_operator_id_fkey") {
		return fmt.Errorf("%w: %w", lapse.Refine(lapse.ErrAccessNotFound, "no operator with id %d", ss.OperatorID), err)
	}
	if err != nil {
		return fmt.Errorf("postgres: create session of operator %d: %w", ss.OperatorID, err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Refine(lapse.ErrAccessExists, "the session exists")
	}
	return nil
}

// SessionGet returns the session with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) SessionGet(ctx context.Context, id []byte) (*lapse.Session, error) {
	var (
		ss           lapse.Session
		secondFactor *time.Time
	)
	err := s.db.QueryRow(ctx, `SELECT id, operator_id, created_at, expires_at, second_factor_at, client_addr
		FROM sessions WHERE id = $1`, id).Scan(&ss.ID, &ss.OperatorID, &ss.CreatedAt, &ss.ExpiresAt, &secondFactor, &ss.ClientAddr)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no such session")
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get session: %w", err)
	}
	ss.CreatedAt, ss.ExpiresAt, ss.SecondFactorAt = ss.CreatedAt.UTC(), ss.ExpiresAt.UTC(), timeOf(secondFactor)
	return &ss, nil
}

// SessionUpdate writes the session's expiry and second factor time; a
// missing session is lapse.ErrAccessNotFound.
func (s *Store) SessionUpdate(ctx context.Context, ss *lapse.Session) error {
	tag, err := s.db.Exec(ctx, `UPDATE sessions SET expires_at = $2, second_factor_at = $3 WHERE id = $1`,
		ss.ID, ss.ExpiresAt, nullTime(ss.SecondFactorAt))
	if err != nil {
		return fmt.Errorf("postgres: update session: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Refine(lapse.ErrAccessNotFound, "no such session")
	}
	return nil
}

// SessionDelete deletes the session with id; a missing one is no error.
func (s *Store) SessionDelete(ctx context.Context, id []byte) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, id); err != nil {
		return fmt.Errorf("postgres: delete session: %w", err)
	}
	return nil
}

// SessionEndOperator ends the operator's sessions in force at at.
func (s *Store) SessionEndOperator(ctx context.Context, operatorID int64, at time.Time) error {
	if _, err := s.db.Exec(ctx, `UPDATE sessions SET expires_at = $2 WHERE operator_id = $1 AND expires_at > $2`,
		operatorID, at); err != nil {
		return fmt.Errorf("postgres: end sessions of operator %d: %w", operatorID, err)
	}
	return nil
}
