package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

// OrderCreate and OrderCreateWith calls outside Tx are batched (batch.go):
// at thousands of creations a second, a statement and a commit of their
// own per creation, and for an audited creation or one that holds stock a
// transaction of several statements, were most of what the server did.
//
// A batch inserts every order it holds in one statement with ON CONFLICT
// DO NOTHING, as orderCreateSQL does one, in order_no order: an order it
// inserted is its caller's, created, with its deadline, log, outbox and
// delivery rows and, in the same statement, its audit row (OrderCreateWith
// with Audit), which is an unsealed row like any other: it gets its id from
// the table's identity, and the sealer seals it once it committed. An
// order_no that exists inserts nothing of its call, which is then decided
// alone, by its method's own statements (it reads the order that exists,
// or meets the creator it waits for). A batch holds an order_no once: a
// second call for it waits for the next batch, and finds the first's order.
//
// A batch in which a creation holds stock (OrderCreateWith with Reserve)
// is a transaction: the statement above, then one that reserves the lines
// of every order it inserted (stockReserveBatchSQL), then the commit. The
// reservation moves every line or none: when any SKU has too little for
// all of them, or none is there, it writes nothing and the transaction
// rolls back. The calls whose lines name such a SKU are then decided
// alone, where a creation that is short fails with StockMove's error and
// changes nothing, as ever, and the batch's other calls are written again
// without them, once (then, if stock is short again, alone too). Locks are taken in one order by every creation, batched or not:
// the new orders' order_nos (a batch inserts them in order_no order), then
// the ledger rows in SKU order, so that creations wait for each other and
// never deadlock.
//
// One batch is written at a time. Most of what a batch costs the database
// is the same whatever it holds (starting the statement, its WAL flush at
// the commit, some 0.5 ms of CPU on 2 cores against some 40 µs for each
// order in it), and with two in flight each took half the creations that
// were waiting (8 at 32 clients, against 14 with one), so that the
// database's CPU per creation was a quarter higher for no more creations
// a second.
const (
	maxOrderCreates     = 1
	maxOrderCreateBatch = 64
)

// orderCreator is the Store's batcher of OrderCreate and OrderCreateWith.
type orderCreator = batcher[createCall, createAnswer]

// createCall is one creation: OrderCreate's with a zero w.
type createCall struct {
	p *lapse.OrderCreateParams
	w lapse.OrderCreateWith
}

// createAnswer is what OrderCreate returns besides its error.
type createAnswer struct {
	o       *lapse.Order
	created bool
}

func newOrderCreator(s *Store, gather time.Duration) *orderCreator {
	return &orderCreator{max: maxOrderCreates, gather: gather, write: s.orderCreateBatch,
		take: func(queue []*batchCall[createCall, createAnswer]) (batch, rest []*batchCall[createCall, createAnswer]) {
			return takeDistinct(queue, maxOrderCreateBatch, func(c createCall) string { return c.p.Order.OrderNo })
		}}
}

