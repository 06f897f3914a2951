package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const auditColumns = `id, seq, at, actor_kind, actor_id, actor_name, role, action, target, params, result, reason,
	second_factor, approver, approval_id, batch, client_addr, prev_hash, hash`

func scanAudit(row pgx.Row) (*lapse.AuditEntry, error) {
	var (
		e   lapse.AuditEntry
		seq *int64
	)
	err := row.Scan(&e.ID, &seq, &e.At, &e.ActorKind, &e.ActorID, &e.ActorName, &e.Role, &e.Action, &e.Target, &e.Params,
		&e.Result, &e.Reason, &e.SecondFactor, &e.Approver, &e.ApprovalID, &e.Batch, &e.ClientAddr, &e.PrevHash, &e.Hash)
	if err != nil {
		return nil, err
	}
	if seq != nil {
		e.Seq = *seq
	}
	e.At = e.At.UTC()
	return &e, nil
}

func collectAudit(rows pgx.Rows) ([]*lapse.AuditEntry, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.AuditEntry, error) { return scanAudit(row) })
}

// AuditInsert inserts e unsealed. Its id comes from the table's identity
// sequence, which no appender waits for: ids are in the order rows were
// inserted, not the order they commit in.
func (s *Store) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	err := s.db.QueryRow(ctx, `INSERT INTO audit_log (at, actor_kind, actor_id, actor_name, role, action, target, params, result,
		reason, second_factor, approver, approval_id, batch, client_addr)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING id`,
		e.At, e.ActorKind, e.ActorID, e.ActorName, e.Role, e.Action, e.Target, e.Params, e.Result, e.Reason, e.SecondFactor,
		e.Approver, e.ApprovalID, e.Batch, e.ClientAddr).Scan(&e.ID)
	if err != nil {
		return fmt.Errorf("postgres: append an audit row: %w", err)
	}
	e.Seq, e.PrevHash, e.Hash = 0, nil, nil
	return nil
}

// AuditList returns the rows p matches in id order. Each filter is in the
// SQL only when set, so that a filtered page is a range of that filter's
// (column, id) index.
func (s *Store) AuditList(ctx context.Context, p *lapse.AuditListParams) ([]*lapse.AuditEntry, error) {
	q, args := auditListQuery(p)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list audit rows: %w", err)
	}
	es, err := collectAudit(rows)
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
	order := ` ORDER BY id`
	switch {
	case p.Descending && p.Cursor != 0:
		f.add("id < ", p.Cursor)
		order += ` DESC`
	case p.Descending:
		order += ` DESC`
	case p.Cursor != 0:
		f.add("id > ", p.Cursor)
	}
	return `SELECT ` + auditColumns + ` FROM audit_log` + f.sql() + order + ` LIMIT ` + f.arg(limitArg(p.Limit)), f.args
}

// AuditHead reads the one row of audit_head, inside Tx FOR UPDATE: the
// next locking read waits for this transaction to end and then returns
// the head it committed (READ COMMITTED reads the row's newest version
// after the wait).
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	q := `SELECT seq, hash FROM audit_head`
	if s.tx != nil {
		q += ` FOR UPDATE`
	}
	var (
		seq  int64
		hash []byte
	)
	err := s.db.QueryRow(ctx, q).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, fmt.Errorf("postgres: read the audit head: %w", lapse.ErrAuditHeadGone)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("postgres: read the audit head: %w", err)
	}
	return seq, hash, nil
}

