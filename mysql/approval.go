package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const approvalCols = `id, action, target, amount, currency, order_count, request, reason, maker_id, maker_name,
	created_at, expires_at, status, approver_id, approver_name, decided_at, result`

func scanApproval(r scanner) (*lapse.Approval, error) {
	var (
		a                lapse.Approval
		created          int64
		expires, decided sql.NullInt64
	)
	err := r.Scan(&a.ID, &a.Action, &a.Target, &a.Amount, &a.Currency, &a.Count, &a.Request, &a.Reason, &a.MakerID,
		&a.MakerName, &created, &expires, (*string)(&a.Status), &a.ApproverID, &a.ApproverName, &decided, &a.Result)
	if err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = column.Time(created), column.ZeroTime(expires), column.ZeroTime(decided)
	return &a, nil
}

// ApprovalCreate inserts a, in the status it gives, and returns it with its
// id.
func (s *Store) ApprovalCreate(ctx context.Context, a *lapse.Approval) (*lapse.Approval, error) {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO approvals (action, target, amount, currency, order_count, request, reason,
			maker_id, maker_name, created_at, expires_at, status, approver_id, approver_name, decided_at, result)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.Action, a.Target, a.Amount, a.Currency, a.Count, a.Request, a.Reason, a.MakerID, a.MakerName,
			column.Micros(a.CreatedAt), column.ZeroMicros(a.ExpiresAt), string(a.Status), a.ApproverID, a.ApproverName,
			column.ZeroMicros(a.DecidedAt), a.Result)
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: create approval of %s %s: %w", a.Action, a.Target, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, fmt.Errorf("mysql: create approval of %s %s: %w", a.Action, a.Target, err)
	}
	out := *a
	out.ID, out.Request = id, bytes.Clone(a.Request)
	out.CreatedAt, out.ExpiresAt, out.DecidedAt = kept(a.CreatedAt), kept(a.ExpiresAt), kept(a.DecidedAt)
	return &out, nil
}

// ApprovalGet returns the approval request with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) ApprovalGet(ctx context.Context, id int64) (*lapse.Approval, error) {
	a, err := s.approvalGet(ctx, id)
	if err != nil {
		return nil, fail(err, "get approval %d", id)
	}
	return a, nil
}

func (s *Store) approvalGet(ctx context.Context, id int64) (*lapse.Approval, error) {
	a, err := scanApproval(s.queryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, accessNotFound("no approval request %d", id)
	}
	return a, err
}

// ApprovalList returns the requests p asks for by id, descending, reading
// approvals_status_idx backwards when p names a status.
func (s *Store) ApprovalList(ctx context.Context, p *lapse.ApprovalListParams) ([]*lapse.Approval, error) {
	var where []string
	var args []any
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Before > 0 {
		where, args = append(where, "id < ?"), append(args, p.Before)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + approvalCols + ` FROM approvals`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY id DESC")
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	as, err := queryAll(ctx, s, scanApproval, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list approvals: %w", err)
	}
	return as, nil
}

// ApprovalDecide is one UPDATE guarded by the request's status, then a read
// of the request, in a transaction (a savepoint inside Tx). The affected
// rows are the rows the guard matched (the store's sessions set
// clientFoundRows), so a move that changes nothing else still counts; none
// is a request that is not in p.From, lapse.ErrStale, or no request, which
// the read tells.
func (s *Store) ApprovalDecide(ctx context.Context, p *lapse.ApprovalDecideParams) (*lapse.Approval, error) {
	a, err := write(ctx, s, func(w *Store) (*lapse.Approval, error) {
		res, err := w.exec(ctx, `UPDATE approvals SET status = ?, approver_id = ?, approver_name = ?, decided_at = ?,
			result = ? WHERE id = ? AND status = ?`, string(p.To), p.ApproverID, p.ApproverName, column.ZeroMicros(p.DecidedAt),
			p.Result, p.ID, string(p.From))
		if err != nil {
			return nil, err
		}
		a, err := w.approvalGet(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			return nil, lapse.ErrStale
		}
		return a, nil
	})
	if err != nil {
		return nil, fail(err, "decide approval %d", p.ID)
	}
	return a, nil
}
