package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const paymentColumns = `p.id, p.provider, p.txn_id, p.order_id, p.order_no, p.amount, p.currency, p.merchant, p.paid_at,
	p.status, p.reason, p.refund_id, p.refunded_at, p.raw, p.created_at, p.updated_at`

func scanPayment(row pgx.Row) (*lapse.Payment, error) {
	var p lapse.Payment
	err := row.Scan(&p.ID, &p.Provider, &p.TxnID, &p.OrderID, &p.OrderNo, &p.Amount, &p.Currency, &p.Merchant, &p.PaidAt,
		&p.Status, &p.Reason, &p.RefundID, &p.RefundedAt, &p.Raw, &p.CreatedAt, &p.UpdatedAt)
	if err != nil {
		return nil, err
	}
	p.PaidAt, p.CreatedAt, p.UpdatedAt = p.PaidAt.UTC(), p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	if p.RefundedAt != nil {
		t := p.RefundedAt.UTC()
		p.RefundedAt = &t
	}
	return &p, nil
}

// paymentCreateSQL inserts the payment unless its provider and txn id exist,
// and with it the outbox rows and their deliveries, which read the insert:
// when the payment exists, nothing else is written either.
var paymentCreateSQL = `WITH p AS (
	INSERT INTO payments (provider, txn_id, order_id, order_no, amount, currency, merchant, paid_at, status,
		reason, refund_id, refunded_at, raw, created_at, updated_at)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14
	WHERE ` + heldFree("$1", "$2", "$4", "$5", "$6") + `
	ON CONFLICT (provider, txn_id) DO NOTHING
	RETURNING *
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, p.order_id, e.order_no, e.type, e.payload, e.created_at
	FROM p, ` + oneOrderEvents(15) + `
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), r AS (
	INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at)
	SELECT $25::bigint, $26::text, $23, nullif($27::bigint, 0), $24 FROM p WHERE $22::bool
	ON CONFLICT DO NOTHING
), ` + oneOrderDeliveriesCTE("d", 20, 21) + `
SELECT ` + paymentColumns + ` FROM p`

// heldFree is the condition that no payment held without its order takes
// the payment of transaction txn of provider for order orderNo, of amount
// in currency (lapse.HeldTakes), each an expression of the statement. It
// is one probe of held_payments' unique key.
func heldFree(provider, txn, orderNo, amount, currency string) string {
	return `NOT EXISTS (SELECT 1 FROM held_payments h WHERE h.provider = ` + provider + `::text AND h.txn_id = ` + txn + `::text
		AND (h.status NOT IN ('held', 'review', 'applied') OR h.order_no <> ` + orderNo + `::text
			OR h.amount <> ` + amount + `::bigint OR h.currency <> ` + currency + `::text))`
}

// paymentApplySQL is orderTransitionSQL with the payment inserted from the
// order it moved: when the guard fails nothing is written. The guard holds
// heldFree too, so that a transaction a held payment takes moves no order.
// The insert has no ON CONFLICT: a payment that exists (or is being
// inserted by a transaction that then commits) fails the whole statement
// on the unique key, so that the order never moves without its own
// payment.
var paymentApplySQL = guardedTransitionCTEs(" AND "+heldFree("$21", "$22", "$23", "$24", "$25")) + `, p AS (
	INSERT INTO payments (provider, txn_id, order_id, order_no, amount, currency, merchant, paid_at, status,
		reason, refund_id, refunded_at, raw, created_at, updated_at)
	SELECT $21, $22, o.id, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $33 FROM o
	RETURNING *
)
SELECT ` + paymentColumns + ` FROM p`

