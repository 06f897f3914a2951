package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const groupMemberColumns = `id, order_id, group_id, user_id, provider, method, amount, currency, key, status, attempts,
	txn_id, captured_amount, captured_currency, last_error, joined_at, updated_at, charged_at`

func scanGroupMember(row pgx.Row) (*lapse.GroupMember, error) {
	var m lapse.GroupMember
	err := row.Scan(&m.ID, &m.OrderID, &m.GroupID, &m.UserID, &m.Provider, &m.Method, &m.Amount, &m.Currency, &m.Key,
		&m.Status, &m.Attempts, &m.TxnID, &m.CapturedAmount, &m.CapturedCurrency, &m.LastError, &m.JoinedAt, &m.UpdatedAt, &m.ChargedAt)
	if err != nil {
		return nil, err
	}
	m.JoinedAt, m.UpdatedAt, m.ChargedAt = m.JoinedAt.UTC(), m.UpdatedAt.UTC(), utcPtr(m.ChargedAt)
	return &m, nil
}

// GroupMemberAdd inserts m, pending, with no attempts and UpdatedAt its
// JoinedAt, unless the group has a member with its UserID: then it writes
// nothing and returns that member, with created=false. Its Key taken by
// another member is an ECONFLICT error. Neither raises an SQL error, so
// inside Tx the transaction stays usable.
func (s *Store) GroupMemberAdd(ctx context.Context, m *lapse.GroupMember) (*lapse.GroupMember, bool, error) {
	// No conflict target: a clash on the key, too, writes nothing rather than
	// fail, and the read below tells the two apart.
	got, err := scanGroupMember(s.db.QueryRow(ctx, `INSERT INTO group_members (order_id, group_id, user_id, provider,
		method, amount, currency, key, status, joined_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) ON CONFLICT DO NOTHING
		RETURNING `+groupMemberColumns,
		m.OrderID, m.GroupID, m.UserID, m.Provider, m.Method, m.Amount, m.Currency, m.Key, lapse.ChargePending, m.JoinedAt))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("postgres: add group member %d/%s: %w", m.OrderID, m.UserID, err)
	}
	// It exists; in READ COMMITTED this read sees the winner the insert waited for.
	got, err = scanGroupMember(s.db.QueryRow(ctx, `SELECT `+groupMemberColumns+` FROM group_members
		WHERE order_id = $1 AND user_id = $2`, m.OrderID, m.UserID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, lapse.Errorf(lapse.ECONFLICT, "a group member with idempotency key %q exists", m.Key)
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres: get group member %d/%s: %w", m.OrderID, m.UserID, err)
	}
	return got, false, nil
}

// GroupMemberList returns the members of a group, by id.
func (s *Store) GroupMemberList(ctx context.Context, orderID int64) ([]*lapse.GroupMember, error) {
	rows, err := s.db.Query(ctx, `SELECT `+groupMemberColumns+` FROM group_members WHERE order_id = $1 ORDER BY id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list group members of %d: %w", orderID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.GroupMember, error) { return scanGroupMember(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list group members of %d: %w", orderID, err)
	}
	return out, nil
}

// GroupMemberGet returns the member whose charge has idempotency key key, or
// lapse.ErrGroupMemberNotFound.
func (s *Store) GroupMemberGet(ctx context.Context, key string) (*lapse.GroupMember, error) {
	m, err := scanGroupMember(s.db.QueryRow(ctx, `SELECT `+groupMemberColumns+` FROM group_members WHERE key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrGroupMemberNotFound, "no group member's charge has key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get group member %q: %w", key, err)
	}
	return m, nil
}

// GroupMemberGetByTxn returns the first member whose charge is provider's
// transaction txnID, or lapse.ErrGroupMemberNotFound.
func (s *Store) GroupMemberGetByTxn(ctx context.Context, provider, txnID string) (*lapse.GroupMember, error) {
	// txn_id <> '' is the condition of group_members_txn_idx.
	m, err := scanGroupMember(s.db.QueryRow(ctx, `SELECT `+groupMemberColumns+` FROM group_members
		WHERE provider = $1 AND txn_id = $2 AND txn_id <> '' ORDER BY id LIMIT 1`, provider, txnID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrGroupMemberNotFound, "no group member's charge is transaction %q of %s", txnID, provider)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get group member by txn %s/%q: %w", provider, txnID, err)
	}
	return m, nil
}

// groupMemberUpdateSQL is the guarded change of a member's charge with its
// optional review, which reads the UPDATE's RETURNING: when the guard fails
// nothing is written.
const groupMemberUpdateSQL = `WITH m AS (
	UPDATE group_members SET status = $1, attempts = attempts + $2,
		txn_id = CASE WHEN $3 <> '' THEN $3 ELSE txn_id END, last_error = $4,
		charged_at = coalesce($5, charged_at), updated_at = $6,
		captured_amount = CASE WHEN $16 <> '' THEN $15 ELSE captured_amount END,
		captured_currency = CASE WHEN $16 <> '' THEN $16 ELSE captured_currency END
	WHERE id = $7 AND status = $8
	RETURNING *
), r AS (
	INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at)
	SELECT $12::bigint, $13::text, $10, nullif($14::bigint, 0), $11 FROM m WHERE $9::bool
	ON CONFLICT DO NOTHING
)
SELECT ` + groupMemberColumns + ` FROM m`

// GroupMemberUpdate moves a member's charge from p.From to p.To, setting the
// fields p names, with p.Review, in one statement, or returns
// lapse.ErrStale and writes nothing.
func (s *Store) GroupMemberUpdate(ctx context.Context, p *lapse.GroupMemberUpdateParams) (*lapse.GroupMember, error) {
	attempt := 0
	if p.Attempt {
		attempt = 1
	}
	args := append([]any{p.To, attempt, p.TxnID, p.Error, p.ChargedAt, p.At, p.ID, p.From}, reviewArgs(p.Review)...)
	args = append(args, p.CapturedAmount, p.CapturedCurrency)
	got, err := scanGroupMember(s.db.QueryRow(ctx, groupMemberUpdateSQL, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: update group member %d: %w", p.ID, err)
	}
	return got, nil
}

// ChargeSaltKeep inserts salt as the database's charge key salt unless it
// has one, then reads the one it has. The insert waits for a concurrent one
// to end, and the read, a statement of its own, sees the winner.
func (s *Store) ChargeSaltKeep(ctx context.Context, salt string) (string, error) {
	if _, err := s.db.Exec(ctx, `INSERT INTO charge_salt (id, salt) VALUES (1, $1) ON CONFLICT DO NOTHING`, salt); err != nil {
		return "", fmt.Errorf("postgres: keep the charge salt: %w", err)
	}
	var kept string
	if err := s.db.QueryRow(ctx, `SELECT salt FROM charge_salt WHERE id = 1`).Scan(&kept); err != nil {
		return "", fmt.Errorf("postgres: keep the charge salt: %w", err)
	}
	return kept, nil
}
