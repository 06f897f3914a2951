package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const closeBatchColumns = `id, selector, reason, created_by, approval_id, created_at, status, total, closed, skipped,
	failed, finished_at`

func scanCloseBatch(row pgx.Row) (*lapse.CloseBatch, error) {
	var (
		b        lapse.CloseBatch
		finished *time.Time
	)
	err := row.Scan(&b.ID, &b.Selector, &b.Reason, &b.CreatedBy, &b.ApprovalID, &b.CreatedAt, &b.Status, &b.Total,
		&b.Closed, &b.Skipped, &b.Failed, &finished)
	if err != nil {
		return nil, err
	}
	b.CreatedAt, b.FinishedAt = b.CreatedAt.UTC(), timeOf(finished)
	return &b, nil
}

// closeItemChunk bounds the items of one COPY, so that each statement of a
// batch of any size finishes well within the statement timeout.
const closeItemChunk = 10_000

// CloseBatchCreate inserts b and then its items, one pending item per
// distinct order number, by COPY, in one transaction (a savepoint of the
// caller's, inside Tx). The order numbers go in sorted, which makes one item
// of a number given twice (COPY has no ON CONFLICT) and fills the indexes
// in their order. The batch keeps the Total it was given.
func (s *Store) CloseBatchCreate(ctx context.Context, b *lapse.CloseBatch, orderNos []string) (*lapse.CloseBatch, error) {
	orderNos = slices.Compact(slices.Sorted(slices.Values(orderNos)))
	var got *lapse.CloseBatch
	err := s.Tx(ctx, func(tx lapse.Store) error {
		db := tx.(*Store).db
		var err error
		got, err = scanCloseBatch(db.QueryRow(ctx, `INSERT INTO close_batches (selector, reason, created_by, approval_id,
			created_at, status, total, closed, skipped, failed, finished_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING `+closeBatchColumns,
			b.Selector, b.Reason, b.CreatedBy, b.ApprovalID, b.CreatedAt, b.Status, b.Total, b.Closed, b.Skipped,
			b.Failed, nullTime(b.FinishedAt)))
		if err != nil {
			return err
		}
		pending := string(lapse.CloseItemPending)
		for chunk := range slices.Chunk(orderNos, closeItemChunk) {
			_, err := db.CopyFrom(ctx, pgx.Identifier{"close_items"}, []string{"batch_id", "order_no", "status", "detail"},
				pgx.CopyFromSlice(len(chunk), func(i int) ([]any, error) { return []any{got.ID, chunk[i], pending, ""}, nil }))
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: create close batch of %d orders: %w", len(orderNos), err)
	}
	return got, nil
}

// CloseBatchGet returns the batch with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (s *Store) CloseBatchGet(ctx context.Context, id int64) (*lapse.CloseBatch, error) {
	b, err := scanCloseBatch(s.db.QueryRow(ctx, `SELECT `+closeBatchColumns+` FROM close_batches WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no close batch %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get close batch %d: %w", id, err)
	}
	return b, nil
}

// CloseBatchList returns batches newest (highest id) first.
func (s *Store) CloseBatchList(ctx context.Context, p *lapse.CloseBatchListParams) ([]*lapse.CloseBatch, error) {
	var f filter
	if p.Status != "" {
		f.add("status = ", p.Status)
	}
	if p.Before > 0 {
		f.add("id < ", p.Before)
	}
	q := `SELECT ` + closeBatchColumns + ` FROM close_batches` + f.sql() + ` ORDER BY id DESC LIMIT ` + f.arg(limitArg(p.Limit))
	rows, err := s.db.Query(ctx, q, f.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list close batches: %w", err)
	}
	bs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.CloseBatch, error) { return scanCloseBatch(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list close batches: %w", err)
	}
	return bs, nil
}

// CloseBatchLock locks the batch's row, inside Tx, FOR SHARE or FOR
// UPDATE.
func (s *Store) CloseBatchLock(ctx context.Context, id int64, share bool) error {
	if s.tx == nil {
		return nil
	}
	mode := ` FOR UPDATE`
	if share {
		mode = ` FOR SHARE`
	}
	if _, err := s.db.Exec(ctx, `SELECT id FROM close_batches WHERE id = $1`+mode, id); err != nil {
		return fmt.Errorf("postgres: lock close batch %d: %w", id, err)
	}
	return nil
}

// CloseBatchUpdate writes b's status, counts and finish time; a missing
// batch is lapse.ErrAccessNotFound.
func (s *Store) CloseBatchUpdate(ctx context.Context, b *lapse.CloseBatch) error {
	tag, err := s.db.Exec(ctx, `UPDATE close_batches SET status = $2, total = $3, closed = $4, skipped = $5, failed = $6,
		finished_at = $7 WHERE id = $1`, b.ID, b.Status, b.Total, b.Closed, b.Skipped, b.Failed, nullTime(b.FinishedAt))
	if err != nil {
		return fmt.Errorf("postgres: update close batch %d: %w", b.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Refine(lapse.ErrAccessNotFound, "no close batch %d", b.ID)
	}
	return nil
}

// CloseItemList returns a page of a batch's items by order number, read
// from the primary key, or from close_items_status_idx for one status.
func (s *Store) CloseItemList(ctx context.Context, batchID int64, status lapse.CloseItemStatus, after string, limit int) ([]*lapse.CloseItem, error) {
	q, args := closeItemListQuery(batchID, status, after, limit)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list items of close batch %d: %w", batchID, err)
	}
	its, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.CloseItem, error) {
		var it lapse.CloseItem
		return &it, row.Scan(&it.BatchID, &it.OrderNo, &it.Status, &it.Detail)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list items of close batch %d: %w", batchID, err)
	}
	return its, nil
}

// closeItemListQuery is the statement of CloseItemList and its arguments.
func closeItemListQuery(batchID int64, status lapse.CloseItemStatus, after string, limit int) (string, []any) {
	var f filter
	f.add("batch_id = ", batchID)
	if status != "" {
		f.add("status = ", status)
	}
	if after != "" {
		f.add("order_no > ", after)
	}
	return `SELECT batch_id, order_no, status, detail FROM close_items` + f.sql() + ` ORDER BY order_no LIMIT ` + f.arg(limitArg(limit)), f.args
}

// CloseItemUpdate writes the item's status and detail; a missing item is
// lapse.ErrAccessNotFound.
func (s *Store) CloseItemUpdate(ctx context.Context, it *lapse.CloseItem) error {
	tag, err := s.db.Exec(ctx, `UPDATE close_items SET status = $3, detail = $4 WHERE batch_id = $1 AND order_no = $2`,
		it.BatchID, it.OrderNo, it.Status, it.Detail)
	if err != nil {
		return fmt.Errorf("postgres: update item %s of close batch %d: %w", it.OrderNo, it.BatchID, err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Refine(lapse.ErrAccessNotFound, "close batch %d has no order %s", it.BatchID, it.OrderNo)
	}
	return nil
}

// CloseItemCount counts a batch's items by status, from
// close_items_status_idx. A status no item is in is absent from the map.
func (s *Store) CloseItemCount(ctx context.Context, batchID int64) (map[lapse.CloseItemStatus]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT status, count(*) FROM close_items WHERE batch_id = $1 GROUP BY status`, batchID)
	if err != nil {
		return nil, fmt.Errorf("postgres: count items of close batch %d: %w", batchID, err)
	}
	counts := map[lapse.CloseItemStatus]int64{}
	var (
		status lapse.CloseItemStatus
		n      int64
	)
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		counts[status] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: count items of close batch %d: %w", batchID, err)
	}
	return counts, nil
}
