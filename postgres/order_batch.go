package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// The Store's OrderGet calls outside Tx are batched (batch.go): a payment
// callback reads its order before it writes, and that read was a statement
// and a commit of its own per callback. A batch reads every order it holds
// in one statement, at a snapshot taken after each of its calls was made,
// so each answer is the order as it stood at some moment of its call, as
// a statement of its own would read it. A batch holds an order number once
// (each caller gets an order of its own, which it may change); another
// call for it waits for the next.
const (
	maxOrderReads     = 2
	maxOrderReadBatch = 128
)

// orderReader is the Store's batcher of OrderGet.
type orderReader = batcher[string, *lapse.Order]

func newOrderReader(s *Store) *orderReader {
	return &orderReader{max: maxOrderReads, write: s.orderGetMany,
		take: func(queue []*batchCall[string, *lapse.Order]) (batch, rest []*batchCall[string, *lapse.Order]) {
			return takeDistinct(queue, maxOrderReadBatch, func(orderNo string) string { return orderNo })
		}}
}

const orderGetManySQL = "SELECT " + orderColumns + " FROM orders WHERE order_no = ANY($1)"

// orderGetBatched is OrderGet through s's batches.
func (s *Store) orderGetBatched(ctx context.Context, orderNo string) (*lapse.Order, error) {
	c, err := s.orderReads.do(ctx, orderNo)
	if err != nil {
		return nil, fmt.Errorf("postgres: get order %s: %w", orderNo, err)
	}
	if c.decided {
		return c.r, c.err
	}
	return s.orderGet(ctx, orderNo)
}

// orderGetMany reads the orders of a batch, deciding every call when its
// statement succeeds: an order it did not find does not exist. A call
// alone is read by OrderGet's own statement.
func (s *Store) orderGetMany(ctx context.Context, batch []*batchCall[string, *lapse.Order]) {
	if len(batch) == 1 {
		c := batch[0]
		c.r, c.err = s.orderGet(c.ctx, c.p)
		c.decided = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	nos := make([]string, len(batch))
	for i, c := range batch {
		nos[i] = c.p
	}
	rows, err := s.db.Query(ctx, orderGetManySQL, nos)
	if err != nil {
		return // each call is read alone, and reports its own error
	}
	os, err := scanOrders(rows)
	if err != nil {
		return
	}
	byNo := make(map[string]*lapse.Order, len(os))
	for _, o := range os {
		byNo[o.OrderNo] = o
	}
	for _, c := range batch {
		if o := byNo[c.p]; o != nil {
			c.r = o
		} else {
			c.err = lapse.ErrOrderNotFound
		}
		c.decided = true
	}
}

// orderGet is OrderGet's own statement.
func (s *Store) orderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	o, err := scanOrder(s.db.QueryRow(ctx, "SELECT "+orderColumns+" FROM orders WHERE order_no = $1", orderNo))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.ErrOrderNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get order %s: %w", orderNo, err)
	}
	return o, nil
}

// OrderCreate calls outside Tx are batched too: a creation that holds
// nothing (no stock, no coupon) and is not audited is one statement, and so
// one commit, of its own. A batch inserts every order it holds in one
// statement with ON CONFLICT DO NOTHING, as orderCreateSQL does one: an
// order it inserted is its caller's, created, with its deadline, log,
// outbox and delivery rows; an order_no that exists inserts nothing of its
// call, which is then decided alone by orderCreateSQL (it reads the order
// that exists, or meets the creator it waits for). A batch holds an
// order_no once: a second call for it waits for the next batch, and finds
// the first's order.
const (
	maxOrderCreates     = 2
	maxOrderCreateBatch = 64
)

// orderCreator is the Store's batcher of OrderCreate.
type orderCreator = batcher[*lapse.OrderCreateParams, createAnswer]

// createAnswer is what OrderCreate returns besides its error.
type createAnswer struct {
	o       *lapse.Order
	created bool
}

func newOrderCreator(s *Store) *orderCreator {
	return &orderCreator{max: maxOrderCreates, write: s.orderCreateBatch,
		take: func(queue []*batchCall[*lapse.OrderCreateParams, createAnswer]) (batch, rest []*batchCall[*lapse.OrderCreateParams, createAnswer]) {
			return takeDistinct(queue, maxOrderCreateBatch, func(p *lapse.OrderCreateParams) string { return p.Order.OrderNo })
		}}
}

