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

const heldPaymentCols = `id, provider, txn_id, order_no, amount, currency, merchant, paid_at, doubt, status,
	reason, refund_id, by_whom, note, raw, created_at, updated_at`

func scanHeldPayment(r scanner) (*lapse.HeldPayment, error) {
	var (
		h                      lapse.HeldPayment
		paid, created, updated int64
	)
	err := r.Scan(&h.ID, &h.Provider, &h.TxnID, &h.OrderNo, &h.Amount, &h.Currency, &h.Merchant, &paid, &h.Doubt,
		(*string)(&h.Status), &h.Reason, &h.RefundID, &h.By, &h.Note, &h.Raw, &created, &updated)
	if err != nil {
		return nil, err
	}
	h.PaidAt, h.CreatedAt, h.UpdatedAt = column.Time(paid), column.Time(created), column.Time(updated)
	return &h, nil
}

// HeldPaymentCreate inserts h unless its provider and txn id exist: then it
// writes nothing and returns the one that exists, with created=false.
func (s *Store) HeldPaymentCreate(ctx context.Context, h *lapse.HeldPayment) (*lapse.HeldPayment, bool, error) {
	var got *lapse.HeldPayment
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanHeldPayment(w.tx.QueryRowContext(ctx, `INSERT INTO held_payments (provider, txn_id, order_no,
			amount, currency, merchant, paid_at, doubt, status, reason, refund_id, by_whom, note, raw, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (provider, txn_id) DO NOTHING RETURNING `+heldPaymentCols,
			h.Provider, h.TxnID, h.OrderNo, h.Amount, h.Currency, h.Merchant, column.Micros(h.PaidAt), h.Doubt,
			string(h.Status), h.Reason, h.RefundID, h.By, h.Note, rawBytes(h.Raw), column.Micros(h.CreatedAt), column.Micros(h.CreatedAt)))
		if errors.Is(err, sql.ErrNoRows) {
			got, err = scanHeldPayment(w.tx.QueryRowContext(ctx, `SELECT `+heldPaymentCols+` FROM held_payments
				WHERE provider = ? AND txn_id = ?`, h.Provider, h.TxnID))
			return err
		}
		created = err == nil
		return err
	})
	if err != nil {
		return nil, false, fail(err, "held payment create %s/%s", h.Provider, h.TxnID)
	}
	return got, created, nil
}

// HeldPaymentGet returns the held payment with id, or an error that is
// lapse.ErrHeldPaymentNotFound.
func (s *Store) HeldPaymentGet(ctx context.Context, id int64) (*lapse.HeldPayment, error) {
	h, err := scanHeldPayment(s.db().QueryRowContext(ctx, `SELECT `+heldPaymentCols+` FROM held_payments WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrHeldPaymentNotFound, "no held payment with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: held payment get %d: %w", id, err)
	}
	return h, nil
}

// HeldPaymentList returns the held payments matching p, by id.
func (s *Store) HeldPaymentList(ctx context.Context, p *lapse.HeldPaymentListParams) ([]*lapse.HeldPayment, error) {
	where := "id > ?"
	args := []any{p.AfterID}
	if p.TxnID != "" {
		where, args = where+" AND provider = ? AND txn_id = ?", append(args, p.Provider, p.TxnID)
	}
	if len(p.Statuses) > 0 {
		where += " AND status IN (?" + strings.Repeat(", ?", len(p.Statuses)-1) + ")"
		for _, st := range p.Statuses {
			args = append(args, string(st))
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	hs, err := queryAll(ctx, s.db(), scanHeldPayment, `SELECT `+heldPaymentCols+` FROM held_payments
		WHERE `+where+` ORDER BY id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: held payment list: %w", err)
	}
	return hs, nil
}

// HeldPaymentUpdate moves a held payment from p.From to p.To, or returns
// lapse.ErrStale (it is in another status) or
// lapse.ErrHeldPaymentNotFound, writing nothing.
func (s *Store) HeldPaymentUpdate(ctx context.Context, p *lapse.HeldPaymentUpdateParams) (*lapse.HeldPayment, error) {
	var got *lapse.HeldPayment
	err := s.write(ctx, func(w *writeTx) error {
		var err error
		got, err = scanHeldPayment(w.tx.QueryRowContext(ctx, `UPDATE held_payments SET status = ?,
			reason = CASE WHEN ? <> '' THEN ? ELSE reason END,
			refund_id = CASE WHEN ? <> '' THEN ? ELSE refund_id END,
			by_whom = CASE WHEN ? <> '' THEN ? ELSE by_whom END,
			note = CASE WHEN ? <> '' THEN ? ELSE note END, updated_at = ?
			WHERE id = ? AND status = ? RETURNING `+heldPaymentCols,
			string(p.To), p.Reason, p.Reason, p.RefundID, p.RefundID, p.By, p.By, p.Note, p.Note, column.Micros(p.At),
			p.ID, string(p.From)))
		if errors.Is(err, sql.ErrNoRows) {
			var n int
			if err := w.tx.QueryRowContext(ctx, `SELECT count(*) FROM held_payments WHERE id = ?`, p.ID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return lapse.Refine(lapse.ErrHeldPaymentNotFound, "no held payment with id %d", p.ID)
			}
			return lapse.ErrStale
		}
		return err
	})
	if err != nil {
		return nil, fail(err, "held payment update %d", p.ID)
	}
	return got, nil
}
