package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/lapsehq/lapse"
)

// Group commit of applied payments.
//
// A payment callback's write is one statement (paymentApplySQL), and so one
// commit; at thousands of callbacks a second the server spends most of its
// time starting, planning and committing those statements rather than in
// the rows they write. So the Store's own calls of PaymentCreate with a
// transition (outside Tx) are coalesced: a call waits in a queue while
// maxPaymentBatches statements are in flight, and the next statement to go
// takes every call waiting (up to maxPaymentBatch), applying all their
// transitions and payments in one statement, one commit. A call alone goes
// at once, as one statement of its own, unless callbacks come thousands a
// second: then a batch of fewer than four waits up to Config.BatchGather
// for more (batch.go).
//
// Each call is answered only after its own write committed, and only about
// its own payment:
//
//   - a payment the batch wrote is the caller's, created;
//   - a call whose order the batch did not move (it moved on, or its
//     payment exists) is decided alone, by the statement of one payment
//     (paymentApply), which tells stale from existing exactly as before;
//   - when the batch's statement fails (a payment that exists met the
//     unique key, a lock timeout, a broken connection), nothing of it
//     committed, or (a connection broken after the commit) all of it did:
//     either way each call is decided alone, which finds its payment
//     recorded or writes it, so that one call's failure is never
//     another's.
//
// A batch holds at most one call per order, and per provider transaction:
// one UPDATE cannot move one order twice, nor one statement insert one
// payment twice; the others wait for the next batch. The calls of a batch
// go in order id order, so that two batches lock their orders in one
// order.
//
// One batch is written at a time, as one creation batch is
// (order_create_batch.go): most of what a batch costs the database is the
// same whatever it holds (starting a statement of many CTEs, its commit),
// and with two in flight each took about half the calls waiting. Measured
// with the reads of orders (order_batch.go) also one at a time, on 2 cores
// (http BenchmarkCallback, 2026-12-03 18:10, the binaries before and after
// interleaved, two runs each): 32 clients, 4,209 and 4,457 → 5,187 and
// 5,002 callbacks/s, 0.47–0.48 → 0.26–0.28 commits and 172–199 → 119–130
// µs of the database's CPU a callback; while deadlines fire at 2,000/s,
// 0.59 → 0.39–0.42 commits and 311–336 → 234–269 µs.
const (
	maxPaymentBatches = 1
	maxPaymentBatch   = 64
)

// paymentApplyManySQL is orderTransitionManySQL's CTEs (the transitions of
// the batch's orders, with their log, deadline, outbox and delivery rows)
// with the payments inserted from the orders it moved: a payment whose order's
// guard failed is not written, and an order moves only with its payment
// (the insert has no ON CONFLICT: a payment that exists fails the whole
// statement, as in paymentApplySQL). Parameters $22 to $35 are the
// payments' columns, by order id.
//
// The batch moves only the orders it can lock at once (l, SKIP LOCKED): an
// order that another transaction holds (a claim, an operator's
// transaction) is left out, and its call is decided alone, waiting for the
// lock as it would have without batches, so that one order held does not
// hold up every payment of its batch.
//
// An order whose payment's transaction a held payment takes (heldFree) is
// not locked, and so left out too: its call, decided alone, is
// lapse.ErrPaymentHeld. Those orders are found once for the batch (an
// uncorrelated ARRAY(...), run once as an InitPlan), not once for each
// order locked: read once per order, the payments' arrays were unnested
// 64 times for a batch of 64, about 7 µs of the database's CPU a callback
// (http BenchmarkCallback, 2026-12-07).
var paymentApplyManySQL = transitionManyCTEs(true, ` AND orders.id <> ALL (ARRAY(
		SELECT hq.order_id FROM unnest($22::bigint[], $23::text[], $24::text[], $25::text[], $26::bigint[], $27::text[])
			AS hq(order_id, provider, txn_id, order_no, amount, currency)
		WHERE NOT `+heldFree("hq.provider", "hq.txn_id", "hq.order_no", "hq.amount", "hq.currency")+`))`) + `, pay AS (
	INSERT INTO payments (provider, txn_id, order_id, order_no, amount, currency, merchant, paid_at, status,
		reason, refund_id, refunded_at, raw, created_at, updated_at)
	SELECT q.provider, q.txn_id, o.id, q.order_no, q.amount, q.currency, q.merchant, q.paid_at, q.status,
		q.reason, q.refund_id, q.refunded_at, q.raw, q.created_at, q.created_at
	FROM unnest($22::bigint[], $23::text[], $24::text[], $25::text[], $26::bigint[], $27::text[], $28::text[],
		$29::timestamptz[], $30::text[], $31::text[], $32::text[], $33::timestamptz[], $34::bytea[], $35::timestamptz[])
		AS q(order_id, provider, txn_id, order_no, amount, currency, merchant, paid_at, status, reason, refund_id,
			refunded_at, raw, created_at)
	JOIN o ON o.id = q.order_id
	RETURNING *
)
SELECT ` + paymentColumns + ` FROM pay p`

// paymentBatcher is the Store's batcher of applied payments.
type paymentBatcher = batcher[*lapse.PaymentCreateParams, paymentAnswer]

// paymentAnswer is what PaymentCreate returns besides its error.
type paymentAnswer struct {
	pay     *lapse.Payment
	created bool
}

