package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const approvalCols = `id, action, target, amount, currency, count, request, reason, maker_id, maker_name,
	created_at, expires_at, status, approver_id, approver_name, decided_at, result`

func scanApproval(r scanner) (*lapse.Approval, error) {
	var (
		a                lapse.Approval
		created, expires int64
		decided          sql.NullInt64
	)
	err := r.Scan(&a.ID, &a.Action, &a.Target, &a.Amount, &a.Currency, &a.Count, &a.Request, &a.Reason, &a.MakerID, &a.MakerName,
		&created, &expires, (*string)(&a.Status), &a.ApproverID, &a.ApproverName, &decided, &a.Result)
	if err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = column.Time(created), column.Time(expires), column.ZeroTime(decided)
	return &a, nil
}

func approvalNotFound(id int64) error {
	return lapse.Refine(lapse.ErrAccessNotFound, "no approval request with id %d", id)
}

// ApprovalCreate inserts a.
func (s *Store) ApprovalCreate(ctx context.Context, a *lapse.Approval) (*lapse.Approval, error) {
	var got *lapse.Approval
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanApproval(w.tx.QueryRowContext(ctx, `INSERT INTO approvals (action, target, amount, currency, count,
			request, reason, maker_id, maker_name, created_at, expires_at, status, approver_id, approver_name, decided_at, result)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+approvalCols,
			a.Action, a.Target, a.Amount, a.Currency, a.Count, nullBytes(a.Request), a.Reason, a.MakerID, a.MakerName,
			column.Micros(a.CreatedAt), column.Micros(a.ExpiresAt), string(a.Status), a.ApproverID, a.ApproverName,
			column.ZeroMicros(a.DecidedAt), a.Result))
		return err
	})
	if err != nil {
		return nil, fail(err, "approval create %s %s", a.Action, a.Target)
	}
	return got, nil
}

// ApprovalGet returns the request with id, or lapse.ErrAccessNotFound.
func (s *Store) ApprovalGet(ctx context.Context, id int64) (*lapse.Approval, error) {
	a, err := scanApproval(s.db().QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, approvalNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: approval get %d: %w", id, err)
	}
	return a, nil
}

// ApprovalList returns the requests that match p, by id descending.
func (s *Store) ApprovalList(ctx context.Context, p *lapse.ApprovalListParams) ([]*lapse.Approval, error) {
	var where []string
	var args []any
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Before != 0 {
		where, args = append(where, "id < ?"), append(args, p.Before)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + approvalCols + ` FROM approvals`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY id DESC LIMIT ?")
	as, err := queryAll(ctx, s.db(), scanApproval, q.String(), append(args, sqlLimit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: approval list: %w", err)
	}
	return as, nil
}

// ApprovalDecide moves the request from p.From to p.To in one guarded
// UPDATE; when it matches nothing, the request is in another status
// (lapse.ErrStale) or there is none (lapse.ErrAccessNotFound).
func (s *Store) ApprovalDecide(ctx context.Context, p *lapse.ApprovalDecideParams) (*lapse.Approval, error) {
	var got *lapse.Approval
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanApproval(w.tx.QueryRowContext(ctx, `UPDATE approvals SET status = ?, approver_id = ?, approver_name = ?,
			decided_at = ?, result = ? WHERE id = ? AND status = ? RETURNING `+approvalCols,
			string(p.To), p.ApproverID, p.ApproverName, column.ZeroMicros(p.DecidedAt), p.Result, p.ID, string(p.From)))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var n int
		if err := w.tx.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE id = ?`, p.ID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return approvalNotFound(p.ID)
		}
		return lapse.Refine(lapse.ErrStale, "approval request %d is not %s", p.ID, p.From)
	})
	if err != nil {
		return nil, fail(err, "approval decide %d", p.ID)
	}
	return got, nil
}
