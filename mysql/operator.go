package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const operatorCols = `id, name, role, password_hash, totp_secret, failed_logins, locked_until, last_totp_step, lang,
	time_zone, created_at, disabled_at`

func scanOperator(r scanner) (*lapse.Operator, error) {
	var (
		o                lapse.Operator
		locked, disabled sql.NullInt64
		created          int64
	)
	err := r.Scan(&o.ID, &o.Name, &o.Role, &o.PasswordHash, &o.TOTPSecret, &o.FailedLogins, &locked, &o.LastTOTPStep,
		&o.Lang, &o.TimeZone, &created, &disabled)
	if err != nil {
		return nil, err
	}
	o.LockedUntil, o.CreatedAt, o.DisabledAt = column.ZeroTime(locked), column.Time(created), column.ZeroTime(disabled)
	return &o, nil
}

// OperatorCreate inserts o and returns it with its id, or returns an error
// that is lapse.ErrAccessExists when its name is taken.
func (s *Store) OperatorCreate(ctx context.Context, o *lapse.Operator) (*lapse.Operator, error) {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO operators (name, role, password_hash, totp_secret, failed_logins, locked_until,
			last_totp_step, lang, time_zone, created_at, disabled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			o.Name, o.Role, o.PasswordHash, o.TOTPSecret, o.FailedLogins, column.ZeroMicros(o.LockedUntil), o.LastTOTPStep,
			o.Lang, o.TimeZone, column.Micros(o.CreatedAt), column.ZeroMicros(o.DisabledAt))
	})
	if isDuplicateKey(err, "operators_name_key") {
		return nil, lapse.Refine(lapse.ErrAccessExists, "an operator named %q exists", o.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: create operator %s: %w", o.Name, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, fmt.Errorf("mysql: create operator %s: %w", o.Name, err)
	}
	out := *o
	out.ID = id
	out.LockedUntil, out.CreatedAt, out.DisabledAt = kept(o.LockedUntil), kept(o.CreatedAt), kept(o.DisabledAt)
	return &out, nil
}

// OperatorGet returns the operator named name, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) OperatorGet(ctx context.Context, name string) (*lapse.Operator, error) {
	return s.operatorGet(ctx, name, "")
}

// OperatorLock is OperatorGet with a locking read inside Tx: the row stays
// locked until the transaction ends, and the read, waiting for a holder
// before it, sees what that holder committed (READ COMMITTED).
func (s *Store) OperatorLock(ctx context.Context, name string) (*lapse.Operator, error) {
	if s.tx == nil {
		return s.operatorGet(ctx, name, "")
	}
	return s.operatorGet(ctx, name, " FOR UPDATE")
}

func (s *Store) operatorGet(ctx context.Context, name, lock string) (*lapse.Operator, error) {
	o, err := scanOperator(s.queryRow(ctx, `SELECT `+operatorCols+` FROM operators WHERE name = ?`+lock, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, accessNotFound("no operator named %q", name)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get operator %s: %w", name, err)
	}
	return o, nil
}

// OperatorList returns every operator by id.
func (s *Store) OperatorList(ctx context.Context) ([]*lapse.Operator, error) {
	ops, err := queryAll(ctx, s, scanOperator, `SELECT `+operatorCols+` FROM operators ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("mysql: list operators: %w", err)
	}
	return ops, nil
}

// OperatorUpdate writes o to the operator with o.ID, or returns an error
// wrapping lapse.ErrAccessNotFound when there is none.
func (s *Store) OperatorUpdate(ctx context.Context, o *lapse.Operator) error {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `UPDATE operators SET role = ?, password_hash = ?, totp_secret = ?, failed_logins = ?,
			locked_until = ?, last_totp_step = ?, lang = ?, time_zone = ?, disabled_at = ? WHERE id = ?`,
			o.Role, o.PasswordHash, o.TOTPSecret, o.FailedLogins, column.ZeroMicros(o.LockedUntil), o.LastTOTPStep, o.Lang,
			o.TimeZone, column.ZeroMicros(o.DisabledAt), o.ID)
	})
	if err != nil {
		return fmt.Errorf("mysql: update operator %d: %w", o.ID, err)
	}
	if affected(res) == 0 {
		return accessNotFound("no operator with id %d", o.ID)
	}
	return nil
}

// OperatorCount counts the operators whose disabled_at is NULL.
func (s *Store) OperatorCount(ctx context.Context) (int64, error) {
	n, err := scanInt64(s.queryRow(ctx, `SELECT count(*) FROM operators WHERE disabled_at IS NULL`))
	if err != nil {
		return 0, fmt.Errorf("mysql: count operators: %w", err)
	}
	return n, nil
}