// orderCreateBatchSQL is orderCreateSQL for a batch: the orders and their
// log rows as parallel arrays ($1 to $23), the events of all of them
// ($24 to $30, outboxArgs) joined to the orders inserted by order_no, and
// the audit rows ($31 to $45, auditArgs) joined so too.
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
	FROM p ORDER BY order_no COLLATE "C"
	ON CONFLICT (order_no) DO NOTHING
	RETURNING ` + orderColumns + `
), od AS (
	INSERT INTO order_deadlines (order_id, deadline_at, flow)
	SELECT id, deadline_at, flow FROM o WHERE deadline_at IS NOT NULL
), t AS (
	INSERT INTO transitions (order_id, from_state, to_state, event, version, fired_by, actor, reason, created_at)
	SELECT o.id, p.log_from, p.log_to, p.log_event, o.version, p.log_fired_by, p.log_actor, p.log_reason, p.log_at
	FROM o JOIN p ON p.order_no = o.order_no
), a AS (
	INSERT INTO audit_log (at, actor_kind, actor_id, actor_name, role, action, target, params, result,
		reason, second_factor, approver, approval_id, batch, client_addr)
	SELECT q.at, q.actor_kind, q.actor_id, q.actor_name, q.role, q.action, q.target, q.params, q.result,
		q.reason, q.second_factor, q.approver, q.approval_id, 0, q.client_addr
	FROM unnest($31::text[], $32::timestamptz[], $33::text[], $34::text[], $35::text[], $36::text[], $37::text[],
		$38::text[], $39::bytea[], $40::text[], $41::text[], $42::text[], $43::text[], $44::bigint[], $45::text[])
		WITH ORDINALITY AS q(order_no, at, actor_kind, actor_id, actor_name, role, action, target, params, result,
			reason, second_factor, approver, approval_id, client_addr, n)
	JOIN o ON o.order_no = q.order_no
	ORDER BY q.n
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

// stockReserveBatchSQL reserves the lines of a batch's new orders ($1 to
// $4, one row a line), every line or none, as stockMoveSQL reserves one
// order's: k locks the ledger rows in SKU order and reads them as they
// are once locked; c decides each SKU for what all the lines need of it
// (numeric sums, which cannot overflow); the update and the journal, in
// the order given, happen only when every SKU passed. The result is the
// SKUs that did not: none when the lines were reserved.
const stockReserveBatchSQL = `WITH l AS (
	SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[]) WITH ORDINALITY AS l(order_id, sku, qty, at, n)
), k AS MATERIALIZED (
	SELECT s.sku, s.on_hand, s.reserved FROM stock s
	WHERE s.sku = ANY($2::text[])
	ORDER BY s.sku COLLATE "C"
	FOR NO KEY UPDATE
), c AS (
	SELECT n.sku, n.qty, n.at, coalesce(k.on_hand - k.reserved >= n.qty, false) AS ok
	FROM (SELECT sku, sum(qty) AS qty, max(at) AS at FROM l GROUP BY sku) AS n
	LEFT JOIN k ON k.sku = n.sku
), g AS (
	SELECT bool_and(ok) AS ok FROM c
), u AS (
	UPDATE stock s SET reserved = s.reserved + c.qty, updated_at = c.at
	FROM c, g
	WHERE g.ok AND s.sku = c.sku
), m AS (
	INSERT INTO stock_moves (order_id, sku, qty, kind, created_at)
	SELECT l.order_id, l.sku, l.qty, $5::text, l.at FROM l, g WHERE g.ok ORDER BY l.n
)
SELECT sku FROM c WHERE NOT ok ORDER BY sku COLLATE "C"`

// OrderCreateWith is OrderCreate with the stock the creation holds and
// its audit row (lapse.OrderCreateWither). Outside Tx, concurrent calls
// share statements and commits (order_create_batch.go).
func (s *Store) OrderCreateWith(ctx context.Context, p *lapse.OrderCreateParams, w lapse.OrderCreateWith) (*lapse.Order, bool, error) {
	if s.orderCreates != nil && s.tx == nil {
		return s.orderCreateBatched(ctx, createCall{p, w})
	}
	return s.orderCreateWith(ctx, p, w)
}

// orderCreateWith is OrderCreateWith's own transaction: OrderCreate,
// StockMove and AuditAppend in it, as a caller's transaction would have
// them.
func (s *Store) orderCreateWith(ctx context.Context, p *lapse.OrderCreateParams, w lapse.OrderCreateWith) (o *lapse.Order, created bool, err error) {
	if len(w.Reserve) == 0 && w.Audit == nil {
		return s.orderCreate(ctx, p)
	}
	err = s.Tx(ctx, func(tx lapse.Store) error {
		t := tx.(*Store)
		o, created, err = t.orderCreate(ctx, p)
		if err != nil || !created {
			return err
		}
		if len(w.Reserve) > 0 {
			mv := &lapse.StockMoveParams{OrderID: o.ID, Kind: lapse.StockReserve, Lines: w.Reserve, At: p.Order.CreatedAt}
			if err := t.StockMove(ctx, mv); err != nil {
				return err
			}
		}
		if w.Audit != nil {
			return lapse.AuditAppend(ctx, t, w.Audit)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return o, created, nil
}

// orderCreateBatched is a creation through s's batches.
func (s *Store) orderCreateBatched(ctx context.Context, cc createCall) (*lapse.Order, bool, error) {
	c, err := s.orderCreates.do(ctx, cc)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: create order %s: %w", cc.p.Order.OrderNo, err)
	}
	if c.decided {
		return c.r.o, c.r.created, c.err
	}
	return s.orderCreateWith(ctx, cc.p, cc.w)
}

// orderCreateBatch writes the orders of a batch, deciding the calls whose
// orders it inserted, and only once they committed. A call alone that
// neither holds stock nor is audited is written by orderCreateSQL; one
// that does goes as a batch of one, on its own context, which is one
// commit where its own transaction is several statements. When the
// batch's stock is short, the calls whose lines name a SKU that was short
// are left to be decided alone, and the others are written again without
// them, once: a SKU that sells out fails its own creations, not the
// batch's others.
func (s *Store) orderCreateBatch(ctx context.Context, batch []*batchCall[createCall, createAnswer]) {
	if len(batch) == 1 {
		c := batch[0]
		if len(c.p.w.Reserve) == 0 && c.p.w.Audit == nil {
			c.r.o, c.r.created, c.err = s.orderCreate(c.ctx, c.p.p)
			c.decided = true
			return
		}
		ctx = c.ctx
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	for range 2 {
		orders, short, err := s.orderCreateShared(ctx, batch)
		if err == nil {
			byNo := make(map[string]*lapse.Order, len(orders))
			for _, o := range orders {
				byNo[o.OrderNo] = o
			}
			for _, c := range batch {
				if o := byNo[c.p.p.Order.OrderNo]; o != nil {
					c.r, c.decided = createAnswer{o, true}, true
				}
			}
			return
		}
		if len(short) == 0 {
			return // nothing was written, or (an answer lost after the commit) everything: each call finds out alone
		}
		batch = slices.DeleteFunc(slices.Clone(batch), func(c *batchCall[createCall, createAnswer]) bool {
			return slices.ContainsFunc(c.p.w.Reserve, func(l lapse.Item) bool { return short[l.SKU] })
		})
		if len(batch) == 0 {
			return
		}
	}
}

// orderCreateShared writes the creations of calls together: in one
// statement, or, when one holds stock, in a transaction with their
// reservations. It returns the orders it inserted, once committed. A
// reservation that is short writes nothing and returns the SKUs it was
// short of.
func (s *Store) orderCreateShared(ctx context.Context, calls []*batchCall[createCall, createAnswer]) (orders []*lapse.Order, short map[string]bool, err error) {
	var (
		a     orderCreateArgs
		au    auditArgs
		stock bool
	)
	ev := newOutboxArgs(len(calls))
	for _, c := range calls {
		a.add(c.p.p)
		if err := ev.add(0, c.p.p.Outbox); err != nil {
			return nil, nil, err // the call alone reports it
		}
		if c.p.w.Audit != nil {
			au.add(c.p.p.Order.OrderNo, c.p.w.Audit)
		}
		stock = stock || len(c.p.w.Reserve) > 0
	}
	args := []any{a.orderNos, a.flows, a.states, a.deadlines, a.amounts, a.currencies, a.userIDs, a.items, a.coupons, a.metadata,
		a.createdAt, a.updatedAt, a.closedAt, a.closeReasons, a.firedBy, a.requestHashes,
		a.logFrom, a.logTo, a.logEvents, a.logFiredBy, a.logActors, a.logReasons, a.logAt,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers,
		au.orderNos, au.at, au.actorKinds, au.actorIDs, au.actorNames, au.roles, au.actions, au.targets, au.params,
		au.results, au.reasons, au.secondFactors, au.approvers, au.approvalIDs, au.clientAddrs}
	if !stock {
		rows, err := s.db.Query(ctx, orderCreateBatchSQL, args...)
		if err != nil {
			return nil, nil, err
		}
		orders, err = scanOrders(rows)
		return orders, nil, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, orderCreateBatchSQL, args...)
		if err != nil {
			return err
		}
		if orders, err = scanOrders(rows); err != nil {
			return err
		}
		if short, err = reserveBatch(ctx, tx, calls, orders); err != nil {
			return err
		}
		if len(short) > 0 {
			return errBatchShort // rolls back
		}
		return nil
	})
	if err != nil {
		return nil, short, err
	}
	return orders, nil, nil
}

// errBatchShort rolls back a batch whose stock is short for some SKU.
var errBatchShort = errors.New("postgres: a batch's stock is short")

// reserveBatch reserves, in tx, the lines of the calls whose orders were
// inserted, every line or none, and returns the SKUs it was short of.
func reserveBatch(ctx context.Context, tx pgx.Tx, calls []*batchCall[createCall, createAnswer], orders []*lapse.Order) (map[string]bool, error) {
	byNo := make(map[string]*lapse.Order, len(orders))
	for _, o := range orders {
		byNo[o.OrderNo] = o
	}
	var (
		ids, qtys []int64
		skus      []string
		at        []time.Time
	)
	for _, c := range calls {
		o := byNo[c.p.p.Order.OrderNo]
		if o == nil {
			continue
		}
		for _, l := range c.p.w.Reserve {
			ids, skus, qtys, at = append(ids, o.ID), append(skus, l.SKU), append(qtys, l.Qty), append(at, c.p.p.Order.CreatedAt)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, stockReserveBatchSQL, ids, skus, qtys, at, lapse.StockReserve)
	if err != nil {
		return nil, err
	}
	shortSKUs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	short := make(map[string]bool, len(shortSKUs))
	for _, sku := range shortSKUs {
		short[sku] = true
	}
	return short, nil
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

// auditArgs holds the audit rows of new orders column by column, for
// unnest, each with its order's order_no. A row's Batch is 0
// (lapse.OrderCreateWith.Validate).
type auditArgs struct {
	orderNos, actorKinds, actorIDs, actorNames, roles, actions, targets []string
	results, reasons, secondFactors, approvers, clientAddrs             []string
	at                                                                  []time.Time
	params                                                              pgtype.FlatArray[[]byte]
	approvalIDs                                                         []int64
}

// add adds e, at its time as AuditAppend stores it.
func (a *auditArgs) add(orderNo string, e *lapse.AuditEntry) {
	a.orderNos, a.at = append(a.orderNos, orderNo), append(a.at, lapse.Truncate(e.At))
	a.actorKinds, a.actorIDs, a.actorNames = append(a.actorKinds, e.ActorKind), append(a.actorIDs, e.ActorID), append(a.actorNames, e.ActorName)
	a.roles, a.actions, a.targets = append(a.roles, e.Role), append(a.actions, e.Action), append(a.targets, e.Target)
	a.params, a.results, a.reasons = append(a.params, e.Params), append(a.results, e.Result), append(a.reasons, e.Reason)
	a.secondFactors, a.approvers = append(a.secondFactors, e.SecondFactor), append(a.approvers, e.Approver)
	a.approvalIDs, a.clientAddrs = append(a.approvalIDs, e.ApprovalID), append(a.clientAddrs, e.ClientAddr)
}
