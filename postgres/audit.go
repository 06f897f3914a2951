package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const auditColumns = `seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
	second_factor, approver, approval_id, batch, client_addr, prev_hash, hash`

func scanAudit(row pgx.Row) (*lapse.AuditEntry, error) {
	var e lapse.AuditEntry
	err := row.Scan(&e.Seq, &e.At, &e.ActorKind, &e.ActorID, &e.ActorName, &e.Role, &e.Action, &e.Target, &e.Params,
		&e.Result, &e.Reason, &e.SecondFactor, &e.Approver, &e.ApprovalID, &e.Batch, &e.ClientAddr, &e.PrevHash, &e.Hash)
	if err != nil {
		return nil, err
	}
	e.At = e.At.UTC()
	return &e, nil
}

// AuditHead reads the one row of audit_head, inside Tx FOR UPDATE: the
// next appender's locking read waits for this transaction to end and then
// returns the head it committed (READ COMMITTED reads the row's newest
// version after the wait), so each appender chains onto the one before.
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	q := `SELECT seq, hash FROM audit_head`
	if s.tx != nil {
		q += ` FOR UPDATE`
	}
	var (
		seq  int64
		hash []byte
	)
	if err := s.db.QueryRow(ctx, q).Scan(&seq, &hash); err != nil {
		return 0, nil, fmt.Errorf("postgres: read the audit head: %w", err)
	}
	return seq, hash, nil
}

// auditInsertSQL moves the head onto the row when the row is the head's
// next, and appends the row when it did, in one statement: a row that is
// not the next writes nothing and raises no SQL error.
const auditInsertSQL = `WITH h AS (
	UPDATE audit_head SET seq = $1, hash = $18 WHERE seq = $1 - 1
	RETURNING seq
)
INSERT INTO audit_log (` + auditColumns + `)
SELECT h.seq, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18 FROM h`

// AuditInsert appends e and makes it the head, inside Tx; outside it is an
// EINVALID error. An e that is not the head's next (AuditAppend numbers it
// under the lock AuditHead took) is lapse.ErrStale and leaves the
// transaction usable.
func (s *Store) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "postgres: audit row %d is appended in a transaction", e.Seq)
	}
	tag, err := s.db.Exec(ctx, auditInsertSQL, e.Seq, e.At, e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target,
		e.Params, e.Result, e.Reason, e.SecondFactor, e.Approver, e.ApprovalID, e.Batch, e.ClientAddr, e.PrevHash, e.Hash)
	if err != nil {
		return fmt.Errorf("postgres: append audit row %d: %w", e.Seq, err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Refine(lapse.ErrStale, "audit row %d is not the next row of the log", e.Seq)
	}
	return nil
}

// AuditList returns the rows p matches in seq order. Each filter is in the
// SQL only when set, so that a filtered page is a range of that filter's
// (column, seq) index.
func (s *Store) AuditList(ctx context.Context, p *lapse.AuditListParams) ([]*lapse.AuditEntry, error) {
	q, args := auditListQuery(p)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list audit rows: %w", err)
	}
	es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.AuditEntry, error) { return scanAudit(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list audit rows: %w", err)
	}
	return es, nil
}

// auditListQuery is the statement of AuditList and its arguments.
func auditListQuery(p *lapse.AuditListParams) (string, []any) {
	var f filter
	if p.ActorName != "" {
		f.add("actor_name = ", p.ActorName)
	}
	if p.Action != "" {
		f.add("action = ", p.Action)
	}
	if p.Target != "" {
		f.add("target = ", p.Target)
	}
	if p.Batch != 0 {
		f.add("batch <> 0 AND batch = ", p.Batch) // the first term matches the partial index in a generic plan too
	}
	order := ` ORDER BY seq`
	switch {
	case p.Descending && p.Cursor != 0:
		f.add("seq < ", p.Cursor)
		order += ` DESC`
	case p.Descending:
		order += ` DESC`
	case p.Cursor != 0:
		f.add("seq > ", p.Cursor)
	}
	return `SELECT ` + auditColumns + ` FROM audit_log` + f.sql() + order + ` LIMIT ` + f.arg(limitArg(p.Limit)), f.args
}
