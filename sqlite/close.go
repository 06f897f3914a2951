package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

const closeBatchCols = `id, selector, reason, created_by, approval_id, created_at, status, total, closed, skipped, failed, finished_at`

func scanCloseBatch(r scanner) (*lapse.CloseBatch, error) {
	var (
		b        lapse.CloseBatch
		created  int64
		finished sql.NullInt64
	)
	err := r.Scan(&b.ID, &b.Selector, &b.Reason, &b.CreatedBy, &b.ApprovalID, &created, (*string)(&b.Status),
		&b.Total, &b.Closed, &b.Skipped, &b.Failed, &finished)
	if err != nil {
		return nil, err
	}
	b.CreatedAt, b.FinishedAt = column.Time(created), column.ZeroTime(finished)
	return &b, nil
}

func closeBatchNotFound(id int64) error {
	return lapse.Refine(lapse.ErrAccessNotFound, "no close batch with id %d", id)
}

// CloseBatchCreate inserts b and one pending item per distinct order
// number, one statement a row.
func (s *Store) CloseBatchCreate(ctx context.Context, b *lapse.CloseBatch, orderNos []string) (*lapse.CloseBatch, error) {
	var got *lapse.CloseBatch
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanCloseBatch(w.tx.QueryRowContext(ctx, `INSERT INTO close_batches (selector, reason, created_by, approval_id,
			created_at, status, total, closed, skipped, failed, finished_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+closeBatchCols,
			nullBytes(b.Selector), b.Reason, b.CreatedBy, b.ApprovalID, column.Micros(b.CreatedAt), string(b.Status),
			b.Total, b.Closed, b.Skipped, b.Failed, column.ZeroMicros(b.FinishedAt)))
		if err != nil {
			return err
		}
		for _, no := range orderNos {
			if _, err := w.exec(ctx, `INSERT INTO close_items (batch_id, order_no, status, detail) VALUES (?, ?, ?, '')
				ON CONFLICT DO NOTHING`, got.ID, no, string(lapse.CloseItemPending)); err != nil {
				return fmt.Errorf("item %s: %w", no, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fail(err, "close batch create")
	}
	return got, nil
}

// CloseBatchGet returns the batch with id, or lapse.ErrAccessNotFound.
func (s *Store) CloseBatchGet(ctx context.Context, id int64) (*lapse.CloseBatch, error) {
	b, err := scanCloseBatch(s.db().QueryRowContext(ctx, `SELECT `+closeBatchCols+` FROM close_batches WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, closeBatchNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: close batch get %d: %w", id, err)
	}
	return b, nil
}

// CloseBatchList returns the batches of p.Status, by id descending.
func (s *Store) CloseBatchList(ctx context.Context, p *lapse.CloseBatchListParams) ([]*lapse.CloseBatch, error) {
	before := p.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	q, args := `SELECT `+closeBatchCols+` FROM close_batches WHERE id < ? ORDER BY id DESC LIMIT ?`, []any{before, sqlLimit(p.Limit)}
	if p.Status != "" {
		q, args = `SELECT `+closeBatchCols+` FROM close_batches WHERE status = ? AND id < ? ORDER BY id DESC LIMIT ?`,
			[]any{string(p.Status), before, sqlLimit(p.Limit)}
	}
	bs, err := queryAll(ctx, s.db(), scanCloseBatch, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: close batch list: %w", err)
	}
	return bs, nil
}

// CloseBatchLock does nothing: inside Tx the transaction holds the write
// lock of the whole database from its start, which is every batch's lock.
func (s *Store) CloseBatchLock(ctx context.Context, id int64, share bool) error { return nil }

// CloseBatchUpdate writes b's status, counts and finish, or returns
// lapse.ErrAccessNotFound.
func (s *Store) CloseBatchUpdate(ctx context.Context, b *lapse.CloseBatch) error {
	err := s.write(ctx, func(w *writeTx) error {
		return updateOne(ctx, w, closeBatchNotFound(b.ID), `UPDATE close_batches SET status = ?, total = ?, closed = ?,
			skipped = ?, failed = ?, finished_at = ? WHERE id = ?`,
			string(b.Status), b.Total, b.Closed, b.Skipped, b.Failed, column.ZeroMicros(b.FinishedAt), b.ID)
	})
	if err != nil {
		return fail(err, "close batch update %d", b.ID)
	}
	return nil
}

func scanCloseItem(r scanner) (*lapse.CloseItem, error) {
	var it lapse.CloseItem
	if err := r.Scan(&it.BatchID, &it.OrderNo, (*string)(&it.Status), &it.Detail); err != nil {
		return nil, err
	}
	return &it, nil
}

// CloseItemList returns a page of a batch's items by order number.
func (s *Store) CloseItemList(ctx context.Context, batchID int64, status lapse.CloseItemStatus, after string, limit int) ([]*lapse.CloseItem, error) {
	q, args := `SELECT batch_id, order_no, status, detail FROM close_items
		WHERE batch_id = ? AND order_no > ? ORDER BY order_no LIMIT ?`, []any{batchID, after, sqlLimit(limit)}
	if status != "" {
		q, args = `SELECT batch_id, order_no, status, detail FROM close_items
			WHERE batch_id = ? AND status = ? AND order_no > ? ORDER BY order_no LIMIT ?`,
			[]any{batchID, string(status), after, sqlLimit(limit)}
	}
	its, err := queryAll(ctx, s.db(), scanCloseItem, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: close item list of batch %d: %w", batchID, err)
	}
	return its, nil
}

// CloseItemUpdate writes an item's status and detail, or returns
// lapse.ErrAccessNotFound.
func (s *Store) CloseItemUpdate(ctx context.Context, it *lapse.CloseItem) error {
	err := s.write(ctx, func(w *writeTx) error {
		return updateOne(ctx, w, lapse.Refine(lapse.ErrAccessNotFound, "no item %s in close batch %d", it.OrderNo, it.BatchID),
			`UPDATE close_items SET status = ?, detail = ? WHERE batch_id = ? AND order_no = ?`,
			string(it.Status), it.Detail, it.BatchID, it.OrderNo)
	})
	if err != nil {
		return fail(err, "close item update %d %s", it.BatchID, it.OrderNo)
	}
	return nil
}

// CloseItemCount counts a batch's items by status; statuses of no item are
// absent.
func (s *Store) CloseItemCount(ctx context.Context, batchID int64) (map[lapse.CloseItemStatus]int64, error) {
	rows, err := s.db().QueryContext(ctx, `SELECT status, count(*) FROM close_items WHERE batch_id = ? GROUP BY status`, batchID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: close item count of batch %d: %w", batchID, err)
	}
	defer rows.Close()
	n := map[lapse.CloseItemStatus]int64{}
	for rows.Next() {
		var (
			st    string
			count int64
		)
		if err := rows.Scan(&st, &count); err != nil {
			return nil, fmt.Errorf("sqlite: close item count of batch %d: %w", batchID, err)
		}
		n[lapse.CloseItemStatus(st)] = count
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: close item count of batch %d: %w", batchID, err)
	}
	return n, nil
}
