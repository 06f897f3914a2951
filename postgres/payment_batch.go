package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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
// at once, as one statement of its own: nothing waits for a timer.
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
const (
	maxPaymentBatches = 2
	maxPaymentBatch   = 64
)

// paymentApplyManySQL is orderTransitionManySQL (the transitions of the
// batch's orders, with their log, deadline, outbox and delivery rows) with
// the payments inserted from the orders it moved: a payment whose order's
// guard failed is not written, and an order moves only with its payment
// (the insert has no ON CONFLICT: a payment that exists fails the whole
// statement, as in paymentApplySQL). Parameters $22 to $35 are the
// payments' columns, by order id.
var paymentApplyManySQL = func() string {
	head, ok := strings.CutSuffix(orderTransitionManySQL, "\nSELECT id FROM o")
	if !ok {
		panic("postgres: orderTransitionManySQL no longer ends with its SELECT; paymentApplyManySQL must be rewritten")
	}
	return head + `, pay AS (
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
}()

// paymentBatcher queues a Store's applied payments for paymentApplyManySQL.
type paymentBatcher struct {
	s *Store

	mu      sync.Mutex
	queue   []*paymentCall
	running int // statements in flight, at most maxPaymentBatches
}

// paymentCall is one PaymentCreate waiting for its batch.
type paymentCall struct {
	p    *lapse.PaymentCreateParams
	done chan struct{} // closed when the batch is over

	// Set before done is closed: the call's answer, when decided.
	decided bool
	got     *lapse.Payment
	created bool
	err     error
}

func newPaymentBatcher(s *Store) *paymentBatcher { return &paymentBatcher{s: s} }

// batches reports whether p can go in a batch: a payment applied, with
// nothing else to write.
func batches(p *lapse.PaymentCreateParams) bool {
	return p.Transition != nil && len(p.Outbox) == 0 && p.Review == nil
}

// apply is PaymentCreate of p, which batches. A caller whose ctx ends while
// it waits gets ctx's error: its payment may or may not be written, as when
// a statement's connection breaks, and the provider's next callback finds
// it.
func (b *paymentBatcher) apply(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	c := &paymentCall{p: p, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.running < maxPaymentBatches
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.run(context.WithoutCancel(ctx))
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if b.withdraw(c) {
			return nil, false, fmt.Errorf("postgres: create payment %s/%s: %w", p.Payment.Provider, p.Payment.TxnID, ctx.Err())
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("postgres: create payment %s/%s: %w", p.Payment.Provider, p.Payment.TxnID, ctx.Err())
		}
	}
	if c.decided {
		return c.got, c.created, c.err
	}
	return b.s.paymentApply(ctx, p)
}

// withdraw takes c out of the queue unless a batch has taken it, and
// reports whether it did.
func (b *paymentBatcher) withdraw(c *paymentCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.queue, c); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		return true
	}
	return false
}

// run writes batches until the queue is empty. Its ctx carries no
// caller's cancellation: a batch is everyone's.
func (b *paymentBatcher) run(ctx context.Context) {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.write(ctx, batch)
		for _, c := range batch {
			close(c.done)
		}
	}
}

// take removes the next batch from the queue (b.mu held): the calls in
// queue order, skipping those whose order or transaction is in it already,
// which wait for the next.
func (b *paymentBatcher) take() []*paymentCall {
	if len(b.queue) == 0 {
		return nil
	}
	type txn struct{ provider, id string }
	var batch []*paymentCall
	orders := make(map[int64]bool, min(len(b.queue), maxPaymentBatch))
	txns := make(map[txn]bool, min(len(b.queue), maxPaymentBatch))
	rest := b.queue[:0]
	for _, c := range b.queue {
		id, t := c.p.Transition.OrderID, txn{c.p.Payment.Provider, c.p.Payment.TxnID}
		if len(batch) == maxPaymentBatch || orders[id] || txns[t] {
			rest = append(rest, c)
			continue
		}
		orders[id], txns[t] = true, true
		batch = append(batch, c)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	slices.SortFunc(batch, func(x, y *paymentCall) int { return cmp.Compare(x.p.Transition.OrderID, y.p.Transition.OrderID) })
	return batch
}

// write applies a batch, deciding the calls whose payments it wrote. A
// call alone is decided by the statement of one payment.
func (b *paymentBatcher) write(ctx context.Context, batch []*paymentCall) {
	ctx, cancel := context.WithTimeout(ctx, DefaultStatementTimeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		c.got, c.created, c.err = b.s.paymentApply(ctx, c.p)
		c.decided = true
		return
	}
	a := newTransitionArgs(len(batch))
	var q paymentArgs
	for _, c := range batch {
		if err := a.add(c.p.Transition); err != nil {
			return // the call alone reports it
		}
		q.add(c.p.Transition.OrderID, c.p.Payment)
	}
	ev := &a.outbox
	rows, err := b.s.db.Query(ctx, paymentApplyManySQL,
		a.ids, a.from, a.versions, a.to, a.deadlines, a.closedAt, a.closeReasons, a.firedBy, a.at, a.events,
		a.actors, a.reasons, ev.orderIDs, ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt,
		ev.subEventIDs, ev.subscribers, a.closedDeadlines,
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
			c.got, c.created, c.decided = p, true, true
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
