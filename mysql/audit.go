package mysql

import (
	"context"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// AuditHead reads the one row of audit_head. Inside Tx it is a locking read
// (FOR UPDATE): appenders queue on the row until each one's transaction
// ends, and the read, as every locking read, sees the latest committed
// head, so that each appender chains onto the row its predecessor wrote.
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	lock := ""
	if s.tx != nil {
		lock = " FOR UPDATE"
	}
	var (
		seq  int64
		hash []byte
	)
	if err := s.queryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`+lock).Scan(&seq, &hash); err != nil {
		return 0, nil, fail(err, "read the audit log's head")
	}
	return seq, hash, nil
}

// AuditInsert inserts e and moves the head to it, in a savepoint of the
// caller's transaction. The head moves only from the row e chains to (e.Seq
// - 1 and e.PrevHash), so that an append that did not take the head first
// (lapse.AuditAppend) is lapse.ErrStale, writing nothing, rather than fork
// the chain.
func (s *Store) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "mysql: audit row %d is appended in a transaction (lapse.AuditAppend)", e.Seq)
	}
	_, err := write(ctx, s, func(w *Store) (struct{}, error) {
		res, err := w.exec(ctx, `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1 AND seq = ? AND hash <=> ?`,
			e.Seq, e.Hash, e.Seq-1, e.PrevHash)
		if err != nil {
			return struct{}{}, err
		}
		if affected(res) == 0 {
			return struct{}{}, lapse.ErrStale
		}
		_, err = w.exec(ctx, `INSERT INTO audit_log (`+auditCols+`) VALUES (`+marks(18)+`)`,
			e.Seq, column.Micros(e.At), e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, e.Params,
			[]byte(e.Result), []byte(e.Reason), e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr,
			e.PrevHash, e.Hash)
		if isDuplicate(err) { // a row the head does not know of
			return struct{}{}, lapse.ErrStale
		}
		return struct{}{}, err
	})
	if err != nil {
		return fail(err, "append audit row %d", e.Seq)
	}
	return nil
}

const auditCols = `seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
	second_factor, approver, approval_id, batch, client_addr, prev_hash, hash`

func scanAudit(r scanner) (*lapse.AuditEntry, error) {
	var (
		e              lapse.AuditEntry
		at             int64
		result, reason []byte
	)
	err := r.Scan(&e.Seq, &at, &e.ActorKind, &e.ActorID, &e.ActorName, &e.Role, &e.Action, &e.Target, &e.Params,
		&result, &reason, &e.SecondFactor, &e.Approver, &e.ApprovalID, &e.Batch, &e.ClientAddr, &e.PrevHash, &e.Hash)
	if err != nil {
		return nil, err
	}
	e.At, e.Result, e.Reason = column.Time(at), string(result), string(reason)
	return &e, nil
}

// AuditList returns the rows p asks for in seq order.
func (s *Store) AuditList(ctx context.Context, p *lapse.AuditListParams) ([]*lapse.AuditEntry, error) {
	q, args := auditListSQL(p)
	es, err := queryAll(ctx, s, scanAudit, q, args...)
	if err != nil {
		return nil, fail(err, "list the audit log")
	}
	return es, nil
}

// auditListSQL is AuditList's query, which reads the index of the filter p
// gives, if any, in seq order from p.Cursor on.
func auditListSQL(p *lapse.AuditListParams) (string, []any) {
	var where []string
	var args []any
	for _, f := range []struct {
		col string
		set bool
		arg any
	}{
		{"actor_name", p.ActorName != "", p.ActorName},
		{"action", p.Action != "", p.Action},
		{"target", p.Target != "", p.Target},
		{"batch", p.Batch != 0, p.Batch},
	} {
		if f.set {
			where, args = append(where, f.col+" = ?"), append(args, f.arg)
		}
	}
	op, order := ">", "ASC"
	if p.Descending {
		op, order = "<", "DESC"
	}
	if p.Cursor != 0 {
		where, args = append(where, "seq "+op+" ?"), append(args, p.Cursor)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + auditCols + ` FROM audit_log`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY seq " + order)
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	return q.String(), args
}
