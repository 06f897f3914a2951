package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lapsehq/lapse"
)

var _ lapse.SandboxStore = (*Store)(nil)

// SandboxTx runs fn in one transaction, as Tx does.
func (s *Store) SandboxTx(ctx context.Context, fn func(tx lapse.SandboxStore) error) error {
	return s.Tx(ctx, func(tx lapse.Store) error { return fn(tx.(*Store)) })
}

// SandboxOrderLock locks the order's row of sandbox_orders, inserting it
// first when the gateway has not seen the order. An insert that meets a
// concurrent one of the same order waits for it to end; the lock then waits
// for any transaction that holds the row. Each statement reads the latest
// commits (READ COMMITTED), so what the caller reads afterwards includes
// those of every earlier holder.
func (s *Store) SandboxOrderLock(ctx context.Context, gateway, orderNo string) error {
	if s.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "postgres: the lock of sandbox order %s is taken in a transaction", orderNo)
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO sandbox_orders (gateway, order_no) VALUES ($1, $2) ON CONFLICT DO NOTHING`, gateway, orderNo); err != nil {
		return fmt.Errorf("postgres: lock sandbox order %s: %w", orderNo, err)
	}
	if _, err := s.db.Exec(ctx, `SELECT FROM sandbox_orders WHERE gateway = $1 AND order_no = $2 FOR UPDATE`, gateway, orderNo); err != nil {
		return fmt.Errorf("postgres: lock sandbox order %s: %w", orderNo, err)
	}
	return nil
}

const sandboxPaymentColumns = `gateway, txn_id, order_no, status, amount, currency, merchant, paid_at, refunded, callback`

func scanSandboxPayment(row pgx.Row) (*lapse.SandboxPayment, error) {
	var (
		p      lapse.SandboxPayment
		paidAt *time.Time
	)
	err := row.Scan(&p.Gateway, &p.TxnID, &p.OrderNo, &p.Status, &p.Amount, &p.Currency, &p.Merchant, &paidAt, &p.Refunded, &p.Callback)
	if err != nil {
		return nil, err
	}
	if paidAt != nil {
		p.PaidAt = paidAt.UTC()
	}
	return &p, nil
}

// SandboxPaymentList returns the payments of orderNo, or of every order when
// it is "", by id.
func (s *Store) SandboxPaymentList(ctx context.Context, gateway, orderNo string) ([]*lapse.SandboxPayment, error) {
	q, args := `SELECT `+sandboxPaymentColumns+` FROM sandbox_payments WHERE gateway = $1 AND order_no = $2 ORDER BY id`, []any{gateway, orderNo}
	if orderNo == "" {
		q, args = `SELECT `+sandboxPaymentColumns+` FROM sandbox_payments WHERE gateway = $1 ORDER BY id`, []any{gateway}
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list sandbox payments of %q: %w", orderNo, err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.SandboxPayment, error) { return scanSandboxPayment(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list sandbox payments of %q: %w", orderNo, err)
	}
	return ps, nil
}

// SandboxPaymentGet returns a payment, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxPaymentGet(ctx context.Context, gateway, txnID string) (*lapse.SandboxPayment, error) {
	p, err := scanSandboxPayment(s.db.QueryRow(ctx, `SELECT `+sandboxPaymentColumns+` FROM sandbox_payments
		WHERE gateway = $1 AND txn_id = $2`, gateway, txnID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no payment %q", txnID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get sandbox payment %s: %w", txnID, err)
	}
	return p, nil
}

// sandboxPaymentPutSQL inserts a payment or updates it, unless it exists
// with another order_no: then it writes nothing.
const sandboxPaymentPutSQL = `INSERT INTO sandbox_payments (` + sandboxPaymentColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (gateway, txn_id) DO UPDATE SET status = EXCLUDED.status, amount = EXCLUDED.amount,
	currency = EXCLUDED.currency, merchant = EXCLUDED.merchant, paid_at = EXCLUDED.paid_at,
	refunded = EXCLUDED.refunded, callback = EXCLUDED.callback
WHERE sandbox_payments.order_no = EXCLUDED.order_no`

// SandboxPaymentPut inserts or updates p in one statement; a p of another
// order than the payment's is an EINVALID error.
func (s *Store) SandboxPaymentPut(ctx context.Context, p *lapse.SandboxPayment) error {
	var paidAt *time.Time
	if !p.PaidAt.IsZero() {
		paidAt = &p.PaidAt
	}
	tag, err := s.db.Exec(ctx, sandboxPaymentPutSQL, p.Gateway, p.TxnID, p.OrderNo, p.Status, p.Amount, p.Currency,
		p.Merchant, paidAt, p.Refunded, p.Callback)
	if err != nil {
		return fmt.Errorf("postgres: put sandbox payment %s: %w", p.TxnID, err)
	}
	if tag.RowsAffected() == 0 {
		return lapse.Errorf(lapse.EINVALID, "sandbox payment %s is of another order than %s", p.TxnID, p.OrderNo)
	}
	return nil
}

// SandboxChargeGet returns a charge, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxChargeGet(ctx context.Context, gateway, key string) (*lapse.SandboxCharge, error) {
	var c lapse.SandboxCharge
	err := s.db.QueryRow(ctx, `SELECT gateway, key, order_no, amount, currency, method, txn_id FROM sandbox_charges
		WHERE gateway = $1 AND key = $2`, gateway, key).Scan(&c.Gateway, &c.Key, &c.OrderNo, &c.Amount, &c.Currency, &c.Method, &c.TxnID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no charge under key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get sandbox charge %s: %w", key, err)
	}
	return &c, nil
}

