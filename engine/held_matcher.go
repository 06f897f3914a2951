package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lapsehq/lapse"
)

// Defaults of HeldMatcherConfig.
const (
	DefaultHeldWindow        = 24 * time.Hour
	DefaultHeldMatchInterval = 10 * time.Second
	DefaultHeldMatchBatch    = 100
)

// HeldMatcherConfig configures a HeldMatcher. Zero values take the
// defaults noted.
type HeldMatcherConfig struct {
	// Window is how long a payment held without its order waits for it
	// before it is put in review. Default 24h: a provider's callback that
	// overtakes its order's creation comes seconds ahead, not hours.
	Window time.Duration
	// Interval is the pause between passes. Default 10s: an order created
	// after its payment's callback is paid within about that. A pass is
	// one indexed read when nothing is held.
	Interval time.Duration
	// Batch is how many held payments one read takes. Default 100.
	Batch int
	// Logger receives the matcher's errors. Default: the engine's.
	Logger *slog.Logger
}

// HeldMatcher settles payments held without their order
// (lapse.HeldPayment). Each pass reads the ones waiting or refunding, and:
//
//   - a waiting one whose transaction is recorded as a payment (a callback
//     came again once its order existed, or a pass applied it and stopped
//     before marking it) is marked applied when that payment is of the same
//     order, amount and currency, and put in review otherwise (the money is
//     counted once, as the payment);
//   - a waiting one whose order now exists goes through the payment path as
//     its callback would have (ApplyPayment): paid when it is in time and
//     matches the order, late (and refunded) when the order cannot take it,
//     in review when it does not match; its time may predate the order,
//     whose creation it overtook, but not the callback;
//   - a waiting one whose window passed with no order is put in review;
//   - a refunding one is asked about at its provider under its refund's key.
//
// Its look-up is not on the order create path, which stays as fast as it
// was: a pass is one indexed read while nothing is held. Matchers in
// several processes may run at once: the payment's unique transaction and
// the held payment's guarded status make each step happen once.
type HeldMatcher struct {
	e   *Engine
	cfg HeldMatcherConfig
	log *slog.Logger

	bg background
}

// NewHeldMatcher returns a matcher of the engine's held payments.
func NewHeldMatcher(e *Engine, cfg HeldMatcherConfig) (*HeldMatcher, error) {
	if cfg.Window < 0 || cfg.Interval < 0 || cfg.Batch < 0 {
		return nil, lapse.Errorf(lapse.EINVALID, "engine: held matcher: window %s, interval %s and batch %d must not be negative",
			cfg.Window, cfg.Interval, cfg.Batch)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultHeldWindow
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultHeldMatchInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultHeldMatchBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	return &HeldMatcher{e: e, cfg: cfg, log: cfg.Logger}, nil
}

// Config returns the matcher's settings, with their defaults.
func (m *HeldMatcher) Config() HeldMatcherConfig { return m.cfg }

// HeldMatched counts what a pass of the HeldMatcher did.
type HeldMatched struct {
	Applied   int // went through the payment path (or were found there)
	Reviewed  int // put in review: window passed, or contradicted
	Refunded  int // refunds that the provider reported done
	Returned  int // refunds refused: in review again
	Remaining int // still waiting or refunding
}

// RunOnce makes one pass over the held payments waiting or refunding. A
// payment whose step fails is left for the next pass; the first such error
// is returned after the pass.
func (m *HeldMatcher) RunOnce(ctx context.Context) (HeldMatched, error) {
	var (
		got   HeldMatched
		first error
		after int64
	)
	for {
		page, err := m.e.store.HeldPaymentList(ctx, &lapse.HeldPaymentListParams{
			Statuses: []lapse.HeldPaymentStatus{lapse.HeldWaiting, lapse.HeldRefunding}, AfterID: after, Limit: m.cfg.Batch})
		if err != nil {
			return got, err
		}
		for _, h := range page {
			after = h.ID
			if err := m.step(ctx, h, &got); err != nil {
				if ctx.Err() != nil {
					return got, ctx.Err()
				}
				m.log.Error("held payment: step failed; tried again at the next pass", "provider", h.Provider, "txn_id", h.TxnID, "err", err)
				if first == nil {
					first = err
				}
			}
		}
		if len(page) < m.cfg.Batch {
			return got, first
		}
	}
}

func (m *HeldMatcher) step(ctx context.Context, h *lapse.HeldPayment, got *HeldMatched) error {
	if h.Status == lapse.HeldRefunding {
		return m.refundStep(ctx, h, got)
	}
	e, ps := m.e, m.e.feat.payments
	pay, err := e.store.PaymentGet(ctx, h.Provider, h.TxnID)
	switch {
	case err == nil:
		if why := heldConflict(h, &lapse.PaymentNotice{OrderNo: pay.OrderNo, Amount: pay.Amount, Currency: pay.Currency}); why != "" {
			why = fmt.Sprintf("its transaction is recorded as payment %d (%s) of order %s; it is held as %s for order %s",
				pay.ID, lapse.Money(pay.Amount, pay.Currency), pay.OrderNo, lapse.Money(h.Amount, h.Currency), h.OrderNo)
			if _, err := ps.heldContradicted(ctx, h, why); err != nil {
				return err
			}
			got.Reviewed++
			return nil
		}
		return m.applied(ctx, h, pay, got)
	case !errors.Is(err, lapse.ErrPaymentNotFound):
		return err
	}
	_, err = e.store.OrderGet(ctx, h.OrderNo)
	switch {
	case err == nil:
		pay, err := ps.applyNotice(ctx, heldNotice(h), h.CreatedAt)
		if err != nil {
			return err
		}
		if pay != nil && pay.Status == lapse.PaymentHeld {
			got.Remaining++
			return nil
		}
		return m.applied(ctx, h, pay, got)
	case !errors.Is(err, lapse.ErrOrderNotFound):
		return err
	}
	now := e.clock.Now()
	if now.Before(h.CreatedAt.Add(m.cfg.Window)) {
		got.Remaining++
		return nil
	}
	why := fmt.Sprintf("no order %s appeared within %s of its callback at %s: refund it or dismiss it", h.OrderNo, m.cfg.Window,
		h.CreatedAt.UTC().Format(time.RFC3339))
	_, err = e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: lapse.HeldWaiting, To: lapse.HeldReview,
		Reason: lapse.CleanReason(why), At: now})
	if errors.Is(err, lapse.ErrStale) {
		return nil // another matcher, or a contradicting callback, moved it
	}
	if err != nil {
		return err
	}
	e.log.Error("payment held without its order is in review", "provider", h.Provider, "txn_id", h.TxnID, "order_no", h.OrderNo,
		"amount", h.Amount, "currency", h.Currency)
	e.metrics.payments.WithLabelValues(h.Provider, string(lapse.PaymentReview)).Inc()
	got.Reviewed++
	return nil
}

