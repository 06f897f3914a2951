package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// orderColumns is the column list every order read uses, in scanOrder's order.
const orderColumns = `id, order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon,
	metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash, intent_at, intent_provider, pay_by, closed_deadline_at`

// orderColumnsOf returns orderColumns qualified by the table alias t, for
// queries that join orders to a table with columns of the same names.
func orderColumnsOf(t string) string {
	cols := strings.Split(orderColumns, ",")
	for i, c := range cols {
		cols[i] = t + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// scanOrder reads one row of orderColumns.
func scanOrder(row pgx.Row) (*lapse.Order, error) {
	var o lapse.Order
	var items, meta []byte
	if err := row.Scan(&o.ID, &o.OrderNo, &o.Flow, &o.State, &o.DeadlineAt, &o.Amount, &o.Currency, &o.UserID,
		&items, &o.Coupon, &meta, &o.Version, &o.CreatedAt, &o.UpdatedAt, &o.ClosedAt, &o.CloseReason,
		&o.FiredBy, &o.RequestHash, &o.IntentAt, &o.IntentProvider, &o.PayBy, &o.ClosedDeadlineAt); err != nil {
		return nil, err
	}
	var err error
	if o.Items, err = column.ParseItems(items); err != nil {
		return nil, fmt.Errorf("order %s: items: %w", o.OrderNo, err)
	}
	if len(meta) > 0 {
		o.Metadata = meta
	}
	// pgx returns times in the local zone; Lapse keeps UTC.
	o.CreatedAt, o.UpdatedAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC()
	for _, t := range [...]*time.Time{o.DeadlineAt, o.ClosedAt, o.IntentAt, o.PayBy, o.ClosedDeadlineAt} {
		if t != nil {
			*t = t.UTC() // in place: Scan made each of them for this row
		}
	}
	return &o, nil
}

// scanOrders reads every row of orderColumns, through decodeOrderRow when
// the rows come as it reads them.
func scanOrders(rows pgx.Rows) ([]*lapse.Order, error) {
	return scanOrdersAs(rows, readPicked)
}

// orderRead is how scanOrdersAs reads rows of orderColumns.
type orderRead int

const (
	readPicked  orderRead = iota // decoded when the rows allow it, else scanned
	readScanned                  // through pgx's scan
	readDecoded                  // through decodeOrderRow; rows it cannot read are an error
)

// scanOrdersAs reads every row of orderColumns as how says: the store
// always picks, and the tests that compare the two ways name one.
func scanOrdersAs(rows pgx.Rows, how orderRead) ([]*lapse.Order, error) {
	defer rows.Close()
	var out []*lapse.Order
	decode, known := false, false
	for rows.Next() {
		if !known { // the descriptions are there once a row is
			known = true
			ok := orderRowDecodable(rows.FieldDescriptions())
			if how == readDecoded && !ok {
				return nil, fmt.Errorf("postgres: rows of %v cannot be decoded as orders", rows.FieldDescriptions())
			}
			decode = ok && how != readScanned
		}
		var o *lapse.Order
		var err error
		if decode {
			o, err = decodeOrderRow(rows.FieldDescriptions(), rows.RawValues())
		} else {
			o, err = scanOrder(rows)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// metadataArg is the json value of metadata: NULL when empty.
func metadataArg(m json.RawMessage) []byte {
	if len(m) == 0 {
		return nil
	}
	return m
}

// orderCreateSQL inserts the order unless its order_no exists, and with it
// its deadline row, creation log row, outbox rows and deliveries, which read
// the id from the insert. When the order exists, the insert returns nothing,
// so nothing else is written.
var orderCreateSQL = `WITH o AS (
	INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon,
		metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11, $12, $13, $14, $15, $16)
	ON CONFLICT (order_no) DO NOTHING
	RETURNING ` + orderColumns + `
), od AS (
	INSERT INTO order_deadlines (order_id, deadline_at, flow)
	SELECT id, deadline_at, flow FROM o WHERE deadline_at IS NOT NULL
), t AS (
	INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
	SELECT o.id, $17, $18, $19, o.version, $20, $21, $22, $23 FROM o
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, o.id, e.order_no, e.type, e.payload, e.created_at
	FROM o, ` + oneOrderEvents(24) + `
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), ` + oneOrderDeliveriesCTE("d", 29, 30) + `
SELECT ` + orderColumns + ` FROM o`

// OrderCreate inserts the order at version 1 with its creation log row (at
// that version), outbox rows and their deliveries in one statement and
// returns it with created=true. If an
// order with the same order_no exists it writes nothing and returns that
// order with created=false; of concurrent creators of one order_no exactly
// one creates. Outside Tx, concurrent calls share statements and commits
// (order_create_batch.go).
func (s *Store) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	if s.orderCreates != nil && s.tx == nil {
		return s.orderCreateBatched(ctx, createCall{p: p})
	}
	return s.orderCreate(ctx, p)
}

// orderCreate is OrderCreate's own statement.
func (s *Store) orderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	o, l := p.Order, &p.Log
	items := column.Items(o.Items)
	var ev outboxArgs
	if err := ev.add(0, p.Outbox); err != nil {
		return nil, false, fmt.Errorf("postgres: create order %s: %w", o.OrderNo, err)
	}
	got, err := scanOrder(s.db.QueryRow(ctx, orderCreateSQL,
		o.OrderNo, o.Flow, o.State, o.DeadlineAt, o.Amount, o.Currency, o.UserID, items, o.Coupon,
		metadataArg(o.Metadata), o.CreatedAt, o.UpdatedAt, o.ClosedAt, o.CloseReason, o.FiredBy, o.RequestHash,
		l.FromState, l.ToState, l.Event, l.FiredBy, l.Actor, l.Reason, l.CreatedAt,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("postgres: create order %s: %w", o.OrderNo, err)
	}
	// The order_no exists. In READ COMMITTED this read takes a new snapshot,
	// which sees the winner that the insert waited for.
	got, err = s.OrderGet(ctx, o.OrderNo)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: create order %s: read the existing order: %w", o.OrderNo, err)
	}
	return got, false, nil
}

// OrderGet returns the order with order_no, or lapse.ErrOrderNotFound.
func (s *Store) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	if s.orderReads != nil && s.tx == nil {
		return s.orderGetBatched(ctx, orderNo)
	}
	return s.orderGet(ctx, orderNo)
}

// OrderLock returns the order with order_no and, inside Tx, holds the lock
// the closing UPDATE takes (FOR NO KEY UPDATE) until the transaction ends.
func (s *Store) OrderLock(ctx context.Context, orderNo string) (*lapse.Order, error) {
	if s.tx == nil {
		return s.OrderGet(ctx, orderNo)
	}
	o, err := scanOrder(s.db.QueryRow(ctx, "SELECT "+orderColumns+" FROM orders WHERE order_no = $1 FOR NO KEY UPDATE", orderNo))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrOrderNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: lock order %s: %w", orderNo, err)
	}
	return o, nil
}

// OrderList returns orders matching p, newest first (created_at, then id,
// descending), at most p.Limit of them; a Limit of zero or less does not
// limit. Paging with p.Before is a keyset seek, as cheap on the last page as
// on the first.
func (s *Store) OrderList(ctx context.Context, p *lapse.OrderListParams) ([]*lapse.Order, error) {
	var where []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if p.State != "" {
		add("state = ?", p.State)
	}
	if p.UserID != "" {
		add("user_id = ?", p.UserID)
	}
	if p.Flow != "" {
		add("flow = ?", p.Flow)
	}
	if p.CreatedFrom != nil {
		add("created_at >= ?", lapse.Ceil(*p.CreatedFrom))
	}
	if p.CreatedTo != nil {
		add("created_at < ?", lapse.Ceil(*p.CreatedTo))
	}
	if !p.Probes {
		add("order_no NOT LIKE ?", lapse.ProbeOrderPrefix+"%")
	}
	if p.Before != nil {
		// A row comparison, so that the (…, created_at DESC, id DESC)
		// indexes serve it as one range.
		add("(created_at, id) < (?, ?)", p.Before.CreatedAt, p.Before.ID)
	}
	var q strings.Builder
	q.WriteString("SELECT " + orderColumns + " FROM orders")
	if len(where) > 0 {
		q.WriteString(" WHERE " + strings.Join(where, " AND "))
	}
	q.WriteString(" ORDER BY created_at DESC, id DESC")
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q.WriteString(" LIMIT $" + strconv.Itoa(len(args)))
	}
	rows, err := s.db.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list orders: %w", err)
	}
	out, err := scanOrders(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list orders: %w", err)
	}
	return out, nil
}

