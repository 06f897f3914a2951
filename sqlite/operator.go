package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const operatorCols = `id, name, role, password_hash, totp_secret, failed_logins, locked_until, last_totp_step,
	lang, time_zone, created_at, disabled_at`

func scanOperator(r scanner) (*lapse.Operator, error) {
	var (
		o                     lapse.Operator
		created               int64
		lockedUntil, disabled sql.NullInt64
	)
	err := r.Scan(&o.ID, &o.Name, &o.Role, &o.PasswordHash, &o.TOTPSecret, &o.FailedLogins, &lockedUntil, &o.LastTOTPStep,
		&o.Lang, &o.TimeZone, &created, &disabled)
	if err != nil {
		return nil, err
	}
	o.LockedUntil, o.CreatedAt, o.DisabledAt = column.ZeroTime(lockedUntil), column.Time(created), column.ZeroTime(disabled)
	return &o, nil
}

// OperatorCreate inserts o; a taken name meets the unique key:
// lapse.ErrAccessExists.
func (s *Store) OperatorCreate(ctx context.Context, o *lapse.Operator) (*lapse.Operator, error) {
	var got *lapse.Operator
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanOperator(w.tx.QueryRowContext(ctx, `INSERT INTO operators (name, role, password_hash, totp_secret,
			failed_logins, locked_until, last_totp_step, lang, time_zone, created_at, disabled_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+operatorCols,
			o.Name, o.Role, o.PasswordHash, o.TOTPSecret, o.FailedLogins, column.ZeroMicros(o.LockedUntil), o.LastTOTPStep,
			o.Lang, o.TimeZone, column.Micros(o.CreatedAt), column.ZeroMicros(o.DisabledAt)))
		if isUnique(err) {
			return lapse.Refine(lapse.ErrAccessExists, "an operator named %q exists", o.Name)
		}
		return err
	})
	if err != nil {
		return nil, fail(err, "operator create %s", o.Name)
	}
	return got, nil
}

// OperatorGet returns the operator named name, or lapse.ErrAccessNotFound.
func (s *Store) OperatorGet(ctx context.Context, name string) (*lapse.Operator, error) {
	o, err := scanOperator(s.db().QueryRowContext(ctx, `SELECT `+operatorCols+` FROM operators WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no operator named %q", name)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: operator get %s: %w", name, err)
	}
	return o, nil
}

// OperatorLock is OperatorGet. SQLite has no row locks; inside Tx the
// transaction holds the database's only write lock from its start, which is
// stronger: nothing changes the operator until it ends.
func (s *Store) OperatorLock(ctx context.Context, name string) (*lapse.Operator, error) {
	return s.OperatorGet(ctx, name)
}

// OperatorList returns every operator by id.
func (s *Store) OperatorList(ctx context.Context) ([]*lapse.Operator, error) {
	ops, err := queryAll(ctx, s.db(), scanOperator, `SELECT `+operatorCols+` FROM operators ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: operator list: %w", err)
	}
	return ops, nil
}

// OperatorUpdate writes o's mutable fields, or returns
// lapse.ErrAccessNotFound.
func (s *Store) OperatorUpdate(ctx context.Context, o *lapse.Operator) error {
	err := s.write(ctx, func(w *writeTx) error {
		return updateOne(ctx, w, lapse.Refine(lapse.ErrAccessNotFound, "no operator with id %d", o.ID),
			`UPDATE operators SET role = ?, password_hash = ?, totp_secret = ?, failed_logins = ?, locked_until = ?,
				last_totp_step = ?, lang = ?, time_zone = ?, disabled_at = ? WHERE id = ?`,
			o.Role, o.PasswordHash, o.TOTPSecret, o.FailedLogins, column.ZeroMicros(o.LockedUntil),
			o.LastTOTPStep, o.Lang, o.TimeZone, column.ZeroMicros(o.DisabledAt), o.ID)
	})
	if err != nil {
		return fail(err, "operator update %d", o.ID)
	}
	return nil
}

// OperatorCount counts the operators with no disabled_at.
func (s *Store) OperatorCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db().QueryRowContext(ctx, `SELECT count(*) FROM operators WHERE disabled_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: operator count: %w", err)
	}
	return n, nil
}
