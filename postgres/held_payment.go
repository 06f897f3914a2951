package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

const heldPaymentColumns = `id, provider, txn_id, order_no, amount, currency, merchant, paid_at, doubt, status,
	reason, refund_id, by_whom, note, raw, created_at, updated_at`

func scanHeldPayment(row pgx.Row) (*lapse.HeldPayment, error) {
	var h lapse.HeldPayment
	err := row.Scan(&h.ID, &h.Provider, &h.TxnID, &h.OrderNo, &h.Amount, &h.Currency, &h.Merchant, &h.PaidAt, &h.Doubt,
		&h.Status, &h.Reason, &h.RefundID, &h.By, &h.Note, &h.Raw, &h.CreatedAt, &h.UpdatedAt)
	if err != nil {
		return nil, err
	}
	h.PaidAt, h.CreatedAt, h.UpdatedAt = h.PaidAt.UTC(), h.CreatedAt.UTC(), h.UpdatedAt.UTC()
	return &h, nil
}

// HeldPaymentCreate inserts h unless its provider and txn id exist: then it
// writes nothing and returns the one that exists, with created=false.
func (s *Store) HeldPaymentCreate(ctx context.Context, h *lapse.HeldPayment) (*lapse.HeldPayment, bool, error) {
	raw := h.Raw
	if raw == nil {
		raw = []byte{} // NOT NULL
	}
	got, err := scanHeldPayment(s.db.QueryRow(ctx, `INSERT INTO held_payments (provider, txn_id, order_no, amount, currency,
		merchant, paid_at, doubt, status, reason, refund_id, by_whom, note, raw, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15)
		ON CONFLICT (provider, txn_id) DO NOTHING RETURNING `+heldPaymentColumns,
		h.Provider, h.TxnID, h.OrderNo, h.Amount, h.Currency, h.Merchant, h.PaidAt, h.Doubt, h.Status, h.Reason,
		h.RefundID, h.By, h.Note, raw, h.CreatedAt))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("postgres: create held payment %s/%s: %w", h.Provider, h.TxnID, err)
	}
	// It exists; in READ COMMITTED this read sees the winner the insert waited for.
	got, err = scanHeldPayment(s.db.QueryRow(ctx, `SELECT `+heldPaymentColumns+` FROM held_payments
		WHERE provider = $1 AND txn_id = $2`, h.Provider, h.TxnID))
	if err != nil {
		return nil, false, fmt.Errorf("postgres: get held payment %s/%s: %w", h.Provider, h.TxnID, err)
	}
	return got, false, nil
}

// HeldPaymentGet returns the held payment with id, or an error that is
// lapse.ErrHeldPaymentNotFound.
func (s *Store) HeldPaymentGet(ctx context.Context, id int64) (*lapse.HeldPayment, error) {
	h, err := scanHeldPayment(s.db.QueryRow(ctx, `SELECT `+heldPaymentColumns+` FROM held_payments WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrHeldPaymentNotFound, "no held payment with id %d", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get held payment %d: %w", id, err)
	}
	return h, nil
}

// HeldPaymentList returns the held payments matching p, by id.
func (s *Store) HeldPaymentList(ctx context.Context, p *lapse.HeldPaymentListParams) ([]*lapse.HeldPayment, error) {
	q := `SELECT ` + heldPaymentColumns + ` FROM held_payments WHERE id > $1`
	args := []any{p.AfterID}
	if p.TxnID != "" {
		args = append(args, p.Provider, p.TxnID)
		q += " AND provider = $" + strconv.Itoa(len(args)-1) + " AND txn_id = $" + strconv.Itoa(len(args))
	}
	if len(p.Statuses) > 0 {
		sts := make([]string, len(p.Statuses))
		for i, st := range p.Statuses {
			sts[i] = string(st)
		}
		args = append(args, sts)
		q += " AND status = ANY($" + strconv.Itoa(len(args)) + "::text[])"
	}
	q += " ORDER BY id"
	if p.Limit > 0 {
		args = append(args, p.Limit)
		q += " LIMIT $" + strconv.Itoa(len(args))
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list held payments: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.HeldPayment, error) { return scanHeldPayment(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list held payments: %w", err)
	}
	return out, nil
}

// HeldPaymentUpdate moves a held payment from p.From to p.To, or returns
// lapse.ErrStale (it is in another status) or
// lapse.ErrHeldPaymentNotFound, writing nothing.
func (s *Store) HeldPaymentUpdate(ctx context.Context, p *lapse.HeldPaymentUpdateParams) (*lapse.HeldPayment, error) {
	got, err := scanHeldPayment(s.db.QueryRow(ctx, `UPDATE held_payments SET status = $3,
		reason = CASE WHEN $4 <> '' THEN $4 ELSE reason END,
		refund_id = CASE WHEN $5 <> '' THEN $5 ELSE refund_id END,
		by_whom = CASE WHEN $6 <> '' THEN $6 ELSE by_whom END,
		note = CASE WHEN $7 <> '' THEN $7 ELSE note END, updated_at = $8
		WHERE id = $1 AND status = $2 RETURNING `+heldPaymentColumns,
		p.ID, p.From, p.To, p.Reason, p.RefundID, p.By, p.Note, p.At))
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM held_payments WHERE id = $1)`, p.ID).Scan(&exists); err != nil {
			return nil, fmt.Errorf("postgres: update held payment %d: %w", p.ID, err)
		}
		if !exists {
			return nil, lapse.Refine(lapse.ErrHeldPaymentNotFound, "no held payment with id %d", p.ID)
		}
		return nil, lapse.ErrStale
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: update held payment %d: %w", p.ID, err)
	}
	return got, nil
}
