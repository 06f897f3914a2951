package mysql

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

// PaymentCreate inserts p.Payment with p.Outbox, their deliveries and
// p.Review in one transaction, unless its provider and txn id exist: then it
// writes nothing and returns the payment that exists, with created=false. It
// locks the payment's order first (see lockOrder). An insert that meets a concurrent one of the same payment waits for it, and
// the read that follows sees it committed: of concurrent creators exactly
// one creates. With p.Transition, see paymentApply.
func (s *Store) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	if p.Transition != nil {
		return s.paymentApply(ctx, p)
	}
	in := p.Payment
	type result struct {
		p       *lapse.Payment
		created bool
	}
	raw := in.Raw
	if raw == nil {
		raw = []byte{} // NOT NULL
	}
	r, err := write(ctx, s, func(w *Store) (result, error) {
		if err := w.lockOrder(ctx, in.OrderID); err != nil {
			return result{}, err
		}
		// Not written when a payment held without its order takes its
		// transaction (lapse.HeldTakes): one probe of held_payments'
		// unique key.
		res, err := w.exec(ctx, `INSERT INTO payments (provider, txn_id, order_id, order_no, amount, currency, merchant,
			paid_at, status, reason, refund_id, refunded_at, raw, created_at, updated_at)
			SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM DUAL
			WHERE NOT EXISTS (SELECT 1 FROM held_payments h WHERE h.provider = ? AND h.txn_id = ?
				AND (h.status NOT IN ('held', 'review', 'applied') OR h.order_no <> ? OR h.amount <> ? OR h.currency <> ?))`,
			in.Provider, in.TxnID, in.OrderID, in.OrderNo, in.Amount, in.Currency, in.Merchant, column.Micros(in.PaidAt),
			string(in.Status), in.Reason, in.RefundID, column.NullMicros(in.RefundedAt), raw, column.Micros(in.CreatedAt), column.Micros(in.CreatedAt),
			in.Provider, in.TxnID, in.OrderNo, in.Amount, in.Currency)
		if isDuplicateKey(err, "payments_provider_txn_key") {
			got, err := w.paymentGet(ctx, in.Provider, in.TxnID)
			return result{got, false}, err
		}
		if err != nil {
			return result{}, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return result{}, err
		} else if n == 0 {
			// A held payment takes it, unless it is recorded already.
			got, err := w.paymentGet(ctx, in.Provider, in.TxnID)
			if errors.Is(err, lapse.ErrPaymentNotFound) {
				err = lapse.Refine(lapse.ErrPaymentHeld, "payment %s of %s: its transaction is held without its order", in.TxnID, in.Provider)
			}
			return result{got, false}, err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return result{}, err
		}
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return result{}, err
			}
		}
		if err := w.outbox(ctx, appendEvents(nil, in.OrderID, p.Outbox)); err != nil {
			return result{}, err
		}
		got, err := scanPayment(w.queryRow(ctx, `SELECT `+paymentCols+` FROM payments WHERE id = ?`, id))
		return result{got, true}, err
	})
	if err != nil {
		return nil, false, fail(err, "create payment %s/%s", in.Provider, in.TxnID)
	}
	return r.p, r.created, nil
}

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

// PaymentGet returns the payment of a provider's transaction, or an error
// that is lapse.ErrPaymentNotFound.
func (s *Store) PaymentGet(ctx context.Context, provider, txnID string) (*lapse.Payment, error) {
	p, err := s.paymentGet(ctx, provider, txnID)
	if err != nil {
		return nil, fail(err, "get payment %s/%s", provider, txnID)
	}
	return p, nil
}

func (s *Store) paymentGet(ctx context.Context, provider, txnID string) (*lapse.Payment, error) {
	p, err := scanPayment(s.queryRow(ctx, `SELECT `+paymentCols+` FROM payments WHERE provider = ? AND txn_id = ?`, provider, txnID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrPaymentNotFound, "no payment %s of provider %s", txnID, provider)
	}
	return p, err
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
	q := `SELECT ` + paymentCols + ` FROM payments WHERE ` + strings.Join(where, " AND ") + ` ORDER BY id`
	if p.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, p.Limit)
	}
	ps, err := queryAll(ctx, s, scanPayment, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list payments: %w", err)
	}
	return ps, nil
}

// PaymentUpdate moves a payment from p.From to p.To with p.Outbox, their
// deliveries and p.Review in one transaction, or returns lapse.ErrStale (it
// is in another status) or lapse.ErrPaymentNotFound, writing nothing. The
// events are of the payment's order.
func (s *Store) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	got, err := write(ctx, s, func(w *Store) (*lapse.Payment, error) {
		res, err := w.exec(ctx, `UPDATE payments SET status = ?,
				reason = IF(? <> _binary'', ?, reason), refund_id = IF(? <> _binary'', ?, refund_id),
				refunded_at = COALESCE(?, refunded_at), updated_at = ?
			WHERE id = ? AND status = ?`,
			string(p.To), p.Reason, p.Reason, p.RefundID, p.RefundID, column.NullMicros(p.RefundedAt), column.Micros(p.At),
			p.ID, string(p.From))
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			var n int
			if err := w.queryRow(ctx, `SELECT count(*) FROM payments WHERE id = ?`, p.ID).Scan(&n); err != nil {
				return nil, err
			}
			if n == 0 {
				return nil, lapse.Refine(lapse.ErrPaymentNotFound, "no payment with id %d", p.ID)
			}
			return nil, lapse.ErrStale
		}
		got, err := scanPayment(w.queryRow(ctx, `SELECT `+paymentCols+` FROM payments WHERE id = ?`, p.ID))
		if err != nil {
			return nil, err
		}
		if p.Review != nil {
			if err := w.review(ctx, p.Review); err != nil {
				return nil, err
			}
		}
		return got, w.outbox(ctx, appendEvents(nil, got.OrderID, p.Outbox))
	})
	if err != nil {
		return nil, fail(err, "update payment %d", p.ID)
	}
	return got, nil
}