// createManyChunk bounds the orders of one COPY, so that every statement of a
// bulk load of any size finishes well within the statement timeout.
const createManyChunk = 10_000

// OrderCreateMany inserts many new orders, each with its creation log row,
// outbox rows and their deliveries, in one transaction (a savepoint of the
// caller's, inside Tx). Rows go in by COPY, with ids drawn from the orders identity
// beforehand so that log, outbox and delivery rows can name their order. If
// any order_no exists, or appears twice in ps, it returns an ECONFLICT error
// and writes nothing.
func (s *Store) OrderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	if len(ps) == 0 {
		return nil
	}
	err := s.Tx(ctx, func(tx lapse.Store) error {
		for chunk := range slices.Chunk(ps, createManyChunk) {
			if err := tx.(*Store).orderCreateMany(ctx, chunk); err != nil {
				return err
			}
		}
		return nil
	})
	if pe, ok := isUniqueViolation(err, "orders_order_no_key"); ok {
		return fmt.Errorf("postgres: create %d orders: %w", len(ps), lapse.Errorf(lapse.ECONFLICT, "order_no already used: %s", pe.Detail))
	}
	if err != nil {
		return fmt.Errorf("postgres: create %d orders: %w", len(ps), err)
	}
	return nil
}

func (s *Store) orderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	ids, err := drawIDs(ctx, s.db, "orders", len(ps))
	if err != nil {
		return err
	}

	ev := newOutboxArgs(len(ps))
	for i, p := range ps {
		if err := ev.add(ids[i], p.Outbox); err != nil {
			return err
		}
	}
	_, err = s.db.CopyFrom(ctx, pgx.Identifier{"orders"},
		[]string{"id", "order_no", "flow", "state", "deadline_at", "amount", "currency", "user_id", "items", "coupon",
			"metadata", "version", "created_at", "updated_at", "closed_at", "close_reason", "fired_by", "request_hash"},
		pgx.CopyFromSlice(len(ps), func(i int) ([]any, error) {
			o := ps[i].Order
			return []any{ids[i], o.OrderNo, o.Flow, o.State, o.DeadlineAt, o.Amount, o.Currency, o.UserID, column.Items(o.Items), o.Coupon,
				metadataArg(o.Metadata), int64(1), o.CreatedAt, o.UpdatedAt, o.ClosedAt, o.CloseReason, o.FiredBy, o.RequestHash}, nil
		}))
	if err != nil {
		return err
	}
	var timed []int
	for i, p := range ps {
		if p.Order.DeadlineAt != nil {
			timed = append(timed, i)
		}
	}
	_, err = s.db.CopyFrom(ctx, pgx.Identifier{"order_deadlines"}, []string{"order_id", "deadline_at", "flow"},
		pgx.CopyFromSlice(len(timed), func(j int) ([]any, error) {
			o := ps[timed[j]].Order
			return []any{ids[timed[j]], o.DeadlineAt, o.Flow}, nil
		}))
	if err != nil {
		return err
	}
	_, err = s.db.CopyFrom(ctx, pgx.Identifier{"transitions"},
		[]string{"order_id", "from_state", "to_state", "event", "version", "fired_by", "actor", "reason", "created_at"},
		pgx.CopyFromSlice(len(ps), func(i int) ([]any, error) {
			l := &ps[i].Log
			return []any{ids[i], l.FromState, l.ToState, l.Event, int64(1), l.FiredBy, l.Actor, l.Reason, l.CreatedAt}, nil
		}))
	if err != nil {
		return err
	}
	_, err = s.db.CopyFrom(ctx, pgx.Identifier{"outbox"},
		[]string{"id", "order_id", "order_no", "type", "payload", "created_at"},
		pgx.CopyFromSlice(len(ev.ids), func(i int) ([]any, error) {
			return []any{ev.ids[i], ev.orderIDs[i], ev.orderNos[i], ev.types[i], ev.payloads[i], ev.createdAt[i]}, nil
		}))
	if err != nil {
		return err
	}
	return ev.copyDeliveries(ctx, s.db)
}