// SandboxChargeCreate inserts c unless its key exists. An insert that meets
// a concurrent one of the same key waits for it: it inserts if that one
// rolls back, and does nothing if it commits.
func (s *Store) SandboxChargeCreate(ctx context.Context, c *lapse.SandboxCharge) (bool, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO sandbox_charges (gateway, key, order_no, amount, currency, method, txn_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, c.Gateway, c.Key, c.OrderNo, c.Amount, c.Currency, c.Method, c.TxnID)
	if err != nil {
		return false, fmt.Errorf("postgres: create sandbox charge %s: %w", c.Key, err)
	}
	return tag.RowsAffected() == 1, nil
}

const sandboxRefundColumns = `gateway, key, txn_id, order_no, amount, currency, reason, refund_id, status`

func scanSandboxRefund(row pgx.Row) (*lapse.SandboxRefund, error) {
	var r lapse.SandboxRefund
	if err := row.Scan(&r.Gateway, &r.Key, &r.TxnID, &r.OrderNo, &r.Amount, &r.Currency, &r.Reason, &r.RefundID, &r.Status); err != nil {
		return nil, err
	}
	return &r, nil
}

// SandboxRefundGet returns a refund, or an error wrapping
// lapse.ErrProviderNotFound.
func (s *Store) SandboxRefundGet(ctx context.Context, gateway, key string) (*lapse.SandboxRefund, error) {
	r, err := scanSandboxRefund(s.db.QueryRow(ctx, `SELECT `+sandboxRefundColumns+` FROM sandbox_refunds
		WHERE gateway = $1 AND key = $2`, gateway, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no refund under key %q", key)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get sandbox refund %s: %w", key, err)
	}
	return r, nil
}

// SandboxRefundCreate inserts r unless its key exists, waiting for a
// concurrent insert of the key as SandboxChargeCreate does.
func (s *Store) SandboxRefundCreate(ctx context.Context, r *lapse.SandboxRefund) (bool, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO sandbox_refunds (`+sandboxRefundColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
		r.Gateway, r.Key, r.TxnID, r.OrderNo, r.Amount, r.Currency, r.Reason, r.RefundID, r.Status)
	if err != nil {
		return false, fmt.Errorf("postgres: create sandbox refund %s: %w", r.Key, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SandboxRefundList returns the gateway's refunds by id.
func (s *Store) SandboxRefundList(ctx context.Context, gateway string) ([]*lapse.SandboxRefund, error) {
	rows, err := s.db.Query(ctx, `SELECT `+sandboxRefundColumns+` FROM sandbox_refunds WHERE gateway = $1 ORDER BY id`, gateway)
	if err != nil {
		return nil, fmt.Errorf("postgres: list sandbox refunds: %w", err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*lapse.SandboxRefund, error) { return scanSandboxRefund(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list sandbox refunds: %w", err)
	}
	return rs, nil
}

// SandboxSecretKeep inserts the gateway's secret unless it has one, then
// reads the one it has. The insert waits for a concurrent one to end, and
// the read, a statement of its own, sees the winner.
func (s *Store) SandboxSecretKeep(ctx context.Context, gateway string, secret []byte) ([]byte, error) {
	if _, err := s.db.Exec(ctx, `INSERT INTO sandbox_gateways (gateway, secret) VALUES ($1, $2) ON CONFLICT DO NOTHING`, gateway, secret); err != nil {
		return nil, fmt.Errorf("postgres: keep the sandbox secret of %s: %w", gateway, err)
	}
	var kept []byte
	if err := s.db.QueryRow(ctx, `SELECT secret FROM sandbox_gateways WHERE gateway = $1`, gateway).Scan(&kept); err != nil {
		return nil, fmt.Errorf("postgres: keep the sandbox secret of %s: %w", gateway, err)
	}
	return kept, nil
}
