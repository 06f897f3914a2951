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

const paymentCols = `id, provider, txn_id, order_id, order_no, amount, currency, merchant, paid_at, status,
	reason, refund_id, refunded_at, raw, created_at, updated_at`

func scanPayment(r scanner) (*lapse.Payment, error) {
	var (
		p                      lapse.Payment
		paid, created, updated int64
		refunded               sql.NullInt64
	)
	err := r.Scan(&p.ID, &p.Provider, &p.TxnID, &p.OrderID, &p.OrderNo, &p.Amount, &p.Currency, &p.Merchant, &paid,
		(*string)(&p.Status), &p.Reason, &p.RefundID, &refunded, &p.Raw, &created, &updated)
	if err != nil {
		return nil, err
	}
	p.PaidAt, p.RefundedAt = column.Time(paid), column.NullTime(refunded)
	p.CreatedAt, p.UpdatedAt = column.Time(created), column.Time(updated)
	return &p, nil
}

// PaymentCreate inserts p.Payment with p.Outbox and its deliveries, unless
// its provider and txn id exist: then it writes nothing and returns the
// payment that exists, with created=false. With p.Transition, see
// paymentApply.
func (s *Store) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	if p.Transition != nil {
		return s.paymentApply(ctx, p)
	}
	in := p.Payment
	var got *lapse.Payment
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		// Not written when a payment held without its order takes its
		// transaction (lapse.HeldTakes).
		got, err = scanPayment(w.tx.QueryRowContext(ctx, `INSERT INTO payments (provider, txn_id, order_id, order_no,
			amount, currency, merchant, paid_at, status, reason, refund_id, refunded_at, raw, created_at, updated_at)
			SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14
			WHERE `+heldFree+`
			ON CONFLICT (provider, txn_id) DO NOTHING RETURNING `+paymentCols,
			in.Provider, in.TxnID, in.OrderID, in.OrderNo, in.Amount, in.Currency, in.Merchant, column.Micros(in.PaidAt),
			string(in.Status), in.Reason, in.RefundID, column.NullMicros(in.RefundedAt), rawBytes(in.Raw),
			column.Micros(in.CreatedAt)))
		if errors.Is(err, sql.ErrNoRows) {
			got, err = scanPayment(w.tx.QueryRowContext(ctx, `SELECT `+paymentCols+` FROM payments
				WHERE provider = ? AND txn_id = ?`, in.Provider, in.TxnID))
			if errors.Is(err, sql.ErrNoRows) {
				return lapse.Refine(lapse.ErrPaymentHeld, "payment %s of %s: its transaction is held without its order", in.TxnID, in.Provider)
			}
			return err
		}
		if err != nil {
			return err
		}
		created = true
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return err
			}
		}
		return w.outbox(ctx, in.OrderID, p.Outbox)
	})
	if err != nil {
		return nil, false, fail(err, "payment create %s/%s", in.Provider, in.TxnID)
	}
	return got, created, nil
}

// heldFree is the condition, on PaymentCreate's parameters ?1 (provider),
// ?2 (txn id), ?4 (order number), ?5 (amount) and ?6 (currency), that no
// payment held without its order takes the payment (lapse.HeldTakes): one
// probe of held_payments' unique key.
const heldFree = `NOT EXISTS (SELECT 1 FROM held_payments h WHERE h.provider = ?1 AND h.txn_id = ?2
	AND (h.status NOT IN ('held', 'review', 'applied') OR h.order_no <> ?4 OR h.amount <> ?5 OR h.currency <> ?6))`

// paymentApply records p.Payment and applies p.Transition, its order's, in
// one transaction: a payment that exists moves nothing, a stale transition
// is lapse.ErrStale and writes nothing.
func (s *Store) paymentApply(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	var got *lapse.Payment
	created := false
	err := s.Tx(ctx, func(tx lapse.Store) error {
		var err error
		got, created, err = tx.PaymentCreate(ctx, &lapse.PaymentCreateParams{Payment: p.Payment})
		if err != nil || !created {
			return err
		}
		_, err = tx.OrderTransition(ctx, p.Transition)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return got, created, nil
}

// rawBytes keeps a nil raw payload NOT NULL.
func rawBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// PaymentGet returns the payment of a provider's transaction, or an error
// that is lapse.ErrPaymentNotFound.
func (s *Store) PaymentGet(ctx context.Context, provider, txnID string) (*lapse.Payment, error) {
	p, err := scanPayment(s.db().QueryRowContext(ctx, `SELECT `+paymentCols+` FROM payments
		WHERE provider = ? AND txn_id = ?`, provider, txnID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrPaymentNotFound, "no payment %s of provider %s", txnID, provider)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: payment get %s/%s: %w", provider, txnID, err)
	}
	return p, nil
}

// PaymentList returns the payments matching p, by id.
func (s *Store) PaymentList(ctx context.Context, p *lapse.PaymentListParams) ([]*lapse.Payment, error) {
	where := []string{"id > ?"}
	args := []any{p.AfterID}
	if p.OrderID != 0 {
		where, args = append(where, "order_id = ?"), append(args, p.OrderID)
	}
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	ps, err := queryAll(ctx, s.db(), scanPayment, `SELECT `+paymentCols+` FROM payments
		WHERE `+strings.Join(where, " AND ")+` ORDER BY id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: payment list: %w", err)
	}
	return ps, nil
}

// PaymentUpdate moves a payment from p.From to p.To with p.Outbox, or
// returns lapse.ErrStale (it is in another status) or
// lapse.ErrPaymentNotFound, writing nothing.
func (s *Store) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	var got *lapse.Payment
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanPayment(w.tx.QueryRowContext(ctx, `UPDATE payments SET status = ?,
			reason = CASE WHEN ? <> '' THEN ? ELSE reason END,
			refund_id = CASE WHEN ? <> '' THEN ? ELSE refund_id END,
			refunded_at = coalesce(?, refunded_at), updated_at = ?
			WHERE id = ? AND status = ? RETURNING `+paymentCols,
			string(p.To), p.Reason, p.Reason, p.RefundID, p.RefundID, column.NullMicros(p.RefundedAt), column.Micros(p.At),
			p.ID, string(p.From)))
		if errors.Is(err, sql.ErrNoRows) {
			var n int
			if err := w.tx.QueryRowContext(ctx, `SELECT count(*) FROM payments WHERE id = ?`, p.ID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return lapse.Refine(lapse.ErrPaymentNotFound, "no payment with id %d", p.ID)
			}
			return lapse.ErrStale
		}
		if err != nil {
			return err
		}
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return err
			}
		}
		return w.outbox(ctx, got.OrderID, p.Outbox)
	})
	if err != nil {
		return nil, fail(err, "payment update %d", p.ID)
	}
	return got, nil
}
