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

const closeBatchCols = `id, selector, reason, created_by, approval_id, created_at, status, total, closed, skipped, failed,
	finished_at`

func scanCloseBatch(r scanner) (*lapse.CloseBatch, error) {
	var (
		b        lapse.CloseBatch
		created  int64
		finished sql.NullInt64
	)
	err := r.Scan(&b.ID, &b.Selector, &b.Reason, &b.CreatedBy, &b.ApprovalID, &created, (*string)(&b.Status), &b.Total,
		&b.Closed, &b.Skipped, &b.Failed, &finished)
	if err != nil {
		return nil, err
	}
	b.CreatedAt, b.FinishedAt = column.Time(created), column.ZeroTime(finished)
	return &b, nil
}

// CloseBatchCreate inserts b, then its items in multi-row INSERTs of a few
// hundred rows each (a batch may hold a hundred thousand orders), all in
// one transaction (a savepoint inside Tx). An order number given twice is
// one item.
func (s *Store) CloseBatchCreate(ctx context.Context, b *lapse.CloseBatch, orderNos []string) (*lapse.CloseBatch, error) {
	id, err := write(ctx, s, func(w *Store) (int64, error) {
		res, err := w.exec(ctx, `INSERT INTO close_batches (selector, reason, created_by, approval_id, created_at, status,
			total, closed, skipped, failed, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			b.Selector, b.Reason, b.CreatedBy, b.ApprovalID, column.Micros(b.CreatedAt), string(b.Status), b.Total,
			b.Closed, b.Skipped, b.Failed, column.ZeroMicros(b.FinishedAt))
		if err != nil {
			return 0, err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return 0, err
		}
		// A repeated order number meets its first row's key: the no-op
		// update keeps that row, and fails nothing else, as IGNORE would.
		ins := w.inserts(`INSERT INTO close_items (batch_id, order_no, status, detail) VALUES `, values(4))
		ins.suffix = ` ON DUPLICATE KEY UPDATE status = status`
		for _, no := range orderNos {
			if err := ins.add(ctx, id, no, string(lapse.CloseItemPending), ""); err != nil {
				return 0, err
			}
		}
		return id, ins.flush(ctx)
	})
	if err != nil {
		return nil, fail(err, "create close batch of %d orders", len(orderNos))
	}
	out := *b
	out.ID, out.Selector = id, bytes.Clone(b.Selector)
	out.CreatedAt, out.FinishedAt = kept(b.CreatedAt), kept(b.FinishedAt)
	return &out, nil
}

// CloseBatchGet returns the batch with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) CloseBatchGet(ctx context.Context, id int64) (*lapse.CloseBatch, error) {
	b, err := scanCloseBatch(s.queryRow(ctx, `SELECT `+closeBatchCols+` FROM close_batches WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, accessNotFound("no close batch %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get close batch %d: %w", id, err)
	}
	return b, nil
}

// CloseBatchList returns the batches p asks for by id, descending.
func (s *Store) CloseBatchList(ctx context.Context, p *lapse.CloseBatchListParams) ([]*lapse.CloseBatch, error) {
	var q strings.Builder
	var args []any
	q.WriteString(`SELECT ` + closeBatchCols + ` FROM close_batches WHERE TRUE`)
	if p.Status != "" {
		q.WriteString(" AND status = ?")
		args = append(args, string(p.Status))
	}
	if p.Before > 0 {
		q.WriteString(" AND id < ?")
		args = append(args, p.Before)
	}
	q.WriteString(" ORDER BY id DESC")
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	bs, err := queryAll(ctx, s, scanCloseBatch, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list close batches: %w", err)
	}
	return bs, nil
}

// CloseBatchLock locks the batch's row, inside Tx, with a locking read:
// LOCK IN SHARE MODE (which MySQL and MariaDB both know) or FOR UPDATE.
func (s *Store) CloseBatchLock(ctx context.Context, id int64, share bool) error {
	if s.tx == nil {
		return nil
	}
	mode := ` FOR UPDATE`
	if share {
		mode = ` LOCK IN SHARE MODE`
	}
	var got int64
	err := s.queryRow(ctx, `SELECT id FROM close_batches WHERE id = ?`+mode, id).Scan(&got)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("mysql: lock close batch %d: %w", id, err)
	}
	return nil
}

// CloseBatchUpdate writes b's status, counts and finish, or returns an
// error wrapping lapse.ErrAccessNotFound when there is no batch b.ID.
func (s *Store) CloseBatchUpdate(ctx context.Context, b *lapse.CloseBatch) error {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `UPDATE close_batches SET status = ?, total = ?, closed = ?, skipped = ?, failed = ?,
			finished_at = ? WHERE id = ?`, string(b.Status), b.Total, b.Closed, b.Skipped, b.Failed, column.ZeroMicros(b.FinishedAt), b.ID)
	})
	if err != nil {
		return fmt.Errorf("mysql: update close batch %d: %w", b.ID, err)
	}
	if affected(res) == 0 {
		return accessNotFound("no close batch %d", b.ID)
	}
	return nil
}

