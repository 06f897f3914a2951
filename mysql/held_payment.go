package mysql

import (
	"context"
	"database/sql"
	"errors"
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
// writes nothing and returns the one that exists, with created=false. An
// insert that meets a concurrent one of the same transaction waits for it,
// and the read that follows sees it committed.
func (s *Store) HeldPaymentCreate(ctx context.Context, h *lapse.HeldPayment) (*lapse.HeldPayment, bool, error) {
	type result struct {
		h       *lapse.HeldPayment
		created bool
	}
	raw := h.Raw
	if raw == nil {
		raw = []byte{} // NOT NULL
	}
	r, err := write(ctx, s, func(w *Store) (result, error) {
		res, err := w.exec(ctx, `INSERT INTO held_payments (provider, txn_id, order_no, amount, currency, merchant,
			paid_at, doubt, status, reason, refund_id, by_whom, note, raw, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			h.Provider, h.TxnID, h.OrderNo, h.Amount, h.Currency, h.Merchant, column.Micros(h.PaidAt), h.Doubt,
			string(h.Status), h.Reason, h.RefundID, h.By, h.Note, raw, column.Micros(h.CreatedAt), column.Micros(h.CreatedAt))
		if isDuplicateKey(err, "held_payments_provider_txn_key") {
			got, err := scanHeldPayment(w.queryRow(ctx, `SELECT `+heldPaymentCols+` FROM held_payments
				WHERE provider = ? AND txn_id = ?`, h.Provider, h.TxnID))
			return result{got, false}, err
		}
		if err != nil {
			return result{}, err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return result{}, err
		}
		got, err := scanHeldPayment(w.queryRow(ctx, `SELECT `+heldPaymentCols+` FROM held_payments WHERE id = ?`, id))
		return result{got, true}, err
	})
	if err != nil {
		return nil, false, fail(err, "create held payment %s/%s", h.Provider, h.TxnID)
	}
	return r.h, r.created, nil
}

// HeldPaymentGet returns the held payment with id, or an error that is
// lapse.ErrHeldPaymentNotFound.
func (s *Store) HeldPaymentGet(ctx context.Context, id int64) (*lapse.HeldPayment, error) {
	h, err := scanHeldPayment(s.queryRow(ctx, `SELECT `+heldPaymentCols+` FROM held_payments WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrHeldPaymentNotFound, "no held payment with id %d", id)
	}
	if err != nil {
		return nil, fail(err, "get held payment %d", id)
	}
	return h, nil
}

// HeldPaymentList returns the held payments matching p, by id.
func (s *Store) HeldPaymentList(ctx context.Context, p *lapse.HeldPaymentListParams) ([]*lapse.HeldPayment, error) {
	q := `SELECT ` + heldPaymentCols + ` FROM held_payments WHERE id > ?`
	args := []any{p.AfterID}
	if p.TxnID != "" {
		q, args = q+" AND provider = ? AND txn_id = ?", append(args, p.Provider, p.TxnID)
	}
	if len(p.Statuses) > 0 {
		q += " AND status IN (?" + strings.Repeat(", ?", len(p.Statuses)-1) + ")"
		for _, st := range p.Statuses {
			args = append(args, string(st))
		}
	}
	q += " ORDER BY id"
	if p.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, p.Limit)
	}
	hs, err := queryAll(ctx, s, scanHeldPayment, q, args...)
	if err != nil {
		return nil, fail(err, "list held payments")
	}
	return hs, nil
}

// HeldPaymentUpdate moves a held payment from p.From to p.To, or returns
// lapse.ErrStale (it is in another status) or
// lapse.ErrHeldPaymentNotFound, writing nothing.
func (s *Store) HeldPaymentUpdate(ctx context.Context, p *lapse.HeldPaymentUpdateParams) (*lapse.HeldPayment, error) {
	got, err := write(ctx, s, func(w *Store) (*lapse.HeldPayment, error) {
		res, err := w.exec(ctx, `UPDATE held_payments SET status = ?,
				reason = IF(? <> _binary'', ?, reason), refund_id = IF(? <> _binary'', ?, refund_id),
				by_whom = IF(? <> _binary'', ?, by_whom), note = IF(? <> _binary'', ?, note), updated_at = ?
			WHERE id = ? AND status = ?`,
			string(p.To), p.Reason, p.Reason, p.RefundID, p.RefundID, p.By, p.By, p.Note, p.Note, column.Micros(p.At),
			p.ID, string(p.From))
		if err != nil {
			return nil, err
		}
		if affected(res) == 0 {
			var n int
			if err := w.queryRow(ctx, `SELECT count(*) FROM held_payments WHERE id = ?`, p.ID).Scan(&n); err != nil {
				return nil, err
			}
			if n == 0 {
				return nil, lapse.Refine(lapse.ErrHeldPaymentNotFound, "no held payment with id %d", p.ID)
			}
			return nil, lapse.ErrStale
		}
		return scanHeldPayment(w.queryRow(ctx, `SELECT `+heldPaymentCols+` FROM held_payments WHERE id = ?`, p.ID))
	})
	if err != nil {
		return nil, fail(err, "update held payment %d", p.ID)
	}
	return got, nil
}
