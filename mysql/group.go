package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const groupMemberCols = "id, order_id, group_id, user_id, provider, method, amount, currency, `key`, status, attempts, " +
	"txn_id, captured_amount, captured_currency, last_error, joined_at, updated_at, charged_at"

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
// another member is an ECONFLICT error. It locks the group's order first
// (see lockOrder). An insert that meets a concurrent
// one of the same member waits for it, and the read that follows sees it
// committed.
func (s *Store) GroupMemberAdd(ctx context.Context, m *lapse.GroupMember) (*lapse.GroupMember, bool, error) {
	type result struct {
		m       *lapse.GroupMember
		created bool
	}
	got, err := write(ctx, s, func(w *Store) (result, error) {
		if err := w.lockOrder(ctx, m.OrderID); err != nil {
			return result{}, err
		}
		res, err := w.exec(ctx, "INSERT INTO group_members (order_id, group_id, user_id, provider, method, amount, "+
			"currency, `key`, status, joined_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			m.OrderID, m.GroupID, m.UserID, m.Provider, m.Method, m.Amount, m.Currency, m.Key,
			string(lapse.ChargePending), column.Micros(m.JoinedAt), column.Micros(m.JoinedAt))
		if isDuplicate(err) {
			// Either key: the read tells the member from a clash of the
			// idempotency key.
			x, err := scanGroupMember(w.queryRow(ctx, `SELECT `+groupMemberCols+` FROM group_members
				WHERE order_id = ? AND user_id = ?`, m.OrderID, m.UserID))
			if errors.Is(err, sql.ErrNoRows) {
				return result{}, lapse.Errorf(lapse.ECONFLICT, "a group member with idempotency key %q exists", m.Key)
			}
			return result{x, false}, err
		}
		if err != nil {
			return result{}, err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return result{}, err
		}
		x, err := scanGroupMember(w.queryRow(ctx, `SELECT `+groupMemberCols+` FROM group_members WHERE id = ?`, id))
		return result{x, true}, err
	})
	if err != nil {
		return nil, false, fail(err, "add group member %d/%s", m.OrderID, m.UserID)
	}
	return got.m, got.created, nil
}

// GroupMemberList returns the members of a group, by id.
func (s *Store) GroupMemberList(ctx context.Context, orderID int64) ([]*lapse.GroupMember, error) {
	ms, err := queryAll(ctx, s, scanGroupMember, `SELECT `+groupMemberCols+` FROM group_members WHERE order_id = ? ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("mysql: list group members of %d: %w", orderID, err)
	}
	return ms, nil
}

// GroupMemberGet returns the member whose charge has idempotency key key, or
// lapse.ErrGroupMemberNotFound.
func (s *Store) GroupMemberGet(ctx context.Context, key string) (*lapse.GroupMember, error) {
	m, err := scanGroupMember(s.queryRow(ctx, "SELECT "+groupMemberCols+" FROM group_members WHERE `key` = ?", key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrGroupMemberNotFound, "no group member's charge has key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get group member %q: %w", key, err)
	}
	return m, nil
}

// GroupMemberGetByTxn returns the first member whose charge is provider's
// transaction txnID, or lapse.ErrGroupMemberNotFound.
func (s *Store) GroupMemberGetByTxn(ctx context.Context, provider, txnID string) (*lapse.GroupMember, error) {
	m, err := scanGroupMember(s.queryRow(ctx, `SELECT `+groupMemberCols+` FROM group_members
		WHERE provider = ? AND txn_id = ? AND txn_id <> '' ORDER BY id LIMIT 1`, provider, txnID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrGroupMemberNotFound, "no group member's charge is transaction %q of %s", txnID, provider)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get group member by txn %s/%q: %w", provider, txnID, err)
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
	got, err := write(ctx, s, func(w *Store) (*lapse.GroupMember, error) {
		res, err := w.exec(ctx, `UPDATE group_members SET status = ?, attempts = attempts + ?,
			txn_id = IF(? <> _binary'', ?, txn_id), last_error = ?, charged_at = COALESCE(?, charged_at), updated_at = ?,
			captured_amount = IF(? <> _binary'', ?, captured_amount), captured_currency = IF(? <> _binary'', ?, captured_currency)
			WHERE id = ? AND status = ?`,
			string(p.To), attempt, p.TxnID, p.TxnID, p.Error, column.NullMicros(p.ChargedAt), column.Micros(p.At),
			p.CapturedCurrency, p.CapturedAmount, p.CapturedCurrency, p.CapturedCurrency, p.ID, string(p.From))
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, lapse.ErrStale
		}
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return nil, err
			}
		}
		return scanGroupMember(w.queryRow(ctx, `SELECT `+groupMemberCols+` FROM group_members WHERE id = ?`, p.ID))
	})
	if err != nil {
		return nil, fail(err, "update group member %d", p.ID)
	}
	return got, nil
}

// ChargeSaltKeep inserts salt as the database's charge key salt unless it
// has one, then reads the one it has. The insert waits for a concurrent one
// to end, and the read, a statement of its own, sees the winner.
func (s *Store) ChargeSaltKeep(ctx context.Context, salt string) (string, error) {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO charge_salt (id, salt) VALUES (1, ?)`, salt)
	})
	if err != nil && !isDuplicate(err) {
		return "", fmt.Errorf("mysql: keep the charge salt: %w", err)
	}
	var kept string
	if err := s.queryRow(ctx, `SELECT salt FROM charge_salt WHERE id = 1`).Scan(&kept); err != nil {
		return "", fmt.Errorf("mysql: keep the charge salt: %w", err)
	}
	return kept, nil
}
