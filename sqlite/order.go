package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// orderCols are the columns scanOrder reads, in its order.
const orderCols = `id, order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon,
	metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash, intent_at, intent_provider, pay_by, closed_deadline_at`

// orderInsert inserts a new order at version 1, or nothing when its order_no
// is taken; the arguments are orderArgs.
const orderInsert = `INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items,
	coupon, metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (order_no) DO NOTHING`

func orderArgs(o *lapse.Order) []any {
	var items, metadata any // NULL when empty, so that both read back as nil
	if b := column.Items(o.Items); b != nil {
		items = string(b)
	}
	if len(o.Metadata) > 0 {
		metadata = string(o.Metadata)
	}
	return []any{o.OrderNo, o.Flow, string(o.State), column.NullMicros(o.DeadlineAt), o.Amount, o.Currency, o.UserID,
		items, o.Coupon, metadata, column.Micros(o.CreatedAt), column.Micros(o.UpdatedAt), column.NullMicros(o.ClosedAt),
		o.CloseReason, string(o.FiredBy), o.RequestHash}
}

type scanner interface{ Scan(dest ...any) error }

// scanOrder reads a row of orderCols.
func scanOrder(r scanner) (*lapse.Order, error) {
	var (
		o                               lapse.Order
		deadline, closed, intent, payBy sql.NullInt64
		closedDeadline                  sql.NullInt64
		created, updated                int64
		items, metadata                 []byte
	)
	err := r.Scan(&o.ID, &o.OrderNo, &o.Flow, (*string)(&o.State), &deadline, &o.Amount, &o.Currency, &o.UserID,
		&items, &o.Coupon, &metadata, &o.Version, &created, &updated, &closed, &o.CloseReason,
		(*string)(&o.FiredBy), &o.RequestHash, &intent, &o.IntentProvider, &payBy, &closedDeadline)
	if err != nil {
		return nil, err
	}
	o.DeadlineAt, o.ClosedAt, o.IntentAt = column.NullTime(deadline), column.NullTime(closed), column.NullTime(intent)
	o.PayBy, o.ClosedDeadlineAt = column.NullTime(payBy), column.NullTime(closedDeadline)
	o.CreatedAt, o.UpdatedAt = column.Time(created), column.Time(updated)
	if o.Items, err = column.ParseItems(items); err != nil {
		return nil, fmt.Errorf("order %s: items: %w", o.OrderNo, err)
	}
	if len(metadata) > 0 {
		o.Metadata = metadata
	}
	return &o, nil
}

func queryOrders(ctx context.Context, q queryer, query string, args ...any) ([]*lapse.Order, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*lapse.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// OrderCreate inserts the order at version 1 with its creation log row and
// outbox rows, and returns it as stored, with created=true. When the order_no
// is taken it writes nothing and returns the order that holds it, with
// created=false. It does not change p. The order ids in p.Log and p.Outbox
// are ignored: the rows get the new order's id.
func (s *Store) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (o *lapse.Order, created bool, err error) {
	err = s.write(ctx, func(w *writeTx) error {
		var err error
		o, err = scanOrder(w.tx.QueryRowContext(ctx, orderInsert+` RETURNING `+orderCols, orderArgs(p.Order)...))
		if errors.Is(err, sql.ErrNoRows) {
			o, err = scanOrder(w.tx.QueryRowContext(ctx, `SELECT `+orderCols+` FROM orders WHERE order_no = ?`, p.Order.OrderNo))
			return err
		}
		if err != nil {
			return err
		}
		created = true
		return w.created(ctx, o.ID, p)
	})
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: order create %s: %w", p.Order.OrderNo, err)
	}
	return o, created, nil
}

// OrderCreateMany inserts the orders, each at version 1 with its creation log
// row and outbox rows, in one transaction. If an order_no exists, in the
// database or twice in ps, it returns an ECONFLICT error that names it and
// writes nothing.
func (s *Store) OrderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	if len(ps) == 0 {
		return nil
	}
	err := s.write(ctx, func(w *writeTx) error {
		for _, p := range ps {
			res, err := w.exec(ctx, orderInsert, orderArgs(p.Order)...)
			if err != nil {
				return fmt.Errorf("order %s: %w", p.Order.OrderNo, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return lapse.Errorf(lapse.ECONFLICT, "order_no %s already exists", p.Order.OrderNo)
			}
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			if err := w.created(ctx, id, p); err != nil {
				return fmt.Errorf("order %s: %w", p.Order.OrderNo, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: order create many: %w", err)
	}
	return nil
}

// created writes the creation log row and outbox rows of the new order id.
func (w *writeTx) created(ctx context.Context, id int64, p *lapse.OrderCreateParams) error {
	rec := p.Log
	rec.Version = 1
	if err := w.logTransition(ctx, id, &rec); err != nil {
		return err
	}
	return w.outbox(ctx, id, p.Outbox)
}

// OrderGet returns the order with orderNo, or lapse.ErrOrderNotFound.
func (s *Store) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	o, err := scanOrder(s.db().QueryRowContext(ctx, `SELECT `+orderCols+` FROM orders WHERE order_no = ?`, orderNo))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.ErrOrderNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: order get %s: %w", orderNo, err)
	}
	return o, nil
}

// OrderLock returns the order with order_no. SQLite has no row locks; inside
// Tx the transaction holds the database's only write lock from its start,
// which is stronger: nothing changes the order until it ends.
func (s *Store) OrderLock(ctx context.Context, orderNo string) (*lapse.Order, error) {
	return s.OrderGet(ctx, orderNo)
}

// OrderList returns the orders that match p, newest first (created_at, then
// id, descending), at most p.Limit of them; a Limit of zero or less does not
// limit.
func (s *Store) OrderList(ctx context.Context, p *lapse.OrderListParams) ([]*lapse.Order, error) {
	var where []string
	var args []any
	if p.State != "" {
		where, args = append(where, "state = ?"), append(args, string(p.State))
	}
	if p.UserID != "" {
		where, args = append(where, "user_id = ?"), append(args, p.UserID)
	}
	if p.Flow != "" {
		where, args = append(where, "flow = ?"), append(args, p.Flow)
	}
	if p.CreatedFrom != nil {
		where, args = append(where, "created_at >= ?"), append(args, column.Micros(lapse.Ceil(*p.CreatedFrom)))
	}
	if p.CreatedTo != nil {
		where, args = append(where, "created_at < ?"), append(args, column.Micros(lapse.Ceil(*p.CreatedTo)))
	}
	if !p.Probes {
		// GLOB, not LIKE, which ignores case here: LAPSE-PROBE-1 is a
		// merchant's order.
		where, args = append(where, "order_no NOT GLOB ?"), append(args, lapse.ProbeOrderPrefix+"*")
	}
	if p.Before != nil {
		where, args = append(where, "(created_at, id) < (?, ?)"), append(args, column.Micros(p.Before.CreatedAt), p.Before.ID)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + orderCols + ` FROM orders`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC LIMIT ?")
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	args = append(args, limit)
	orders, err := queryOrders(ctx, s.db(), q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: order list: %w", err)
	}
	return orders, nil
}
