package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const operatorColumns = `id, name, role, password_hash, totp_secret, failed_logins, locked_until, last_totp_step,
	lang, time_zone, created_at, disabled_at`

func scanOperator(row pgx.Row) (*lapse.Operator, error) {
	var (
		o                lapse.Operator
		locked, disabled *time.Time
	)
	err := row.Scan(&o.ID, &o.Name, &o.Role, &o.PasswordHash, &o.TOTPSecret, &o.FailedLogins, &locked, &o.LastTOTPStep,
		&o.Lang, &o.TimeZone, &o.CreatedAt, &disabled)
	if err != nil {
		return nil, err
	}
	o.LockedUntil, o.CreatedAt, o.DisabledAt = timeOf(locked), o.CreatedAt.UTC(), timeOf(disabled)
	return &o, nil
}

// OperatorCreate inserts o unless its name is taken: then it writes nothing
// and returns lapse.ErrAccessExists, raising no SQL error, as APIKeyCreate
// does.
func (s *Store) OperatorCreate(ctx context.Context, o *lapse.Operator) (*lapse.Operator, error) {
	got, err := scanOperator(s.db.QueryRow(ctx, `INSERT INTO operators (name, role, password_hash, totp_secret,
		failed_logins, locked_until, last_totp_step, lang, time_zone, created_at, disabled_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (name) DO NOTHING RETURNING `+operatorColumns,
		o.Name, o.Role, o.PasswordHash, o.TOTPSecret, o.FailedLogins, nullTime(o.LockedUntil), o.LastTOTPStep,
		o.Lang, o.TimeZone, o.CreatedAt, nullTime(o.DisabledAt)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessExists, "an operator named %q exists", o.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: create operator %s: %w", o.Name, err)
	}
	return got, nil
}

// OperatorGet returns the operator named name, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) OperatorGet(ctx context.Context, name string) (*lapse.Operator, error) {
	return s.operatorGet(ctx, name, "")
}

// OperatorLock reads the operator's row FOR UPDATE inside Tx: a concurrent
// locker waits until this transaction ends, and then reads the row as it
// committed it. Outside Tx it is OperatorGet.
func (s *Store) OperatorLock(ctx context.Context, name string) (*lapse.Operator, error) {
	if s.tx == nil {
		return s.operatorGet(ctx, name, "")
	}
	return s.operatorGet(ctx, name, " FOR UPDATE")
}

func (s *Store) operatorGet(ctx context.Context, name, lock string) (*lapse.Operator, error) {
	o, err := scanOperator(s.db.QueryRow(ctx, `SELECT `+operatorColumns+` FROM operators WHERE name = $1`+lock, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no operator named %q", name)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get operator %s: %w", name, err)
	}
	return o, nil
}

// OperatorList returns every operator by id.
func (s *Store) OperatorList(ctx context.Context) ([]*lapse.Operator, error) {
	rows, err := s.db.Query(ctx, `SELECT `+operatorColumns+` FROM operators ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list operators: %w", err)
	}
	os, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Operator, error) { return scanOperator(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list operators: %w", err)
	}
	return os, nil
}

// OperatorUpdate writes o to the operator with o.ID but its name and
// creation time; a missing operator is lapse.ErrAccessNotFound.
func (s *Store) OperatorUpdate(ctx context.Context, o *lapse.Operator) error {
	tag, err := s.db.Exec(ctx, `UPDATE operators SET role = $2, password_hash = $3, totp_secret = $4, failed_logins = $5,
		locked_until = $6, last_totp_step = $7, lang = $8, time_zone = $9, disabled_at = $10 WHERE id = $1`,
		o.ID, o.Role, o.PasswordHash, o.TOTPSecret, o.FailedLogins, nullTime(o.LockedUntil), o.LastTOTPStep,
		o.Lang, o.TimeZone, nullTime(o.DisabledAt))
	if err != nil {
		return fmt.Errorf("postgres: update operator %d: %w", o.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Refine(lapse.ErrAccessNotFound, "no operator with id %d", o.ID)
	}
	return nil
}

// OperatorCount counts the operators that are not disabled.
func (s *Store) OperatorCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM operators WHERE disabled_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count operators: %w", err)
	}
	return n, nil
}