// AuditHeadLock locks the head FOR UPDATE SKIP LOCKED: a head that another
// transaction holds is no row, and no wait.
func (s *Store) AuditHeadLock(ctx context.Context) (int64, []byte, bool, error) {
	if s.tx == nil {
		return 0, nil, false, lapse.Errorf(lapse.EINVALID, "postgres: the audit log's head is locked in a transaction")
	}
	var (
		seq  int64
		hash []byte
	)
	err := s.db.QueryRow(ctx, `SELECT seq, hash FROM audit_head FOR UPDATE SKIP LOCKED`).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		// Skipped, held by another transaction; or not there at all, which
		// is no sealer's turn to wait for.
		var there bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_head)`).Scan(&there); err != nil {
			return 0, nil, false, fmt.Errorf("postgres: look for the audit head: %w", err)
		}
		if !there {
			return 0, nil, false, fmt.Errorf("postgres: lock the audit head: %w", lapse.ErrAuditHeadGone)
		}
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("postgres: lock the audit head: %w", err)
	}
	return seq, hash, true, nil
}

// auditUnsealedSQL reads audit_log_unsealed_idx, and auditChainSQL
// audit_log_seq_key, in order.
const (
	auditUnsealedSQL = `SELECT ` + auditColumns + ` FROM audit_log WHERE seq IS NULL ORDER BY id LIMIT $1`
	auditChainSQL    = `SELECT ` + auditColumns + ` FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2`
)

// AuditUnsealedList reads the unsealed rows in id order. Rows of
// transactions still open are not in its snapshot: the next pass finds
// them.
func (s *Store) AuditUnsealedList(ctx context.Context, limit int) ([]*lapse.AuditEntry, error) {
	rows, err := s.db.Query(ctx, auditUnsealedSQL, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("postgres: list unsealed audit rows: %w", err)
	}
	es, err := collectAudit(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list unsealed audit rows: %w", err)
	}
	return es, nil
}

// AuditUnsealedCount counts the unsealed rows and their earliest time.
func (s *Store) AuditUnsealedCount(ctx context.Context) (int64, time.Time, error) {
	var (
		n      int64
		oldest *time.Time
	)
	if err := s.db.QueryRow(ctx, `SELECT count(*), min(at) FROM audit_log WHERE seq IS NULL`).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("postgres: count unsealed audit rows: %w", err)
	}
	if oldest == nil {
		return n, time.Time{}, nil
	}
	return n, oldest.UTC(), nil
}

// AuditSealUpdate moves the head with an update guarded by the row before
// rows[0] and seals the rows in one UPDATE guarded by seq IS NULL, both in
// a savepoint that a guard's miss undoes.
func (s *Store) AuditSealUpdate(ctx context.Context, rows []*lapse.AuditEntry) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "postgres: audit rows are sealed in a transaction (lapse.AuditSeal)")
	}
	if len(rows) == 0 {
		return nil
	}
	first, last := rows[0], rows[len(rows)-1]
	ids, seqs := make([]int64, len(rows)), make([]int64, len(rows))
	prevs, hashes := make([][]byte, len(rows)), make([][]byte, len(rows))
	for i, e := range rows {
		ids[i], seqs[i], prevs[i], hashes[i] = e.ID, e.Seq, e.PrevHash, e.Hash
	}
	err := pgx.BeginFunc(ctx, s.tx, func(sp pgx.Tx) error {
		tag, err := sp.Exec(ctx, `UPDATE audit_head SET seq = $1, hash = $2 WHERE seq = $3 AND hash IS NOT DISTINCT FROM $4`,
			last.Seq, last.Hash, first.Seq-1, first.PrevHash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return lapse.Refine(lapse.ErrStale, "audit row %d is not the next of the log's head", first.Seq)
		}
		tag, err = sp.Exec(ctx, `UPDATE audit_log AS a SET seq = v.seq, prev_hash = v.prev_hash, hash = v.hash
			FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[]) AS v (id, seq, prev_hash, hash)
			WHERE a.id = v.id AND a.seq IS NULL`, ids, seqs, prevs, hashes)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(rows)) {
			return lapse.Refine(lapse.ErrStale, "of audit rows %d to %d, %d were sealed already or not there",
				first.Seq, last.Seq, int64(len(rows))-tag.RowsAffected())
		}
		return nil
	})
	var le *lapse.Error
	if errors.As(err, &le) {
		return le
	}
	if err != nil {
		return fmt.Errorf("postgres: seal audit rows %d to %d: %w", first.Seq, last.Seq, unavailable(err))
	}
	return nil
}

// AuditChainList reads the sealed rows through audit_log_seq_key.
func (s *Store) AuditChainList(ctx context.Context, after int64, limit int) ([]*lapse.AuditEntry, error) {
	rows, err := s.db.Query(ctx, auditChainSQL, after, limitArg(limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: list the audit chain: %w", err)
	}
	es, err := collectAudit(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list the audit chain: %w", err)
	}
	return es, nil
}