// applied marks h applied: the payment path took it, as pay (nil: as a
// group member's charge).
func (m *HeldMatcher) applied(ctx context.Context, h *lapse.HeldPayment, pay *lapse.Payment, got *HeldMatched) error {
	why := "handled as a group member's charge of its transaction"
	if pay != nil {
		why = fmt.Sprintf("applied to order %s as payment %d, %s", pay.OrderNo, pay.ID, pay.Status)
	}
	_, err := m.e.store.HeldPaymentUpdate(ctx, &lapse.HeldPaymentUpdateParams{ID: h.ID, From: lapse.HeldWaiting, To: lapse.HeldApplied,
		Reason: why, At: m.e.clock.Now()})
	if errors.Is(err, lapse.ErrStale) {
		return nil
	}
	if err == nil {
		m.e.log.Info("payment held without its order went through the payment path", "provider", h.Provider, "txn_id", h.TxnID,
			"order_no", h.OrderNo, "result", why)
		got.Applied++
	}
	return err
}

// refundStep asks h's provider about its refund, under its key.
func (m *HeldMatcher) refundStep(ctx context.Context, h *lapse.HeldPayment, got *HeldMatched) error {
	e := m.e
	prov := e.feat.payments.providers[h.Provider]
	if prov == nil {
		got.Remaining++
		return fmt.Errorf("held payment %d is refunding, but no payment provider port is configured for %s", h.ID, h.Provider)
	}
	ref, err := prov.RefundQuery(ctx, HeldRefundKey(h))
	if errors.Is(err, lapse.ErrProviderNotFound) {
		// The answer that was lost said no: the refund was never made.
		err = fmt.Errorf("%w: %s has no refund %s", lapse.ErrRefused, h.Provider, HeldRefundKey(h))
	}
	after, err := e.heldRefundAnswered(ctx, h, ref, err)
	switch {
	case errors.Is(err, lapse.ErrStale):
		return nil
	case err != nil:
		return err
	case after.Status == lapse.HeldRefunded:
		got.Refunded++
	case after.Status == lapse.HeldReview:
		got.Returned++
	default:
		got.Remaining++
	}
	return nil
}

// Start runs a pass at once and then one every Interval after the last
// ended, until Stop or until ctx ends. Start on a running matcher does
// nothing.
func (m *HeldMatcher) Start(ctx context.Context) {
	m.bg.start(ctx, func(ctx context.Context) {
		every(ctx, m.cfg.Interval, func(ctx context.Context) {
			if _, err := m.RunOnce(ctx); err != nil && ctx.Err() == nil {
				m.log.Error("held payments: a pass failed; tried again at the next interval", "err", err, "interval", m.cfg.Interval.String())
			}
		})
	})
}

// Stop stops the loop and waits for it.
func (m *HeldMatcher) Stop() { m.bg.stop() }
