package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const groupMemberCols = `id, order_id, group_id, user_id, provider, method, amount, currency, key, status, attempts,
	txn_id, captured_amount, captured_currency, last_error, joined_at, updated_at, charged_at`

func scanGroupMember(r scanner) (*lapse.GroupMember, error) {
	var (
		m               lapse.GroupMember
		joined, updated int64
		charged         sql.NullInt64
	)
	err := r.Scan(&m.ID, &m.OrderID, &m.GroupID, &m.UserID, &m.Provider, &m.Method, &m.Amount, &m.Currency, &m.Key,
		(*string)(&m.Status), &m.Attempts, &m.TxnID, &m.CapturedAmount, &m.CapturedCurrency, &m.LastError, &joined, &updated, &charged)
	if err != nil {
		return nil, err
	}
	m.JoinedAt, m.UpdatedAt, m.ChargedAt = column.Time(joined), column.Time(updated), column.NullTime(charged)
	return &m, nil
}

// GroupMemberAdd inserts m, pending, with no attempts and UpdatedAt its
// JoinedAt, unless the group has a member with its UserID: then it writes
// nothing and returns that member, with created=false. Its Key taken by
// another member is an ECONFLICT error.
func (s *Store) GroupMemberAdd(ctx context.Context, m *lapse.GroupMember) (*lapse.GroupMember, bool, error) {
	var got *lapse.GroupMember
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		// No conflict target: a clash on the key, too, writes nothing rather
		// than fail, and the read below tells the two apart.
		got, err = scanGroupMember(w.tx.QueryRowContext(ctx, `INSERT INTO group_members (order_id, group_id, user_id,
			provider, method, amount, currency, key, status, joined_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING `+groupMemberCols,
			m.OrderID, m.GroupID, m.UserID, m.Provider, m.Method, m.Amount, m.Currency, m.Key,
			string(lapse.ChargePending), column.Micros(m.JoinedAt), column.Micros(m.JoinedAt)))
		if errors.Is(err, sql.ErrNoRows) {
			got, err = scanGroupMember(w.tx.QueryRowContext(ctx, `SELECT `+groupMemberCols+` FROM group_members
				WHERE order_id = ? AND user_id = ?`, m.OrderID, m.UserID))
			if errors.Is(err, sql.ErrNoRows) {
				return lapse.Errorf(lapse.ECONFLICT, "a group member with idempotency key %q exists", m.Key)
			}
			return err
		}
		created = err == nil
		return err
	})
	if err != nil {
		return nil, false, fail(err, "group member add %d/%s", m.OrderID, m.UserID)
	}
	return got, created, nil
}

// GroupMemberList returns the members of a group, by id.
func (s *Store) GroupMemberList(ctx context.Context, orderID int64) ([]*lapse.GroupMember, error) {
	ms, err := queryAll(ctx, s.db(), scanGroupMember, `SELECT `+groupMemberCols+` FROM group_members
		WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: group member list %d: %w", orderID, err)
	}
	return ms, nil
}

// GroupMemberGet returns the member whose charge has idempotency key key, or
// lapse.ErrGroupMemberNotFound.
func (s *Store) GroupMemberGet(ctx context.Context, key string) (*lapse.GroupMember, error) {
	m, err := scanGroupMember(s.db().QueryRowContext(ctx, `SELECT `+groupMemberCols+` FROM group_members WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrGroupMemberNotFound, "no group member's charge has key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: group member get %q: %w", key, err)
	}
	return m, nil
}

// GroupMemberGetByTxn returns the first member whose charge is provider's
// transaction txnID, or lapse.ErrGroupMemberNotFound.
func (s *Store) GroupMemberGetByTxn(ctx context.Context, provider, txnID string) (*lapse.GroupMember, error) {
	m, err := scanGroupMember(s.db().QueryRowContext(ctx, `SELECT `+groupMemberCols+` FROM group_members
		WHERE provider = ? AND txn_id = ? AND txn_id <> '' ORDER BY id LIMIT 1`, provider, txnID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrGroupMemberNotFound, "no group member's charge is transaction %q of %s", txnID, provider)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: group member get by txn %s/%q: %w", provider, txnID, err)
	}
	return m, nil
}

// GroupMemberUpdate moves a member's charge from p.From to p.To, setting the
// fields p names, with p.Review, or returns lapse.ErrStale and writes
// nothing.
func (s *Store) GroupMemberUpdate(ctx context.Context, p *lapse.GroupMemberUpdateParams) (*lapse.GroupMember, error) {
	attempt := 0
	if p.Attempt {
		attempt = 1
	}
	var got *lapse.GroupMember
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanGroupMember(w.tx.QueryRowContext(ctx, `UPDATE group_members SET status = ?1,
			attempts = attempts + ?2, txn_id = CASE WHEN ?3 <> '' THEN ?3 ELSE txn_id END, last_error = ?4,
			charged_at = coalesce(?5, charged_at), updated_at = ?6,
			captured_amount = CASE WHEN ?10 <> '' THEN ?9 ELSE captured_amount END,
			captured_currency = CASE WHEN ?10 <> '' THEN ?10 ELSE captured_currency END
			WHERE id = ?7 AND status = ?8 RETURNING `+groupMemberCols,
			string(p.To), attempt, p.TxnID, p.Error, column.NullMicros(p.ChargedAt), column.Micros(p.At), p.ID, string(p.From),
			p.CapturedAmount, p.CapturedCurrency))
		if errors.Is(err, sql.ErrNoRows) {
			return lapse.ErrStale
		}
		if err != nil || p.Review == nil {
			return err
		}
		return w.review(ctx, p.Review)
	})
	if err != nil {
		return nil, fail(err, "group member update %d", p.ID)
	}
	return got, nil
}

// ChargeSaltKeep inserts salt as the database's charge key salt unless it
// has one, and returns the one it has, both under the write lock.
func (s *Store) ChargeSaltKeep(ctx context.Context, salt string) (string, error) {
	var kept string
	err := s.write(ctx, func(w *writeTx) error {
		if _, err := w.exec(ctx, `INSERT INTO charge_salt (id, salt) VALUES (1, ?) ON CONFLICT DO NOTHING`, salt); err != nil {
			return err
		}
		return w.tx.QueryRowContext(ctx, `SELECT salt FROM charge_salt WHERE id = 1`).Scan(&kept)
	})
	if err != nil {
		return "", fail(err, "charge salt keep")
	}
	return kept, nil
}
