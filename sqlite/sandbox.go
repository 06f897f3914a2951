package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

var _ lapse.SandboxStore = (*Store)(nil)

// SandboxTx runs fn in one transaction, as Tx does: holding the write lock
// of the database from its start.
func (s *Store) SandboxTx(ctx context.Context, fn func(tx lapse.SandboxStore) error) error {
	return s.Tx(ctx, func(tx lapse.Store) error { return fn(tx.(*Store)) })
}

// SandboxOrderLock takes no lock of its own: the transaction holds the
// write lock of the whole database, in this process and any other, so no
// other transaction that locks an order runs until it ends.
func (s *Store) SandboxOrderLock(ctx context.Context, gateway, orderNo string) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "sqlite: the lock of sandbox order %s is taken in a transaction", orderNo)
	}
	return nil
}

const sandboxPaymentCols = `gateway, txn_id, order_no, status, amount, currency, merchant, paid_at, refunded, callback`

func scanSandboxPayment(r scanner) (*lapse.SandboxPayment, error) {
	var (
		p      lapse.SandboxPayment
		paidAt sql.NullInt64
	)
	err := r.Scan(&p.Gateway, &p.TxnID, &p.OrderNo, (*string)(&p.Status), &p.Amount, &p.Currency, &p.Merchant, &paidAt,
		&p.Refunded, &p.Callback)
	if err != nil {
		return nil, err
	}
	if paidAt.Valid {
		p.PaidAt = column.Time(paidAt.Int64)
	}
	return &p, nil
}

// SandboxPaymentList returns the payments of orderNo, or of every order when
// it is "", by id.
func (s *Store) SandboxPaymentList(ctx context.Context, gateway, orderNo string) ([]*lapse.SandboxPayment, error) {
	q, args := `SELECT `+sandboxPaymentCols+` FROM sandbox_payments WHERE gateway = ? AND order_no = ? ORDER BY id`, []any{gateway, orderNo}
	if orderNo == "" {
		q, args = `SELECT `+sandboxPaymentCols+` FROM sandbox_payments WHERE gateway = ? ORDER BY id`, []any{gateway}
	}
	ps, err := queryAll(ctx, s.db(), scanSandboxPayment, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: sandbox payment list %q: %w", orderNo, err)
	}
	return ps, nil
}

// SandboxPaymentGet returns a payment, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxPaymentGet(ctx context.Context, gateway, txnID string) (*lapse.SandboxPayment, error) {
	p, err := scanSandboxPayment(s.db().QueryRowContext(ctx, `SELECT `+sandboxPaymentCols+` FROM sandbox_payments
		WHERE gateway = ? AND txn_id = ?`, gateway, txnID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no payment %q", txnID)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: sandbox payment get %s: %w", txnID, err)
	}
	return p, nil
}

