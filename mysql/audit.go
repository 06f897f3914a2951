package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const auditCols = `id, seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
	second_factor, approver, approval_id, batch, client_addr, prev_hash, hash`

func scanAudit(r scanner) (*lapse.AuditEntry, error) {
	var (
		e              lapse.AuditEntry
		seq            sql.NullInt64
		at             int64
		result, reason []byte
	)
	err := r.Scan(&e.ID, &seq, &at, &e.ActorKind, &e.ActorID, &e.ActorName, &e.Role, &e.Action, &e.Target, &e.Params,
		&result, &reason, &e.SecondFactor, &e.Approver, &e.ApprovalID, &e.Batch, &e.ClientAddr, &e.PrevHash, &e.Hash)
	if err != nil {
		return nil, err
	}
	e.Seq, e.At, e.Result, e.Reason = seq.Int64, column.Time(at), string(result), string(reason)
	return &e, nil
}

// AuditInsert inserts e unsealed, with an AUTO_INCREMENT id. InnoDB holds
// no lock of the counter past the statement that takes an id (for a
// single-row INSERT, in any innodb_autoinc_lock_mode), so appenders do not
// wait for each other's transactions, and ids are in the order rows were
// inserted, not the order they commit in.
func (s *Store) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO audit_log (at, actor_kind, actor_id, actor_name, role, action, target, params, result,
			reason, second_factor, approver, approval_id, batch, client_addr) VALUES (`+marks(15)+`)`,
			column.Micros(e.At), e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, e.Params,
			[]byte(e.Result), []byte(e.Reason), e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr)
	})
	if err != nil {
		return fail(err, "append an audit row")
	}
	if e.ID, err = res.LastInsertId(); err != nil {
		return fail(err, "append an audit row")
	}
	e.Seq, e.PrevHash, e.Hash = 0, nil, nil
	return nil
}

// AuditList returns the rows p asks for in id order.
func (s *Store) AuditList(ctx context.Context, p *lapse.AuditListParams) ([]*lapse.AuditEntry, error) {
	q, args := auditListSQL(p)
	es, err := queryAll(ctx, s, scanAudit, q, args...)
	if err != nil {
		return nil, fail(err, "list the audit log")
	}
	return es, nil
}

// auditListSQL is AuditList's query, which reads the index of the filter p
// gives, if any, in id order from p.Cursor on.
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
		where, args = append(where, "id "+op+" ?"), append(args, p.Cursor)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + auditCols + ` FROM audit_log`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY id " + order)
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	return q.String(), args
}

// AuditHead reads the one row of audit_head. Inside Tx it is a locking read
// (FOR UPDATE): lockers queue on the row until each one's transaction
// ends, and the read, as every locking read, sees the latest committed
// head.
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	lock := ""
	if s.tx != nil {
		lock = " FOR UPDATE"
	}
	var (
		seq  int64
		hash []byte
	)
	err := s.queryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`+lock).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("mysql: read the audit log's head: %w", lapse.ErrAuditHeadGone)
	}
	if err != nil {
		return 0, nil, fail(err, "read the audit log's head")
	}
	return seq, hash, nil
}

// AuditHeadLock locks the head FOR UPDATE SKIP LOCKED: a head that another
// transaction holds is no row, and no wait.
func (s *Store) AuditHeadLock(ctx context.Context) (int64, []byte, bool, error) {
	if s.tx == nil {
		return 0, nil, false, lapse.Errorf(lapse.EINVALID, "mysql: the audit log's head is locked in a transaction")
	}
	var (
		seq  int64
		hash []byte
	)
	err := s.queryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE SKIP LOCKED`).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		// Skipped, held by another transaction; or not there at all, which
		// is no sealer's turn to wait for.
		var there bool
		if err := s.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_head WHERE id = 1)`).Scan(&there); err != nil {
			return 0, nil, false, fail(err, "look for the audit log's head")
		}
		if !there {
			return 0, nil, false, fmt.Errorf("mysql: lock the audit log's head: %w", lapse.ErrAuditHeadGone)
		}
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fail(err, "lock the audit log's head")
	}
	return seq, hash, true, nil
}