// PaymentCreate inserts p.Payment with p.Outbox and its deliveries in one
// statement, unless its provider and txn id exist: then it writes nothing
// and returns the payment that exists, with created=false. With
// p.Transition it is one statement too (paymentApplySQL), run in a
// savepoint inside Tx, so that its unique violation leaves the caller's
// transaction usable; outside Tx, concurrent calls share statements and
// commits (payment_batch.go).
func (s *Store) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	if p.Transition != nil {
		if s.payments != nil && s.tx == nil && batches(p) {
			return s.paymentApplyBatched(ctx, p)
		}
		return s.paymentApply(ctx, p)
	}
	in := p.Payment
	var ev outboxArgs
	if err := ev.add(in.OrderID, p.Outbox); err != nil {
		return nil, false, fmt.Errorf("postgres: create payment %s/%s: %w", in.Provider, in.TxnID, err)
	}
	raw := in.Raw
	if raw == nil {
		raw = []byte{}
	}
	args := append([]any{in.Provider, in.TxnID, in.OrderID, in.OrderNo, in.Amount, in.Currency, in.Merchant, in.PaidAt, in.Status,
		in.Reason, in.RefundID, in.RefundedAt, raw, in.CreatedAt,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers}, reviewArgs(p.Review)...)
	got, err := scanPayment(s.db.QueryRow(ctx, paymentCreateSQL, args...))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("postgres: create payment %s/%s: %w", in.Provider, in.TxnID, err)
	}
	// It exists, or a held payment takes it. In READ COMMITTED this read
	// takes a new snapshot, which sees the winner that the insert waited
	// for.
	got, err = s.PaymentGet(ctx, in.Provider, in.TxnID)
	if errors.Is(err, lapse.ErrPaymentNotFound) {
		return nil, false, s.heldTaken(ctx, in, nil)
	}
	if err != nil {
		return nil, false, err
	}
	return got, false, nil
}

// heldTaken is the error of a write of payment in that wrote nothing and
// found no payment of its transaction: lapse.ErrPaymentHeld when a held
// payment takes it, and otherwise stale (nil: a held payment must take it).
func (s *Store) heldTaken(ctx context.Context, in *lapse.Payment, stale error) error {
	var taken bool
	err := s.db.QueryRow(ctx, `SELECT NOT `+heldFree("$1", "$2", "$3", "$4", "$5"),
		in.Provider, in.TxnID, in.OrderNo, in.Amount, in.Currency).Scan(&taken)
	switch {
	case err != nil:
		return fmt.Errorf("postgres: create payment %s/%s: %w", in.Provider, in.TxnID, err)
	case taken:
		return lapse.Refine(lapse.ErrPaymentHeld, "payment %s of %s: its transaction is held without its order", in.TxnID, in.Provider)
	case stale != nil:
		return stale
	}
	return fmt.Errorf("postgres: create payment %s/%s: neither written nor found", in.Provider, in.TxnID)
}

// paymentApply records p.Payment with p.Transition, its order's (see
// paymentApplySQL).
func (s *Store) paymentApply(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	in, tr := p.Payment, p.Transition
	args, err := orderTransitionArgs(tr)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: create payment %s/%s: %w", in.Provider, in.TxnID, err)
	}
	raw := in.Raw
	if raw == nil {
		raw = []byte{}
	}
	args = append(args, in.Provider, in.TxnID, in.OrderNo, in.Amount, in.Currency, in.Merchant, in.PaidAt, in.Status,
		in.Reason, in.RefundID, in.RefundedAt, raw, in.CreatedAt)
	var got *lapse.Payment
	run := func(s *Store) error {
		got, err = scanPayment(s.db.QueryRow(ctx, paymentApplySQL, args...))
		return err
	}
	if s.tx != nil {
		err = s.Tx(ctx, func(tx lapse.Store) error { return run(tx.(*Store)) })
	} else {
		err = run(s)
	}
	_, exists := isUniqueViolation(err, "payments_provider_txn_key")
	switch stale := errors.Is(err, pgx.ErrNoRows); {
	case err == nil:
		return got, true, nil
	case stale || exists:
		// A payment that exists is the answer, stale or not. In READ
		// COMMITTED this read takes a new snapshot, which sees the payment
		// that the insert met.
		got, err = s.PaymentGet(ctx, in.Provider, in.TxnID)
		switch {
		case err == nil:
			return got, false, nil
		case stale && errors.Is(err, lapse.ErrPaymentNotFound):
			// The order moved on, or a held payment takes the
			// transaction (read only now, off the hot path).
			return nil, false, s.heldTaken(ctx, in, lapse.ErrStale)
		}
		return nil, false, err
	}
	return nil, false, fmt.Errorf("postgres: create payment %s/%s of order %d %s --%s--> %s: %w", in.Provider, in.TxnID,
		tr.OrderID, tr.FromState, tr.Event, tr.ToState, err)
}

