package engine

import (
	"context"
	"time"

	"github.com/lapsehq/lapse"
)

// checked is the engine's store: each call whose params have a Validate
// method is validated first, so that the rules of the root package are
// applied above the seam, once, whichever store is below it, and a store
// only ever sees params it may assume valid. The Store that Tx hands to fn
// is checked as well.
type checked struct{ lapse.Store }

func (s checked) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(checked{tx}) })
}

func (s checked) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.StockSet(ctx, p)
}

func (s checked) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return s.Store.StockMove(ctx, p)
}

func (s checked) CouponCreate(ctx context.Context, p *lapse.CouponCreateParams) (*lapse.Coupon, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.CouponCreate(ctx, p)
}

func (s checked) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.CouponMove(ctx, p)
}

func (s checked) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	return s.Store.OrderCreate(ctx, p)
}

// orderCreateWith is the store's lapse.OrderCreateWither, params checked;
// ok is false when the store has none.
func (s checked) orderCreateWith(ctx context.Context, p *lapse.OrderCreateParams, w lapse.OrderCreateWith) (o *lapse.Order, created, ok bool, err error) {
	cw, ok := s.Store.(lapse.OrderCreateWither)
	if !ok {
		return nil, false, false, nil
	}
	if err := p.Validate(); err != nil {
		return nil, false, true, err
	}
	if err := w.Validate(); err != nil {
		return nil, false, true, err
	}
	o, created, err = cw.OrderCreateWith(ctx, p, w)
	return o, created, true, err
}

func (s checked) OrderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	return s.Store.OrderCreateMany(ctx, ps)
}

func (s checked) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.OrderTransition(ctx, p)
}

func (s checked) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	if err := lapse.ValidateOrderTransitions(ps); err != nil {
		return nil, err
	}
	return s.Store.OrderTransitionMany(ctx, ps)
}

func (s checked) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.OrderDeadlineSet(ctx, p)
}

func (s checked) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	return s.Store.PaymentCreate(ctx, p)
}

func (s checked) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.PaymentUpdate(ctx, p)
}

func (s checked) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.DeliveryFinish(ctx, p)
}

func (s checked) DeliveryDoneMany(ctx context.Context, p *lapse.DeliveryDoneManyParams) ([]int64, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.DeliveryDoneMany(ctx, p)
}

func (s checked) OutboxPrune(ctx context.Context, p *lapse.OutboxPruneParams) (*lapse.OutboxPruned, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.OutboxPrune(ctx, p)
}

func (s checked) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	return s.Store.CardIssue(ctx, p)
}

func (s checked) CardUse(ctx context.Context, p *lapse.CardUseParams) (*lapse.Card, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.CardUse(ctx, p)
}

func (s checked) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.OrderClaimDue(ctx, p)
}

func (s checked) OrderDeadlineList(ctx context.Context, p *lapse.OrderDeadlineListParams) ([]lapse.OrderDeadline, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.OrderDeadlineList(ctx, p)
}

func (s checked) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	if err := lapse.ValidateFlows(flows); err != nil {
		return time.Time{}, false, err
	}
	return s.Store.OrderNextDeadline(ctx, flows, from)
}

func (s checked) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.DeliveryClaim(ctx, p)
}

func (s checked) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.OrderRefundUpdate(ctx, p)
}

func (s checked) ReviewCreate(ctx context.Context, r *lapse.Review) (*lapse.Review, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return s.Store.ReviewCreate(ctx, r)
}

func (s checked) ReviewResolve(ctx context.Context, p *lapse.ReviewResolveParams) ([]*lapse.Review, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.ReviewResolve(ctx, p)
}

func (s checked) HeldPaymentCreate(ctx context.Context, h *lapse.HeldPayment) (*lapse.HeldPayment, bool, error) {
	if err := h.Validate(); err != nil {
		return nil, false, err
	}
	return s.Store.HeldPaymentCreate(ctx, h)
}

func (s checked) HeldPaymentUpdate(ctx context.Context, p *lapse.HeldPaymentUpdateParams) (*lapse.HeldPayment, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.Store.HeldPaymentUpdate(ctx, p)
}

// relayerOf returns s's lapse.Relayer, params checked, or nil when the store
// below has none.
func relayerOf(s lapse.Store) lapse.Relayer {
	if a, ok := s.(auditing); ok {
		s = a.Store
	}
	if c, ok := s.(checked); ok {
		s = c.Store
	}
	r, ok := s.(lapse.Relayer)
	if !ok {
		return nil
	}
	return checkedRelayer{r}
}

// checkedRelayer is a lapse.Relayer whose params are validated first.
type checkedRelayer struct{ lapse.Relayer }

func (r checkedRelayer) RelayRead(ctx context.Context, p *lapse.RelayReadParams) (*lapse.RelayBatch, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return r.Relayer.RelayRead(ctx, p)
}

func (r checkedRelayer) RelayDefer(ctx context.Context, p *lapse.RelayDeferParams) ([]*lapse.Delivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return r.Relayer.RelayDefer(ctx, p)
}