// CloseItemList returns a batch's items by order number.
func (s *Store) CloseItemList(ctx context.Context, batchID int64, status lapse.CloseItemStatus, after string, limit int) ([]*lapse.CloseItem, error) {
	q, args := closeItemListSQL(batchID, status, after, limit)
	items, err := queryAll(ctx, s, func(r scanner) (*lapse.CloseItem, error) {
		var it lapse.CloseItem
		if err := r.Scan(&it.BatchID, &it.OrderNo, (*string)(&it.Status), &it.Detail); err != nil {
			return nil, err
		}
		return &it, nil
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list the items of close batch %d: %w", batchID, err)
	}
	return items, nil
}

// closeItemListSQL is CloseItemList's query, which pages the batch's items
// on the table's key, or on close_items_status_idx for one status.
func closeItemListSQL(batchID int64, status lapse.CloseItemStatus, after string, limit int) (string, []any) {
	var q strings.Builder
	args := []any{batchID}
	q.WriteString(`SELECT batch_id, order_no, status, detail FROM close_items WHERE batch_id = ?`)
	if status != "" {
		q.WriteString(" AND status = ?")
		args = append(args, string(status))
	}
	q.WriteString(" AND order_no > ? ORDER BY order_no")
	args = append(args, after)
	if limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, limit)
	}
	return q.String(), args
}

// CloseItemUpdate writes the item's status and detail, or returns an error
// wrapping lapse.ErrAccessNotFound when the batch has no such item.
func (s *Store) CloseItemUpdate(ctx context.Context, it *lapse.CloseItem) error {
	res, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `UPDATE close_items SET status = ?, detail = ? WHERE batch_id = ? AND order_no = ?`,
			string(it.Status), it.Detail, it.BatchID, it.OrderNo)
	})
	if err != nil {
		return fmt.Errorf("mysql: update item %s of close batch %d: %w", it.OrderNo, it.BatchID, err)
	}
	if affected(res) == 0 {
		return accessNotFound("close batch %d has no order %q", it.BatchID, it.OrderNo)
	}
	return nil
}

// CloseItemCount counts a batch's items by status, reading
// close_items_status_idx alone. A status with no items has no entry.
func (s *Store) CloseItemCount(ctx context.Context, batchID int64) (map[lapse.CloseItemStatus]int64, error) {
	counts := map[lapse.CloseItemStatus]int64{}
	_, err := queryAll(ctx, s, func(r scanner) (struct{}, error) {
		var status string
		var n int64
		if err := r.Scan(&status, &n); err != nil {
			return struct{}{}, err
		}
		counts[lapse.CloseItemStatus(status)] = n
		return struct{}{}, nil
	}, `SELECT status, count(*) FROM close_items WHERE batch_id = ? GROUP BY status`, batchID)
	if err != nil {
		return nil, fmt.Errorf("mysql: count the items of close batch %d: %w", batchID, err)
	}
	return counts, nil
}