// orderCreateBatchSQL is orderCreateSQL for a batch: the orders and their
// log rows as parallel arrays ($1 to $23), the events of all of them
// ($24 to $30, outboxArgs) joined to the orders inserted by order_no.
var orderCreateBatchSQL = `WITH p AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::bigint[], $6::text[], $7::text[],
		$8::jsonb[], $9::text[], $10::json[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[], $14::text[],
		$15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[], $21::text[], $22::text[],
		$23::timestamptz[])
		WITH ORDINALITY AS p(order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon, metadata,
			created_at, updated_at, closed_at, close_reason, fired_by, request_hash,
			log_from, log_to, log_event, log_fired_by, log_actor, log_reason, log_at, n)
), o AS (
	INSERT INTO orders (order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon,
		metadata, version, created_at, updated_at, closed_at, close_reason, fired_by, request_hash)
	SELECT order_no, flow, state, deadline_at, amount, currency, user_id, items, coupon,
		metadata, 1, created_at, updated_at, closed_at, close_reason, fired_by, request_hash
	FROM p ORDER BY n
	ON CONFLICT (order_no) DO NOTHING
	RETURNING ` + orderColumns + `
), od AS (
	INSERT INTO order_deadlines (order_id, deadline_at, flow)
	SELECT id, deadline_at, flow FROM o WHERE deadline_at IS NOT NULL
), t AS (
	INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
	SELECT o.id, p.log_from, p.log_to, p.log_event, o.version, p.log_fired_by, p.log_actor, p.log_reason, p.log_at
	FROM o JOIN p ON p.order_no = o.order_no
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, o.id, e.order_no, e.type, e.payload, e.created_at
	FROM unnest($24::uuid[], $25::text[], $26::text[], $27::json[], $28::timestamptz[])
		WITH ORDINALITY AS e(id, order_no, type, payload, created_at, n)
	JOIN o ON o.order_no = e.order_no
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), ` + deliveriesCTE("d", 29, 30) + `
SELECT ` + orderColumns + ` FROM o`

// orderCreateBatched is OrderCreate of p through s's batches.
func (s *Store) orderCreateBatched(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	c, err := s.orderCreates.do(ctx, p)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: create order %s: %w", p.Order.OrderNo, err)
	}
	if c.decided {
		return c.r.o, c.r.created, c.err
	}
	return s.orderCreate(ctx, p)
}

// orderCreateBatch writes the orders of a batch, deciding the calls whose
// orders it inserted. A call alone is written by orderCreateSQL.
func (s *Store) orderCreateBatch(ctx context.Context, batch []*batchCall[*lapse.OrderCreateParams, createAnswer]) {
	if len(batch) == 1 {
		c := batch[0]
		c.r.o, c.r.created, c.err = s.orderCreate(c.ctx, c.p)
		c.decided = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	var a orderCreateArgs
	ev := newOutboxArgs(len(batch))
	for _, c := range batch {
		a.add(c.p)
		if err := ev.add(0, c.p.Outbox); err != nil {
			return // the call alone reports it
		}
	}
	rows, err := s.db.Query(ctx, orderCreateBatchSQL,
		a.orderNos, a.flows, a.states, a.deadlines, a.amounts, a.currencies, a.userIDs, a.items, a.coupons, a.metadata,
		a.createdAt, a.updatedAt, a.closedAt, a.closeReasons, a.firedBy, a.requestHashes,
		a.logFrom, a.logTo, a.logEvents, a.logFiredBy, a.logActors, a.logReasons, a.logAt,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers)
	if err != nil {
		return // each call is written alone, and reports its own error
	}
	os, err := scanOrders(rows)
	if err != nil {
		return // nothing, or (a connection broken after the commit) everything, was written: each call finds out alone
	}
	byNo := make(map[string]*lapse.Order, len(os))
	for _, o := range os {
		byNo[o.OrderNo] = o
	}
	for _, c := range batch {
		if o := byNo[c.p.Order.OrderNo]; o != nil {
			c.r, c.decided = createAnswer{o, true}, true
		}
	}
}

// orderCreateArgs holds new orders and their creation log rows column by
// column, for unnest.
type orderCreateArgs struct {
	orderNos, flows, states, currencies, userIDs, coupons, closeReasons, firedBy, requestHashes []string
	logFrom, logTo, logEvents, logFiredBy, logActors, logReasons                                []string
	amounts                                                                                     []int64
	deadlines, closedAt                                                                         pgtype.FlatArray[*time.Time]
	createdAt, updatedAt, logAt                                                                 []time.Time
	items, metadata                                                                             pgtype.FlatArray[[]byte]
}

func (a *orderCreateArgs) add(p *lapse.OrderCreateParams) {
	o, l := p.Order, &p.Log
	a.orderNos, a.flows, a.states = append(a.orderNos, o.OrderNo), append(a.flows, o.Flow), append(a.states, string(o.State))
	a.deadlines, a.amounts = append(a.deadlines, o.DeadlineAt), append(a.amounts, o.Amount)
	a.currencies, a.userIDs = append(a.currencies, o.Currency), append(a.userIDs, o.UserID)
	a.items, a.coupons = append(a.items, column.Items(o.Items)), append(a.coupons, o.Coupon)
	a.metadata = append(a.metadata, metadataArg(o.Metadata))
	a.createdAt, a.updatedAt, a.closedAt = append(a.createdAt, o.CreatedAt), append(a.updatedAt, o.UpdatedAt), append(a.closedAt, o.ClosedAt)
	a.closeReasons, a.firedBy = append(a.closeReasons, o.CloseReason), append(a.firedBy, string(o.FiredBy))
	a.requestHashes = append(a.requestHashes, o.RequestHash)
	a.logFrom, a.logTo, a.logEvents = append(a.logFrom, string(l.FromState)), append(a.logTo, string(l.ToState)), append(a.logEvents, string(l.Event))
	a.logFiredBy, a.logActors = append(a.logFiredBy, string(l.FiredBy)), append(a.logActors, l.Actor)
	a.logReasons, a.logAt = append(a.logReasons, l.Reason), append(a.logAt, l.CreatedAt)
}