// SandboxPaymentPut inserts or updates p in one statement; a p of another
// order than the payment's is an EINVALID error.
func (s *Store) SandboxPaymentPut(ctx context.Context, p *lapse.SandboxPayment) error {
	var paidAt any
	if !p.PaidAt.IsZero() {
		paidAt = column.Micros(p.PaidAt)
	}
	err := s.write(ctx, func(w *writeTx) error {
		res, err := w.exec(ctx, `INSERT INTO sandbox_payments (`+sandboxPaymentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (gateway, txn_id) DO UPDATE SET status = excluded.status, amount = excluded.amount,
				currency = excluded.currency, merchant = excluded.merchant, paid_at = excluded.paid_at,
				refunded = excluded.refunded, callback = excluded.callback
			WHERE sandbox_payments.order_no = excluded.order_no`,
			p.Gateway, p.TxnID, p.OrderNo, string(p.Status), p.Amount, p.Currency, p.Merchant, paidAt, p.Refunded, p.Callback)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, error(lapse.Errorf(lapse.EINVALID, "sandbox payment %s is of another order than %s", p.TxnID, p.OrderNo)))
		}
		return nil
	})
	if err != nil {
		return fail(err, "sandbox payment put %s", p.TxnID)
	}
	return nil
}

// SandboxChargeGet returns a charge, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxChargeGet(ctx context.Context, gateway, key string) (*lapse.SandboxCharge, error) {
	var c lapse.SandboxCharge
	err := s.db().QueryRowContext(ctx, `SELECT gateway, key, order_no, amount, currency, method, txn_id FROM sandbox_charges
		WHERE gateway = ? AND key = ?`, gateway, key).Scan(&c.Gateway, &c.Key, &c.OrderNo, &c.Amount, &c.Currency, &c.Method, &c.TxnID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no charge under key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: sandbox charge get %s: %w", key, err)
	}
	return &c, nil
}

// SandboxChargeCreate inserts c unless its key exists.
func (s *Store) SandboxChargeCreate(ctx context.Context, c *lapse.SandboxCharge) (bool, error) {
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		res, err := w.exec(ctx, `INSERT INTO sandbox_charges (gateway, key, order_no, amount, currency, method, txn_id)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, c.Gateway, c.Key, c.OrderNo, c.Amount, c.Currency, c.Method, c.TxnID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		created = n == 1
		return err
	})
	if err != nil {
		return false, fail(err, "sandbox charge create %s", c.Key)
	}
	return created, nil
}

const sandboxRefundCols = `gateway, key, txn_id, order_no, amount, currency, reason, refund_id, status`

func scanSandboxRefund(r scanner) (*lapse.SandboxRefund, error) {
	var x lapse.SandboxRefund
	err := r.Scan(&x.Gateway, &x.Key, &x.TxnID, &x.OrderNo, &x.Amount, &x.Currency, &x.Reason, &x.RefundID, (*string)(&x.Status))
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// SandboxRefundGet returns a refund, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxRefundGet(ctx context.Context, gateway, key string) (*lapse.SandboxRefund, error) {
	r, err := scanSandboxRefund(s.db().QueryRowContext(ctx, `SELECT `+sandboxRefundCols+` FROM sandbox_refunds
		WHERE gateway = ? AND key = ?`, gateway, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no refund under key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: sandbox refund get %s: %w", key, err)
	}
	return r, nil
}

// SandboxRefundCreate inserts r unless its key exists.
func (s *Store) SandboxRefundCreate(ctx context.Context, r *lapse.SandboxRefund) (bool, error) {
	created := false
	err := s.write(ctx, func(w *writeTx) error {
		res, err := w.exec(ctx, `INSERT INTO sandbox_refunds (`+sandboxRefundCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, r.Gateway, r.Key, r.TxnID, r.OrderNo, r.Amount, r.Currency, r.Reason, r.RefundID, string(r.Status))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		created = n == 1
		return err
	})
	if err != nil {
		return false, fail(err, "sandbox refund create %s", r.Key)
	}
	return created, nil
}

// SandboxRefundList returns the gateway's refunds by id.
func (s *Store) SandboxRefundList(ctx context.Context, gateway string) ([]*lapse.SandboxRefund, error) {
	rs, err := queryAll(ctx, s.db(), scanSandboxRefund, `SELECT `+sandboxRefundCols+` FROM sandbox_refunds WHERE gateway = ? ORDER BY id`, gateway)
	if err != nil {
		return nil, fmt.Errorf("sqlite: sandbox refund list: %w", err)
	}
	return rs, nil
}

// SandboxSecretKeep inserts the gateway's secret unless it has one and
// returns the one it has, both under the write lock.
func (s *Store) SandboxSecretKeep(ctx context.Context, gateway string, secret []byte) ([]byte, error) {
	var kept []byte
	err := s.write(ctx, func(w *writeTx) error {
		if _, err := w.exec(ctx, `INSERT INTO sandbox_gateways (gateway, secret) VALUES (?, ?) ON CONFLICT DO NOTHING`, gateway, secret); err != nil {
			return err
		}
		return w.tx.QueryRowContext(ctx, `SELECT secret FROM sandbox_gateways WHERE gateway = ?`, gateway).Scan(&kept)
	})
	if err != nil {
		return nil, fail(err, "sandbox secret keep %s", gateway)
	}
	return kept, nil
}
