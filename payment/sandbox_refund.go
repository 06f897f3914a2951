package payment

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/lapsehq/lapse"
)

// Refund refunds r.Amount of the paid payment r.TxnID at once and sends the
// refunded callback (its RefundID is r.IdempotencyKey) before returning; a
// callback that fails shows only in Calls, as Redeliver can send it again.
// The same IdempotencyKey returns the same refund; refunds that would take
// more than was captured, of a payment that is not paid, or under a key
// used for another refund, are refused with an error wrapping
// lapse.ErrRefused.
func (s *Sandbox) Refund(ctx context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	op := "refund " + r.IdempotencyKey
	if r.IdempotencyKey == "" {
		return nil, fmt.Errorf("sandbox: refund: %w", sandboxRefuse(http.StatusBadRequest, "the idempotency key is missing"))
	}
	if r.Amount <= 0 {
		return nil, fmt.Errorf("sandbox: %s: %w", op, sandboxRefuse(http.StatusUnprocessableEntity, "amount must be a positive number of minor units"))
	}
	fail, lose := s.fate(&s.calls.Refund)
	if fail {
		return nil, fmt.Errorf("sandbox: %s: %w: %w", op, errSandboxDown, lapse.ErrNotSent)
	}
	var (
		rf   *lapse.ProviderRefund
		body []byte
	)
	err := s.store.SandboxTx(ctx, func(tx lapse.SandboxStore) error {
		var err error
		rf, body, err = s.refund(ctx, tx, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	if body != nil {
		// A gateway's callbacks do not hang on the API call that caused
		// them: the caller giving up must not stop the refund's.
		s.send(context.WithoutCancel(ctx), body)
	}
	if lose {
		return nil, sandboxLost(op)
	}
	return rf, nil
}

// refund makes the refund r asks for in tx, or finds the one made under its
// key, and returns the callback to send about a new one.
func (s *Sandbox) refund(ctx context.Context, tx lapse.SandboxStore, r *lapse.RefundRequest) (*lapse.ProviderRefund, []byte, error) {
	// The payment's order is the lock. A payment never changes order, so
	// reading it before the lock finds the right one; it is read again
	// under the lock.
	p, err := tx.SandboxPaymentGet(ctx, s.name, r.TxnID)
	switch {
	case err == nil:
		if err := tx.SandboxOrderLock(ctx, s.name, p.OrderNo); err != nil {
			return nil, nil, err
		}
	case errors.Is(err, lapse.ErrProviderNotFound):
		p = nil
	default:
		return nil, nil, err
	}
	prev, err := tx.SandboxRefundGet(ctx, s.name, r.IdempotencyKey)
	switch {
	case err == nil:
		if prev.TxnID != r.TxnID || prev.Amount != r.Amount || prev.OrderNo != r.OrderNo || prev.Currency != r.Currency {
			return nil, nil, sandboxRefuse(http.StatusConflict, "idempotency key %q was used for another refund", r.IdempotencyKey)
		}
		return providerRefund(prev), nil, nil
	case !errors.Is(err, lapse.ErrProviderNotFound):
		return nil, nil, err
	}
	if p != nil {
		if p, err = tx.SandboxPaymentGet(ctx, s.name, r.TxnID); err != nil {
			return nil, nil, err
		}
	}
	switch {
	case p == nil:
		return nil, nil, sandboxRefuse(http.StatusUnprocessableEntity, "no payment %q to refund", r.TxnID)
	case r.OrderNo != "" && r.OrderNo != p.OrderNo:
		return nil, nil, sandboxRefuse(http.StatusUnprocessableEntity, "payment %s is for order %s, not %s", p.TxnID, p.OrderNo, r.OrderNo)
	case r.Currency != "" && r.Currency != p.Currency:
		return nil, nil, sandboxRefuse(http.StatusUnprocessableEntity, "payment %s is in %s, not %s", p.TxnID, p.Currency, r.Currency)
	case p.Status != lapse.ProviderPaid:
		return nil, nil, sandboxRefuse(http.StatusConflict, "payment %s is %s: only a paid payment can be refunded", p.TxnID, p.Status)
	case r.Amount > p.Amount-p.Refunded:
		return nil, nil, sandboxRefuse(http.StatusConflict, "refunding %s would exceed payment %s: %s of %s is left",
			lapse.Money(r.Amount, p.Currency), p.TxnID, lapse.Money(p.Amount-p.Refunded, p.Currency), lapse.Money(p.Amount, p.Currency))
	}
	p.Refunded += r.Amount
	if p.Refunded == p.Amount {
		p.Status = lapse.ProviderRefunded
	}
	rf := &lapse.SandboxRefund{Gateway: s.name, Key: r.IdempotencyKey, TxnID: r.TxnID, OrderNo: r.OrderNo, Amount: r.Amount,
		Currency: r.Currency, Reason: r.Reason, RefundID: r.IdempotencyKey, Status: lapse.RefundSucceeded}
	body := s.setCallback(p, Notice{Kind: lapse.NoticeRefunded, RefundID: rf.RefundID, Amount: r.Amount, PaidAt: s.clock.Now()})
	if err := tx.SandboxPaymentPut(ctx, p); err != nil {
		return nil, nil, err
	}
	created, err := tx.SandboxRefundCreate(ctx, rf)
	switch {
	case err != nil:
		return nil, nil, err
	case !created:
		// Created meanwhile for a payment of another order, whose lock this
		// is not.
		return nil, nil, sandboxRefuse(http.StatusConflict, "idempotency key %q was used for another refund", r.IdempotencyKey)
	}
	return providerRefund(rf), body, nil
}

func providerRefund(r *lapse.SandboxRefund) *lapse.ProviderRefund {
	return &lapse.ProviderRefund{RefundID: r.RefundID, TxnID: r.TxnID, Amount: r.Amount, Currency: r.Currency, Status: r.Status}
}

// RefundQuery returns the refund made under idempotencyKey, or an error
// wrapping lapse.ErrProviderNotFound.
func (s *Sandbox) RefundQuery(ctx context.Context, idempotencyKey string) (*lapse.ProviderRefund, error) {
	s.count(&s.calls.RefundQuery)
	rf, err := s.store.SandboxRefundGet(ctx, s.name, idempotencyKey)
	if err != nil {
		return nil, fmt.Errorf("sandbox: refund query %s: %w", idempotencyKey, err)
	}
	return providerRefund(rf), nil
}
