package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const approvalColumns = `id, action, target, amount, currency, count, request, reason, maker_id, maker_name,
	created_at, expires_at, status, approver_id, approver_name, decided_at, result`

func scanApproval(row pgx.Row, extra ...any) (*lapse.Approval, error) {
	var (
		a       lapse.Approval
		decided *time.Time
	)
	err := row.Scan(append([]any{&a.ID, &a.Action, &a.Target, &a.Amount, &a.Currency, &a.Count, &a.Request, &a.Reason,
		&a.MakerID, &a.MakerName, &a.CreatedAt, &a.ExpiresAt, &a.Status, &a.ApproverID, &a.ApproverName, &decided,
		&a.Result}, extra...)...)
	if err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = a.CreatedAt.UTC(), a.ExpiresAt.UTC(), timeOf(decided)
	return &a, nil
}

func scanApprovals(rows pgx.Rows) ([]*lapse.Approval, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Approval, error) { return scanApproval(row) })
}

// ApprovalCreate inserts a as it is, status and decision included.
func (s *Store) ApprovalCreate(ctx context.Context, a *lapse.Approval) (*lapse.Approval, error) {
	got, err := scanApproval(s.db.QueryRow(ctx, `INSERT INTO approvals (action, target, amount, currency, count, request,
		reason, maker_id, maker_name, created_at, expires_at, status, approver_id, approver_name, decided_at, result)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) RETURNING `+approvalColumns,
		a.Action, a.Target, a.Amount, a.Currency, a.Count, a.Request, a.Reason, a.MakerID, a.MakerName, a.CreatedAt,
		a.ExpiresAt, a.Status, a.ApproverID, a.ApproverName, nullTime(a.DecidedAt), a.Result))
	if err != nil {
		return nil, fmt.Errorf("postgres: create approval of %s: %w", a.Action, err)
	}
	return got, nil
}

// ApprovalGet returns the request with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) ApprovalGet(ctx context.Context, id int64) (*lapse.Approval, error) {
	a, err := scanApproval(s.db.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no approval request %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get approval %d: %w", id, err)
	}
	return a, nil
}

// ApprovalList returns requests newest first. Each filter is in the SQL
// only when set, so that the plan of a status's page is a range of
// approvals_status_idx.
func (s *Store) ApprovalList(ctx context.Context, p *lapse.ApprovalListParams) ([]*lapse.Approval, error) {
	var f filter
	if p.Status != "" {
		f.add("status = ", p.Status)
	}
	if p.Before != 0 {
		f.add("id < ", p.Before)
	}
	q := `SELECT ` + approvalColumns + ` FROM approvals` + f.sql() + ` ORDER BY id DESC LIMIT ` + f.arg(limitArg(p.Limit))
	rows, err := s.db.Query(ctx, q, f.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list approvals: %w", err)
	}
	as, err := scanApprovals(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list approvals: %w", err)
	}
	return as, nil
}

// approvalDecideSQL is the guarded move. When the guard fails the second
// branch tells whether the request exists; requests are never deleted, so
// the statement's snapshot is enough to tell missing from moved on.
const approvalDecideSQL = `WITH u AS (
	UPDATE approvals SET status = $3, approver_id = $4, approver_name = $5, decided_at = $6, result = $7
	WHERE id = $1 AND status = $2
	RETURNING ` + approvalColumns + `
)
SELECT ` + approvalColumns + `, true FROM u
UNION ALL
SELECT ` + approvalColumns + `, false FROM approvals WHERE id = $1 AND NOT EXISTS (SELECT FROM u)`

// ApprovalDecide moves the request from p.From to p.To in one statement.
// It returns lapse.ErrStale, writing nothing and raising no SQL error, when
// the request is in another status, and lapse.ErrAccessNotFound. Of
// concurrent deciders from one status, the first to commit wins: the others
// wait for it and then find the status moved on.
func (s *Store) ApprovalDecide(ctx context.Context, p *lapse.ApprovalDecideParams) (*lapse.Approval, error) {
	var moved bool
	a, err := scanApproval(s.db.QueryRow(ctx, approvalDecideSQL, p.ID, p.From, p.To, p.ApproverID, p.ApproverName,
		nullTime(p.DecidedAt), p.Result), &moved)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no approval request %d", p.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: decide approval %d: %w", p.ID, err)
	}
	if !moved {
		return nil, lapse.Refine(lapse.ErrStale, "approval request %d is %s, not %s", p.ID, a.Status, p.From)
	}
	return a, nil
}
