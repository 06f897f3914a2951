package sim

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/lapsehq/lapse"
)

// providerName is the fake provider's name in the engine's config.
const providerName = "simpay"

// provider is a fake payment gateway. It keeps what a real one keeps (the
// customers' payments by order number, charges and refunds by idempotency
// key, what each transaction captured and gave back), answers as a real one
// does, and, as the seed draws, refuses, is down (does nothing and says
// so), or does the work and loses the answer (ErrUnknownOutcome). It never
// enforces Lapse's rules: an over-refund or a second charge is recorded, for
// the auditor to find.
type provider struct {
	mu    sync.Mutex
	f     *faults
	clock lapse.Clock
	rate  float64 // of a fault per call

	pays     map[string]*lapse.ProviderPayment // customers' payments, by order_no
	closed   map[string]bool                   // order_nos whose payment was closed unpaid
	charges  map[string]*lapse.ProviderPayment // group charges, by idempotency key
	byMethod map[string]int                    // captures per payment method
	refunds  map[string]*lapse.ProviderRefund  // by idempotency key
	captured map[string]int64                  // by txn id
	refunded map[string]int64                  // by txn id
	txns     int

	// notices are the refund callbacks of refunds that completed after
	// answering "processing"; the simulator sends them.
	notices []*lapse.PaymentNotice
}

func newProvider(f *faults, clock lapse.Clock) *provider {
	return &provider{f: f, clock: clock, rate: 0.12, pays: map[string]*lapse.ProviderPayment{}, closed: map[string]bool{},
		charges: map[string]*lapse.ProviderPayment{}, byMethod: map[string]int{}, refunds: map[string]*lapse.ProviderRefund{},
		captured: map[string]int64{}, refunded: map[string]int64{}}
}

// fault draws the outcome of one call at site: "", FaultRefuse, FaultDown
// or FaultLost.
func (p *provider) fault(site string) string { return p.faultOf(site, true) }

// faultOf is fault, refusals only when refusable: a gateway answers a key
// it has seen as it did the first time.
func (p *provider) faultOf(site string, refusable bool) string {
	switch {
	case refusable && p.f.draw(site, p.rate/6, FaultRefuse):
		return FaultRefuse
	case p.f.draw(site, p.rate/2, FaultDown):
		return FaultDown
	case p.f.draw(site, p.rate/2, FaultLost):
		return FaultLost
	}
	return ""
}

func (p *provider) newTxn() string {
	p.txns++
	return fmt.Sprintf("txn-%05d", p.txns)
}

// pay is a customer paying orderNo at the provider, now. It returns the
// paid notice to send, or nil when the provider closed the payment first or
// the customer paid already.
func (p *provider) pay(orderNo string, amount int64, currency string) *lapse.PaymentNotice {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed[orderNo] || p.pays[orderNo] != nil {
		return nil
	}
	pp := &lapse.ProviderPayment{TxnID: p.newTxn(), OrderNo: orderNo, Status: lapse.ProviderPaid, Amount: amount,
		Currency: currency, PaidAt: p.clock.Now()}
	p.pays[orderNo] = pp
	p.captured[pp.TxnID] = amount
	return paidNotice(pp)
}

func paidNotice(pp *lapse.ProviderPayment) *lapse.PaymentNotice {
	return &lapse.PaymentNotice{Provider: providerName, Kind: lapse.NoticePaid, TxnID: pp.TxnID, OrderNo: pp.OrderNo,
		Amount: pp.Amount, Currency: pp.Currency, PaidAt: pp.PaidAt, Raw: []byte(`{}`)}
}

func (p *provider) fail(kind, call string) error {
	switch kind {
	case FaultRefuse:
		return fmt.Errorf("%w: %s: %w", errInjected, call, lapse.ErrRefused)
	case FaultLost:
		return fmt.Errorf("%w: %s: %w", errInjected, call, lapse.ErrUnknownOutcome)
	}
	return fmt.Errorf("%w: %s: gateway down: %w", errInjected, call, lapse.ErrNotSent)
}

