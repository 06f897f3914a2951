package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// orderCols are the columns scanOrder reads, in its order.
const orderCols = `id, order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon,
	metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash, intent_at, intent_provider, pay_by, closed_deadline_at`

// orderInsert inserts new orders at version 1, one row of orderArgs each.
const orderInsert = `INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items,
	coupon, metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash) VALUES `

// orderRow is the placeholders of one row of orderInsert.
const orderRow = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)"

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

// lockOrder locks the row of the order id until the transaction ends,
// before a method writes a row that references the order. InnoDB checks a
// foreign key under a shared lock of the row it references; a transaction
// that then changes the order (a member joins a group, a payment or a
// refund moves its order) would need to upgrade that lock, and two of them
// at once would deadlock. Taken exclusively first, the lock makes them take
// turns. PostgreSQL's key-share lock does not conflict with an update, so
// its store needs none. An order that does not exist is left to the foreign
// key to refuse.
func (w *Store) lockOrder(ctx context.Context, id int64) error {
	var one int
	err := w.queryRow(ctx, `SELECT 1 FROM orders WHERE id = ? FOR UPDATE`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// orderByID reads the order with id, as the Store's transaction sees it.
func (s *Store) orderByID(ctx context.Context, id int64) (*lapse.Order, error) {
	return scanOrder(s.queryRow(ctx, `SELECT `+orderCols+` FROM orders WHERE id = ?`, id))
}

// OrderCreate inserts the order at version 1 with its creation log row,
// outbox rows and their deliveries in one transaction, and returns it as
// stored, with created=true. When the order_no is taken it writes nothing
// and returns the order that holds it, with created=false: an insert that
// meets a concurrent one of the same order_no waits for it, and the read
// that follows sees it committed, so of concurrent creators exactly one
// creates. The order ids in p.Log and p.Outbox are ignored: the rows get
// the new order's id.
func (s *Store) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	type result struct {
		o       *lapse.Order
		created bool
	}
	r, err := write(ctx, s, func(w *Store) (result, error) {
		res, err := w.exec(ctx, orderInsert+orderRow, orderArgs(p.Order)...)
		if isDuplicateKey(err, "orders_order_no_key") {
			o, err := scanOrder(w.queryRow(ctx, `SELECT `+orderCols+` FROM orders WHERE order_no = ?`, p.Order.OrderNo))
			return result{o, false}, err
		}
		if err != nil {
			return result{}, err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return result{}, err
		}
		if err := w.created(ctx, []int64{id}, []*lapse.OrderCreateParams{p}); err != nil {
			return result{}, err
		}
		o, err := w.orderByID(ctx, id)
		return result{o, true}, err
	})
	if err != nil {
		return nil, false, fail(err, "create order %s", p.Order.OrderNo)
	}
	return r.o, r.created, nil
}

// OrderCreateMany inserts the orders, each at version 1 with its creation
// log row, outbox rows and their deliveries, in one transaction (the
// caller's, inside Tx), with multi-row INSERTs. If an order_no exists, in
// the database or twice in ps, it returns an ECONFLICT error that names it
// and writes nothing.
func (s *Store) OrderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	if len(ps) == 0 {
		return nil
	}
	_, err := write(ctx, s, func(w *Store) (struct{}, error) {
		for chunk := range slices.Chunk(ps, batchRows) {
			if err := w.orderCreateMany(ctx, chunk); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if isDuplicateKey(err, "orders_order_no_key") {
		return fmt.Errorf("mysql: create %d orders: %w", len(ps), lapse.Errorf(lapse.ECONFLICT, "order_no already used: %s", errorMessage(err)))
	}
	if err != nil {
		return fmt.Errorf("mysql: create %d orders: %w", len(ps), err)
	}
	return nil
}

func (w *Store) orderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	ins := w.inserts(orderInsert, orderRow)
	nos := make([]any, len(ps))
	for i, p := range ps {
		if err := ins.add(ctx, orderArgs(p.Order)...); err != nil {
			return err
		}
		nos[i] = p.Order.OrderNo
	}
	if err := ins.flush(ctx); err != nil {
		return err
	}
	// AUTO_INCREMENT values of one multi-row INSERT need not be consecutive
	// (innodb_autoinc_lock_mode=2, MySQL's default): read them back.
	type idNo struct {
		id int64
		no string
	}
	got, err := queryAll(ctx, w, func(r scanner) (idNo, error) {
		var x idNo
		err := r.Scan(&x.id, &x.no)
		return x, err
	}, `SELECT id, order_no FROM orders WHERE order_no IN (`+marks(len(nos))+`)`, nos...)
	if err != nil {
		return err
	}
	byNo := make(map[string]int64, len(got))
	for _, x := range got {
		byNo[x.no] = x.id
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		if ids[i] = byNo[p.Order.OrderNo]; ids[i] == 0 {
			return fmt.Errorf("order %s: not found after its insert", p.Order.OrderNo)
		}
	}
	return w.created(ctx, ids, ps)
}

// created writes the creation log rows and the outbox rows of the new
// orders ids, one per params.
func (w *Store) created(ctx context.Context, ids []int64, ps []*lapse.OrderCreateParams) error {
	log := w.inserts(transitionInsert, values(9))
	var evs []event
	for i, p := range ps {
		l := &p.Log
		// Version 1: the store gives a new order its first version.
		if err := log.add(ctx, ids[i], string(l.FromState), string(l.ToState), string(l.Event), int64(1),
			string(l.FiredBy), l.Actor, l.Reason, column.Micros(l.CreatedAt)); err != nil {
			return err
		}
		evs = appendEvents(evs, ids[i], p.Outbox)
	}
	if err := log.flush(ctx); err != nil {
		return err
	}
	return w.outbox(ctx, evs)
}

// OrderGet returns the order with orderNo, or lapse.ErrOrderNotFound.
func (s *Store) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	return s.orderGet(ctx, orderNo, "")
}

// OrderLock returns the order with order_no and, inside Tx, locks its row
// (FOR UPDATE) until the transaction ends: no other transaction changes the
// order meanwhile, and claimers, which skip locked rows, skip it. Outside
// Tx it is OrderGet.
func (s *Store) OrderLock(ctx context.Context, orderNo string) (*lapse.Order, error) {
	if s.tx == nil {
		return s.OrderGet(ctx, orderNo)
	}
	return s.orderGet(ctx, orderNo, " FOR UPDATE")
}

func (s *Store) orderGet(ctx context.Context, orderNo, lock string) (*lapse.Order, error) {
	o, err := scanOrder(s.queryRow(ctx, `SELECT `+orderCols+` FROM orders WHERE order_no = ?`+lock, orderNo))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.ErrOrderNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get order %s: %w", orderNo, err)
	}
	return o, nil
}

// OrderList returns the orders that match p, newest first (created_at, then
// id, descending), at most p.Limit of them; a Limit of zero or less does not
// limit. Paging with p.Before is a seek on the (…, created_at, id) indexes,
// read backwards.
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
		where, args = append(where, "order_no NOT LIKE ?"), append(args, lapse.ProbeOrderPrefix+"%")
	}
	if p.Before != nil {
		// Spelled out rather than as a row comparison, which MySQL's range
		// optimizer does not turn into a range of the index.
		at := column.Micros(p.Before.CreatedAt)
		where, args = append(where, "(created_at < ? OR (created_at = ? AND id < ?))"), append(args, at, at, p.Before.ID)
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + orderCols + ` FROM orders`)
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, p.Limit)
	}
	orders, err := queryAll(ctx, s, scanOrder, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list orders: %w", err)
	}
	return orders, nil
}
