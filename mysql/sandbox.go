package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

var _ lapse.SandboxStore = (*Store)(nil)

// SandboxTx runs fn in one transaction, as Tx does.
func (s *Store) SandboxTx(ctx context.Context, fn func(tx lapse.SandboxStore) error) error {
	return s.Tx(ctx, func(tx lapse.Store) error { return fn(tx.(*Store)) })
}

// SandboxOrderLock locks the order's row of sandbox_orders, inserting it
// first when the gateway has not seen the order, in one statement: an
// INSERT … ON DUPLICATE KEY UPDATE holds the row it inserted or met
// exclusively until the transaction ends (taking no shared lock first that
// concurrent lockers would deadlock upgrading). Each later statement reads
// the latest commits (READ COMMITTED), so what the caller reads afterwards
// includes those of every earlier holder.
func (s *Store) SandboxOrderLock(ctx context.Context, gateway, orderNo string) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "mysql: the lock of sandbox order %s is taken in a transaction", orderNo)
	}
	if _, err := s.exec(ctx, `INSERT INTO sandbox_orders (gateway, order_no) VALUES (?, ?)
		ON DUPLICATE KEY UPDATE order_no = order_no`, gateway, orderNo); err != nil {
		return fmt.Errorf("mysql: lock sandbox order %s: %w", orderNo, err)
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
	ps, err := queryAll(ctx, s, scanSandboxPayment, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: list sandbox payments of %q: %w", orderNo, err)
	}
	return ps, nil
}

// SandboxPaymentGet returns a payment, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxPaymentGet(ctx context.Context, gateway, txnID string) (*lapse.SandboxPayment, error) {
	p, err := scanSandboxPayment(s.queryRow(ctx, `SELECT `+sandboxPaymentCols+` FROM sandbox_payments
		WHERE gateway = ? AND txn_id = ?`, gateway, txnID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no payment %q", txnID)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get sandbox payment %s: %w", txnID, err)
	}
	return p, nil
}

// SandboxPaymentPut updates p, guarded by its order_no, or inserts it when
// the gateway has no payment txnID; a p of another order than the payment's
// is an EINVALID error. An insert that meets a concurrent one of the same
// payment tries the update again.
func (s *Store) SandboxPaymentPut(ctx context.Context, p *lapse.SandboxPayment) error {
	var paidAt any
	if !p.PaidAt.IsZero() {
		paidAt = column.Micros(p.PaidAt)
	}
	update := func(w *Store) (bool, error) {
		res, err := w.exec(ctx, `UPDATE sandbox_payments SET status = ?, amount = ?, currency = ?, merchant = ?,
			paid_at = ?, refunded = ?, callback = ? WHERE gateway = ? AND txn_id = ? AND order_no = ?`,
			string(p.Status), p.Amount, p.Currency, p.Merchant, paidAt, p.Refunded, p.Callback, p.Gateway, p.TxnID, p.OrderNo)
		return err == nil && affected(res) == 1, err
	}
	_, err := write(ctx, s, func(w *Store) (struct{}, error) {
		if done, err := update(w); done || err != nil {
			return struct{}{}, err
		}
		_, err := w.exec(ctx, `INSERT INTO sandbox_payments (`+sandboxPaymentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.Gateway, p.TxnID, p.OrderNo, string(p.Status), p.Amount, p.Currency, p.Merchant, paidAt, p.Refunded, p.Callback)
		if !isDuplicate(err) {
			return struct{}{}, err
		}
		if done, err := update(w); done || err != nil {
			return struct{}{}, err
		}
		return struct{}{}, lapse.Errorf(lapse.EINVALID, "sandbox payment %s is of another order than %s", p.TxnID, p.OrderNo)
	})
	if err != nil {
		return fail(err, "put sandbox payment %s", p.TxnID)
	}
	return nil
}

// SandboxChargeGet returns a charge, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxChargeGet(ctx context.Context, gateway, key string) (*lapse.SandboxCharge, error) {
	var c lapse.SandboxCharge
	err := s.queryRow(ctx, "SELECT gateway, `key`, order_no, amount, currency, method, txn_id FROM sandbox_charges "+
		"WHERE gateway = ? AND `key` = ?", gateway, key).Scan(&c.Gateway, &c.Key, &c.OrderNo, &c.Amount, &c.Currency, &c.Method, &c.TxnID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no charge under key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get sandbox charge %s: %w", key, err)
	}
	return &c, nil
}

// SandboxChargeCreate inserts c unless its key exists. An insert that meets
// a concurrent one of the same key waits for it: it inserts if that one
// rolls back, and does nothing if it commits.
func (s *Store) SandboxChargeCreate(ctx context.Context, c *lapse.SandboxCharge) (bool, error) {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, "INSERT INTO sandbox_charges (gateway, `key`, order_no, amount, currency, method, txn_id) "+
			"VALUES (?, ?, ?, ?, ?, ?, ?)", c.Gateway, c.Key, c.OrderNo, c.Amount, c.Currency, c.Method, c.TxnID)
	})
	if isDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mysql: create sandbox charge %s: %w", c.Key, err)
	}
	return true, nil
}

const sandboxRefundCols = "gateway, `key`, txn_id, order_no, amount, currency, reason, refund_id, status"

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
	r, err := scanSandboxRefund(s.queryRow(ctx, "SELECT "+sandboxRefundCols+" FROM sandbox_refunds WHERE gateway = ? AND `key` = ?", gateway, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no refund under key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: get sandbox refund %s: %w", key, err)
	}
	return r, nil
}

// SandboxRefundCreate inserts r unless its key exists, waiting for a
// concurrent insert of the key as SandboxChargeCreate does.
func (s *Store) SandboxRefundCreate(ctx context.Context, r *lapse.SandboxRefund) (bool, error) {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, "INSERT INTO sandbox_refunds ("+sandboxRefundCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			r.Gateway, r.Key, r.TxnID, r.OrderNo, r.Amount, r.Currency, r.Reason, r.RefundID, string(r.Status))
	})
	if isDuplicate(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mysql: create sandbox refund %s: %w", r.Key, err)
	}
	return true, nil
}

// SandboxRefundList returns the gateway's refunds by id.
func (s *Store) SandboxRefundList(ctx context.Context, gateway string) ([]*lapse.SandboxRefund, error) {
	rs, err := queryAll(ctx, s, scanSandboxRefund, "SELECT "+sandboxRefundCols+" FROM sandbox_refunds WHERE gateway = ? ORDER BY id", gateway)
	if err != nil {
		return nil, fmt.Errorf("mysql: list sandbox refunds: %w", err)
	}
	return rs, nil
}

// SandboxSecretKeep inserts the gateway's secret unless it has one, then
// reads the one it has. The insert waits for a concurrent one to end, and
// the read, a statement of its own, sees the winner.
func (s *Store) SandboxSecretKeep(ctx context.Context, gateway string, secret []byte) ([]byte, error) {
	_, err := autocommit(s, func() (sql.Result, error) {
		return s.exec(ctx, `INSERT INTO sandbox_gateways (gateway, secret) VALUES (?, ?)`, gateway, secret)
	})
	if err != nil && !isDuplicate(err) {
		return nil, fmt.Errorf("mysql: keep the sandbox secret of %s: %w", gateway, err)
	}
	var kept []byte
	if err := s.queryRow(ctx, `SELECT secret FROM sandbox_gateways WHERE gateway = ?`, gateway).Scan(&kept); err != nil {
		return nil, fmt.Errorf("mysql: keep the sandbox secret of %s: %w", gateway, err)
	}
	return kept, nil
}