func newPaymentBatcher(s *Store, gather time.Duration) *paymentBatcher {
	return &paymentBatcher{max: maxPaymentBatches, gather: gather, take: takePayments,
		write: func(ctx context.Context, batch []*batchCall[*lapse.PaymentCreateParams, paymentAnswer]) {
			s.paymentApplyMany(ctx, batch)
		}}
}

// batches reports whether p can go in a batch: a payment applied, with
// nothing else to write.
func batches(p *lapse.PaymentCreateParams) bool {
	return p.Transition != nil && len(p.Outbox) == 0 && p.Review == nil
}

// paymentApplyBatched is PaymentCreate of p, which batches. A caller whose
// ctx ends while its batch runs gets ctx's error (batcher.do): its payment
// may or may not be written, as when a statement's connection breaks, and
// the provider's next callback finds it.
func (s *Store) paymentApplyBatched(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	c, err := s.payments.do(ctx, p)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: create payment %s/%s: %w", p.Payment.Provider, p.Payment.TxnID, err)
	}
	if c.decided {
		return c.r.pay, c.r.created, c.err
	}
	return s.paymentApply(ctx, p)
}

// takePayments takes the next batch of payments: at most one per order and
// per provider transaction, the others left for the next, in order id
// order.
func takePayments(queue []*batchCall[*lapse.PaymentCreateParams, paymentAnswer]) (batch, rest []*batchCall[*lapse.PaymentCreateParams, paymentAnswer]) {
	type txn struct{ provider, id string }
	orders := make(map[int64]bool, min(len(queue), maxPaymentBatch))
	txns := make(map[txn]bool, min(len(queue), maxPaymentBatch))
	for _, c := range queue {
		id, t := c.p.Transition.OrderID, txn{c.p.Payment.Provider, c.p.Payment.TxnID}
		if len(batch) == maxPaymentBatch || orders[id] || txns[t] {
			rest = append(rest, c)
			continue
		}
		orders[id], txns[t] = true, true
		batch = append(batch, c)
	}
	slices.SortFunc(batch, func(x, y *batchCall[*lapse.PaymentCreateParams, paymentAnswer]) int {
		return cmp.Compare(x.p.Transition.OrderID, y.p.Transition.OrderID)
	})
	return batch, rest
}

// paymentApplyMany applies a batch, deciding the calls whose payments it
// wrote. A call alone is decided by the statement of one payment.
func (s *Store) paymentApplyMany(ctx context.Context, batch []*batchCall[*lapse.PaymentCreateParams, paymentAnswer]) {
	if len(batch) == 1 {
		c := batch[0]
		c.r.pay, c.r.created, c.err = s.paymentApply(c.ctx, c.p)
		c.decided = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	a := newTransitionArgs(len(batch))
	var q paymentArgs
	for _, c := range batch {
		if err := a.add(c.p.Transition); err != nil {
			return // the call alone reports it
		}
		q.add(c.p.Transition.OrderID, c.p.Payment)
	}
	ev := &a.outbox
	rows, err := s.db.Query(ctx, paymentApplyManySQL,
		a.ids, a.from, a.versions, a.to, a.deadlines, a.closedAt, a.closeReasons, a.firedBy, a.at, a.events,
		a.actors, a.reasons, ev.orderIDs, ev.ids, ev.orderNos, ev.types, a.closedDeadlines, ev.createdAt,
		ev.subEventIDs, ev.subscribers, ev.payloads,
		q.orderIDs, q.providers, q.txnIDs, q.orderNos, q.amounts, q.currencies, q.merchants, q.paidAt, q.statuses,
		q.reasons, q.refundIDs, q.refundedAt, q.raws, q.createdAt)
	if err != nil {
		return
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Payment, error) { return scanPayment(row) })
	if err != nil {
		return // nothing, or (a connection broken after the commit) everything, was written: each call finds out alone
	}
	byOrder := make(map[int64]*lapse.Payment, len(got))
	for _, p := range got {
		byOrder[p.OrderID] = p
	}
	for _, c := range batch {
		if p := byOrder[c.p.Transition.OrderID]; p != nil {
			c.r, c.decided = paymentAnswer{p, true}, true
		}
	}
}

// paymentArgs holds payments column by column, for unnest.
type paymentArgs struct {
	orderIDs, amounts                                                                []int64
	providers, txnIDs, orderNos, currencies, merchants, statuses, reasons, refundIDs []string
	paidAt, createdAt                                                                []time.Time
	refundedAt                                                                       pgtype.FlatArray[*time.Time]
	raws                                                                             pgtype.FlatArray[[]byte]
}

func (a *paymentArgs) add(orderID int64, p *lapse.Payment) {
	raw := p.Raw
	if raw == nil {
		raw = []byte{}
	}
	a.orderIDs, a.amounts = append(a.orderIDs, orderID), append(a.amounts, p.Amount)
	a.providers, a.txnIDs, a.orderNos = append(a.providers, p.Provider), append(a.txnIDs, p.TxnID), append(a.orderNos, p.OrderNo)
	a.currencies, a.merchants = append(a.currencies, p.Currency), append(a.merchants, p.Merchant)
	a.statuses, a.reasons, a.refundIDs = append(a.statuses, string(p.Status)), append(a.reasons, p.Reason), append(a.refundIDs, p.RefundID)
	a.paidAt, a.createdAt = append(a.paidAt, p.PaidAt), append(a.createdAt, p.CreatedAt)
	a.refundedAt, a.raws = append(a.refundedAt, p.RefundedAt), append(a.raws, raw)
}
