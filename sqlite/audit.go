package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const auditCols = `id, seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
	second_factor, approver, approval_id, batch, client_addr, prev_hash, hash`

func scanAudit(r scanner) (*lapse.AuditEntry, error) {
	var (
		e   lapse.AuditEntry
		seq sql.NullInt64
		at  int64
	)
	err := r.Scan(&e.ID, &seq, &at, &e.ActorKind, &e.ActorID, &e.ActorName, &e.Role, &e.Action, &e.Target, &e.Params, &e.Result,
		&e.Reason, &e.SecondFactor, &e.Approver, &e.ApprovalID, &e.Batch, &e.ClientAddr, &e.PrevHash, &e.Hash)
	if err != nil {
		return nil, err
	}
	e.Seq, e.At = seq.Int64, column.Time(at)
	return &e, nil
}

// AuditInsert inserts e unsealed. Its ID is the table's rowid: SQLite has
// one writer at a time, so IDs are in the order rows commit.
func (s *Store) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	err := s.write(ctx, func(w *writeTx) error {
		res, err := w.exec(ctx, `INSERT INTO audit_log (at, actor_kind, actor_id, actor_name, role, action, target, params,
			result, reason, second_factor, approver, approval_id, batch, client_addr) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			column.Micros(e.At), e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, nullBytes(e.Params),
			e.Result, e.Reason, e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr)
		if err != nil {
			return err
		}
		e.ID, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return fail(err, "audit insert")
	}
	e.Seq, e.PrevHash, e.Hash = 0, nil, nil
	return nil
}

// AuditList returns the rows that match p, in id order.
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
		// The first term is the condition of the partial index.
		where, args = append(where, "batch <> 0 AND batch = ?"), append(args, p.Batch)
	}
	order := "id"
	if p.Cursor != 0 {
		cmp := "id > ?"
		if p.Descending {
			cmp = "id < ?"
		}
		where, args = append(where, cmp), append(args, p.Cursor)
	}
	if p.Descending {
		order = "id DESC"
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

// AuditHead reads the head row. It takes no lock of its own: inside Tx the
// transaction holds the write lock of the whole database from its start, so
// no other transaction moves the head until it ends; outside Tx it reads
// the last commit.
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	var (
		seq  int64
		hash []byte
	)
	err := s.db().QueryRowContext(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("sqlite: audit head: %w", lapse.ErrAuditHeadGone)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("sqlite: audit head: %w", err)
	}
	return seq, hash, nil
}

// AuditHeadLock is AuditHead inside Tx, whose write lock is the head's
// lock: a second sealer waits for it at its BEGIN (up to the busy timeout)
// rather than here, and then finds the rows sealed.
func (s *Store) AuditHeadLock(ctx context.Context) (int64, []byte, bool, error) {
	if s.tx == nil {
		return 0, nil, false, lapse.Errorf(lapse.EINVALID, "sqlite: the audit log's head is locked in a transaction")
	}
	seq, hash, err := s.AuditHead(ctx)
	return seq, hash, err == nil, err
}

// AuditUnsealedList reads audit_log_unsealed_idx.
func (s *Store) AuditUnsealedList(ctx context.Context, limit int) ([]*lapse.AuditEntry, error) {
	es, err := queryAll(ctx, s.db(), scanAudit, `SELECT `+auditCols+` FROM audit_log WHERE seq IS NULL ORDER BY id LIMIT ?`, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("sqlite: audit unsealed list: %w", err)
	}
	return es, nil
}

// AuditUnsealedCount counts the unsealed rows and their earliest time.
func (s *Store) AuditUnsealedCount(ctx context.Context) (int64, time.Time, error) {
	var (
		n      int64
		oldest sql.NullInt64
	)
	err := s.db().QueryRowContext(ctx, `SELECT count(*), min(at) FROM audit_log WHERE seq IS NULL`).Scan(&n, &oldest)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("sqlite: audit unsealed count: %w", err)
	}
	return n, column.ZeroTime(oldest), nil
}

// AuditSealUpdate moves the head from the row before rows[0] to the last
// of rows with a guarded update, then seals each row with an update
// guarded by its being unsealed, all in a savepoint.
func (s *Store) AuditSealUpdate(ctx context.Context, rows []*lapse.AuditEntry) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "sqlite: audit rows are sealed in a transaction (lapse.AuditSeal)")
	}
	if len(rows) == 0 {
		return nil
	}
	first, last := rows[0], rows[len(rows)-1]
	err := s.write(ctx, func(w *writeTx) error {
		err := updateOne(ctx, w, lapse.Refine(lapse.ErrStale, "audit row %d is not the next of the log's head", first.Seq),
			`UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1 AND seq = ? AND hash IS ?`,
			last.Seq, last.Hash, first.Seq-1, nullBytes(first.PrevHash))
		if err != nil {
			return err
		}
		for _, e := range rows {
			err := updateOne(ctx, w, lapse.Refine(lapse.ErrStale, "audit row id %d is sealed already, or not there", e.ID),
				`UPDATE audit_log SET seq = ?, prev_hash = ?, hash = ? WHERE id = ? AND seq IS NULL`,
				e.Seq, nullBytes(e.PrevHash), e.Hash, e.ID)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fail(err, "audit seal %d to %d", first.Seq, last.Seq)
	}
	return nil
}

// AuditChainList reads the sealed rows through audit_log_seq_key.
func (s *Store) AuditChainList(ctx context.Context, after int64, limit int) ([]*lapse.AuditEntry, error) {
	es, err := queryAll(ctx, s.db(), scanAudit, `SELECT `+auditCols+` FROM audit_log WHERE seq > ? ORDER BY seq LIMIT ?`,
		after, sqlLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite: audit chain list: %w", err)
	}
	return es, nil
}