// auditUnsealedSQL reads the NULLs of audit_log_unsealed_idx (seq, id) in
// id order, and auditChainSQL the rest of audit_log_seq_key, in seq order.
const (
	auditUnsealedSQL = `SELECT ` + auditCols + ` FROM audit_log WHERE seq IS NULL ORDER BY id LIMIT ?`
	auditChainSQL    = `SELECT ` + auditCols + ` FROM audit_log WHERE seq > ? ORDER BY seq`
)

// AuditUnsealedList reads the unsealed rows in id order. It is a
// consistent read: rows of transactions still open are not in it, and are
// not waited for; the next pass finds them.
func (s *Store) AuditUnsealedList(ctx context.Context, limit int) ([]*lapse.AuditEntry, error) {
	es, err := queryAll(ctx, s, scanAudit, auditUnsealedSQL, max(limit, 1))
	if err != nil {
		return nil, fail(err, "list the unsealed audit rows")
	}
	return es, nil
}

// AuditUnsealedCount counts the unsealed rows and their earliest time.
func (s *Store) AuditUnsealedCount(ctx context.Context) (int64, time.Time, error) {
	var (
		n      int64
		oldest sql.NullInt64
	)
	if err := s.queryRow(ctx, `SELECT count(*), min(at) FROM audit_log WHERE seq IS NULL`).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fail(err, "count the unsealed audit rows")
	}
	return n, column.ZeroTime(oldest), nil
}

// sealRows is how many rows one UPDATE of AuditSealUpdate seals.
const sealRows = 250

// AuditSealUpdate moves the head with an update guarded by the row before
// rows[0], then seals the rows sealRows at a time, each UPDATE joined to
// the rows' values and guarded by seq IS NULL, all in a savepoint that a
// guard's miss undoes.
func (s *Store) AuditSealUpdate(ctx context.Context, rows []*lapse.AuditEntry) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "mysql: audit rows are sealed in a transaction (lapse.AuditSeal)")
	}
	if len(rows) == 0 {
		return nil
	}
	first, last := rows[0], rows[len(rows)-1]
	_, err := write(ctx, s, func(w *Store) (struct{}, error) {
		res, err := w.exec(ctx, `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1 AND seq = ? AND hash <=> ?`,
			last.Seq, last.Hash, first.Seq-1, first.PrevHash)
		if err != nil {
			return struct{}{}, err
		}
		if affected(res) == 0 {
			return struct{}{}, lapse.Refine(lapse.ErrStale, "audit row %d is not the next of the log's head", first.Seq)
		}
		for chunk := range slices.Chunk(rows, sealRows) {
			values := make([]string, len(chunk))
			args := make([]any, 0, 4*len(chunk))
			for i, e := range chunk {
				values[i] = "SELECT ? AS id, ? AS seq, ? AS prev_hash, ? AS hash"
				args = append(args, e.ID, e.Seq, e.PrevHash, e.Hash)
			}
			res, err := w.exec(ctx, `UPDATE audit_log AS a JOIN (`+strings.Join(values, " UNION ALL ")+`) AS v ON a.id = v.id
				SET a.seq = v.seq, a.prev_hash = v.prev_hash, a.hash = v.hash WHERE a.seq IS NULL`, args...)
			if err != nil {
				return struct{}{}, err
			}
			if n := affected(res); n != int64(len(chunk)) {
				return struct{}{}, lapse.Refine(lapse.ErrStale, "of audit rows %d to %d, %d were sealed already or not there",
					chunk[0].Seq, chunk[len(chunk)-1].Seq, int64(len(chunk))-n)
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return fail(err, "seal audit rows %d to %d", first.Seq, last.Seq)
	}
	return nil
}

// AuditChainList reads the sealed rows (auditChainSQL).
func (s *Store) AuditChainList(ctx context.Context, after int64, limit int) ([]*lapse.AuditEntry, error) {
	q, args := auditChainSQL, []any{after}
	if limit > 0 {
		q, args = q+` LIMIT ?`, append(args, limit)
	}
	es, err := queryAll(ctx, s, scanAudit, q, args...)
	if err != nil {
		return nil, fail(err, "list the audit chain")
	}
	return es, nil
}