// PaymentGet returns the payment of a provider's transaction, or
// lapse.ErrPaymentNotFound.
func (s *Store) PaymentGet(ctx context.Context, provider, txnID string) (*lapse.Payment, error) {
	p, err := scanPayment(s.db.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments p
		WHERE p.provider = $1 AND p.txn_id = $2`, provider, txnID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrPaymentNotFound, "no payment %s of provider %s", txnID, provider)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get payment %s/%s: %w", provider, txnID, err)
	}
	return p, nil
}

// PaymentList returns the payments matching p, by id.
func (s *Store) PaymentList(ctx context.Context, p *lapse.PaymentListParams) ([]*lapse.Payment, error) {
	where := []string{"p.id > $1"}
	args := []any{p.AfterID}
	if p.OrderID != 0 {
		args = append(args, p.OrderID)
		where = append(where, "p.order_id = $"+strconv.Itoa(len(args)))
	}
	if p.Status != "" {
		args = append(args, p.Status)
		where = append(where, "p.status = $"+strconv.Itoa(len(args)))
	}
	q := `SELECT ` + paymentColumns + ` FROM payments p WHERE ` + strings.Join(where, " AND ") + ` ORDER BY p.id`
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q += " LIMIT $" + strconv.Itoa(len(args))
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list payments: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.Payment, error) { return scanPayment(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list payments: %w", err)
	}
	return out, nil
}

// paymentUpdateSQL is the guarded status change of a payment with its
// outbox rows and their deliveries, which read the UPDATE's RETURNING: when
// the guard fails nothing is written.
var paymentUpdateSQL = `WITH p AS (
	UPDATE payments SET status = $3,
		reason = CASE WHEN $4 <> '' THEN $4 ELSE reason END,
		refund_id = CASE WHEN $5 <> '' THEN $5 ELSE refund_id END,
		refunded_at = coalesce($6, refunded_at), updated_at = $7
	WHERE id = $1 AND status = $2
	RETURNING *
), x AS (
	INSERT INTO outbox (id, order_id, order_no, type, payload, created_at)
	SELECT e.id, p.order_id, e.order_no, e.type, e.payload, e.created_at
	FROM p, ` + oneOrderEvents(8) + `
	ORDER BY e.n
	RETURNING id, order_id, order_no, type, created_at
), r AS (
	INSERT INTO reviews (order_id, order_no, reason, delivery_id, created_at)
	SELECT $18::bigint, $19::text, $16, nullif($20::bigint, 0), $17 FROM p WHERE $15::bool
	ON CONFLICT DO NOTHING
), ` + oneOrderDeliveriesCTE("d", 13, 14) + `
SELECT ` + paymentColumns + ` FROM p`

// PaymentUpdate moves a payment from p.From to p.To with p.Outbox in one
// statement, or returns lapse.ErrStale (it is in another status) or
// lapse.ErrPaymentNotFound, writing nothing.
func (s *Store) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	var ev outboxArgs
	if err := ev.add(0, p.Outbox); err != nil {
		return nil, fmt.Errorf("postgres: update payment %d: %w", p.ID, err)
	}
	args := append([]any{p.ID, p.From, p.To, p.Reason, p.RefundID, p.RefundedAt, p.At,
		ev.ids, ev.orderNos, ev.types, ev.payloads, ev.createdAt, ev.subEventIDs, ev.subscribers}, reviewArgs(p.Review)...)
	got, err := scanPayment(s.db.QueryRow(ctx, paymentUpdateSQL, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payments WHERE id = $1)`, p.ID).Scan(&exists); err != nil {
			return nil, fmt.Errorf("postgres: update payment %d: %w", p.ID, err)
		}
		if !exists {
			return nil, lapse.Refine(lapse.ErrPaymentNotFound, "no payment with id %d", p.ID)
		}
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: update payment %d: %w", p.ID, err)
	}
	return got, nil
}

// reviewArgs are the arguments of a statement's optional review: whether to
// write it, its reason, its time, its order and its delivery (0: none). It
// is written as given.
func reviewArgs(r *lapse.Review) []any {
	if r == nil {
		return []any{false, "", time.Time{}, int64(0), "", int64(0)}
	}
	return []any{true, r.Reason, r.CreatedAt, r.OrderID, r.OrderNo, r.DeliveryID}
}
