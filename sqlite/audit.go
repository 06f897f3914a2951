package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const auditCols = `seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
	second_factor, approver, approval_id, batch, client_addr, prev_hash, hash`

func scanAudit(r scanner) (*lapse.AuditEntry, error) {
	var (
		e  lapse.AuditEntry
		at int64
	)
	err := r.Scan(&e.Seq, &at, &e.ActorKind, &e.ActorID, &e.ActorName, &e.Role, &e.Action, &e.Target, &e.Params, &e.Result,
		&e.Reason, &e.SecondFactor, &e.Approver, &e.ApprovalID, &e.Batch, &e.ClientAddr, &e.PrevHash, &e.Hash)
	if err != nil {
		return nil, err
	}
	e.At = column.Time(at)
	return &e, nil
}

// AuditHead reads the head row. It takes no lock of its own: inside Tx the
// transaction holds the write lock of the whole database from its start, so
// no other appender reads the head until it ends; outside Tx it reads the
// last commit.
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	var (
		seq  int64
		hash []byte
	)
	if err := s.db().QueryRowContext(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`).Scan(&seq, &hash); err != nil {
		return 0, nil, fmt.Errorf("sqlite: audit head: %w", err)
	}
	return seq, hash, nil
}

// AuditInsert moves the head onto e with an update guarded by e.Seq - 1 and
// inserts e, both or neither.
func (s *Store) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "sqlite: audit row %d is appended in a transaction (lapse.AuditAppend)", e.Seq)
	}
	err := s.write(ctx, func(w *writeTx) error {
		err := updateOne(ctx, w, lapse.Refine(lapse.ErrStale, "audit row %d is not the next of the log's head", e.Seq),
			`UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1 AND seq = ?1 - 1`, e.Seq, e.Hash)
		if err != nil {
			return err
		}
		_, err = w.exec(ctx, `INSERT INTO audit_log (`+auditCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Seq, column.Micros(e.At), e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, nullBytes(e.Params),
			e.Result, e.Reason, e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr, nullBytes(e.PrevHash), e.Hash)
		return err
	})
	if err != nil {
		return fail(err, "audit insert %d", e.Seq)
	}
	return nil
}

// AuditList returns the rows that match p, in seq order.
func (s *Store) AuditList(ctx context.Context, p *lapse.AuditListParams) ([]*lapse.AuditEntry, error) {
	var where []string
	var args []any
	for _, f := range []struct {
		col string
		v   string
	}{{"actor_name", p.ActorName}, {"action", p.Action}, {"target", p.Target}} {
		if f.v != "" {
			where, args = append(where, f.col+" = ?"), append(args, f.v)
		}
	}
	if p.Batch != 0 {
		where, args = append(where, "batch = ?"), append(args, p.Batch)
	}
	order := "seq"
	if p.Cursor != 0 {
		cmp := "seq > ?"
		if p.Descending {
			cmp = "seq < ?"
		}
		where, args = append(where, cmp), append(args, p.Cursor)
	}
	if p.Descending {
		order = "seq DESC"
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + auditCols + ` FROM audit_log`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY " + order + " LIMIT ?")
	es, err := queryAll(ctx, s.db(), scanAudit, q.String(), append(args, sqlLimit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: audit list: %w", err)
	}
	return es, nil
}