func (p *provider) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.charges[r.IdempotencyKey]
	kind := p.faultOf("charge "+r.IdempotencyKey, pp == nil)
	if kind == FaultDown || kind == FaultRefuse {
		return nil, p.fail(kind, "charge")
	}
	if pp == nil {
		pp = &lapse.ProviderPayment{TxnID: p.newTxn(), OrderNo: r.OrderNo, Status: lapse.ProviderPaid, Amount: r.Amount,
			Currency: r.Currency, PaidAt: p.clock.Now()}
		p.charges[r.IdempotencyKey] = pp
		p.byMethod[r.Method]++
		p.captured[pp.TxnID] = r.Amount
	}
	if kind == FaultLost {
		return nil, p.fail(kind, "charge")
	}
	c := *pp
	return &c, nil
}

func (p *provider) Refund(_ context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ref := p.refunds[r.IdempotencyKey]
	// Sites are named by what the refund is of: a merchant refund without
	// a key of its own gets a random one.
	kind := p.faultOf(refundSite("refund", r.TxnID, r.Amount), ref == nil)
	if kind == FaultDown || kind == FaultRefuse {
		return nil, p.fail(kind, "refund")
	}
	if ref == nil {
		ref = &lapse.ProviderRefund{RefundID: fmt.Sprintf("ref-%d", len(p.refunds)+1), TxnID: r.TxnID, Amount: r.Amount, Status: lapse.RefundSucceeded}
		p.refunds[r.IdempotencyKey] = ref
		p.refunded[r.TxnID] += r.Amount
		// Some refunds complete later, with a callback.
		if p.f.draw(refundSite("processing", r.TxnID, r.Amount), 0.25, "refund_processing") {
			ref.Status = lapse.RefundProcessing
			p.notices = append(p.notices, &lapse.PaymentNotice{Provider: providerName, Kind: lapse.NoticeRefunded, TxnID: r.TxnID,
				RefundID: ref.RefundID, OrderNo: r.OrderNo, Amount: r.Amount, Currency: r.Currency, PaidAt: p.clock.Now(), Raw: []byte(`{}`)})
		}
	}
	if kind == FaultLost {
		return nil, p.fail(kind, "refund")
	}
	c := *ref
	return &c, nil
}

// refundsDone completes the refunds that were processing and returns their
// callbacks.
func (p *provider) refundsDone() []*lapse.PaymentNotice {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ref := range p.refunds {
		if ref.Status == lapse.RefundProcessing {
			ref.Status = lapse.RefundSucceeded
		}
	}
	out := p.notices
	p.notices = nil
	return out
}

func (p *provider) RefundQuery(_ context.Context, key string) (*lapse.ProviderRefund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ref := p.refunds[key]
	site := "refund query " + key
	if ref != nil {
		site = refundSite("refund query", ref.TxnID, ref.Amount)
	}
	if kind := p.fault(site); kind == FaultDown || kind == FaultLost {
		return nil, p.fail(FaultDown, "refund query")
	}
	if ref == nil {
		return nil, fmt.Errorf("refund %s: %w", key, lapse.ErrProviderNotFound)
	}
	c := *ref
	return &c, nil
}

func (p *provider) Query(_ context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	if kind := p.fault("query " + orderNo); kind == FaultDown || kind == FaultLost {
		return nil, p.fail(FaultDown, "query")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.pays[orderNo]
	if pp == nil {
		pp = p.charges[orderNo] // a group charge is asked about by its key
	}
	if pp == nil {
		if p.closed[orderNo] {
			return &lapse.ProviderPayment{OrderNo: orderNo, Status: lapse.ProviderClosed}, nil
		}
		return nil, fmt.Errorf("payment of %s: %w", orderNo, lapse.ErrProviderNotFound)
	}
	c := *pp
	return &c, nil
}

func (p *provider) Close(_ context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	kind := p.fault("close " + orderNo)
	if kind == FaultRefuse || kind == FaultDown {
		return nil, p.fail(FaultDown, "close")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out *lapse.ProviderPayment
	if pp := p.pays[orderNo]; pp != nil {
		c := *pp
		out = &c
	} else {
		p.closed[orderNo] = true
		out = &lapse.ProviderPayment{OrderNo: orderNo, Status: lapse.ProviderClosed}
	}
	if kind == FaultLost {
		return nil, p.fail(kind, "close")
	}
	return out, nil
}

// refundSite names a fault site of a refund: what, the payment and the amount in
// minor units. Sites are keys of the seed's draws, never shown as money.
func refundSite(what, txnID string, amount int64) string {
	return what + " " + txnID + " " + strconv.FormatInt(amount, 10)
}
