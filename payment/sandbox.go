package payment

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// SandboxConfig configures a Sandbox. Only Secret is required.
type SandboxConfig struct {
	// Provider is the name the sandbox's callbacks are verified under, as in
	// the callback URL. Default: "sandbox".
	Provider string
	// Merchant is the merchant account the sandbox's payments are made to.
	// Default: "sandbox-merchant".
	Merchant string
	// Secret signs the sandbox's callbacks (see SignatureHeader) and
	// authenticates the requests its Handler serves. Required.
	Secret []byte
	// CallbackURL receives the sandbox's callbacks, POSTed, e.g.
	// http://127.0.0.1:8080/v1/payments/sandbox/callback. Empty: none are
	// sent, and Callback still shows what would have been.
	CallbackURL string
	// Clock dates payments, refunds and signatures. Default:
	// lapse.SystemClock.
	Clock lapse.Clock
	// HTTPClient sends the callbacks. Default: a client that gives up after
	// 10s, follows no redirect and uses no proxy.
	HTTPClient *http.Client
	// FailRate is the share, in [0, 1], of Charge, Refund and Close calls
	// that fail with a transient error and do nothing.
	FailRate float64
	// UnknownRate is the share, in [0, 1 - FailRate], of those calls that
	// take effect and then return an error wrapping lapse.ErrUnknownOutcome,
	// as when a gateway's answer is lost on the way back.
	UnknownRate float64
	// Rand draws the failures, so that a test can replay them. Default: a
	// source seeded at random.
	Rand rand.Source
	// Store keeps the gateway's payments, charges, refunds and callbacks.
	// Sandboxes of one Provider name that share a Store are one gateway:
	// a payment made through one is refunded, queried or closed through
	// any. Both built-in stores implement lapse.SandboxStore, so that
	// processes sharing a database share the gateway. Default: a
	// MemorySandboxStore of this sandbox's own.
	Store lapse.SandboxStore
}

// Validate reports what in cfg NewSandbox would refuse.
func (cfg SandboxConfig) Validate() error {
	switch {
	case len(cfg.Secret) == 0:
		return errors.New("payment: sandbox: a secret is required to sign callbacks")
	case cfg.FailRate < 0 || cfg.UnknownRate < 0 || cfg.FailRate+cfg.UnknownRate > 1:
		return fmt.Errorf("payment: sandbox: FailRate %v and UnknownRate %v must be shares that add up to at most 1", cfg.FailRate, cfg.UnknownRate)
	}
	return nil
}

// ErrSandboxCallback is in the chain of Pay's error when the payment was
// made but its callback was not delivered; Redeliver sends it again.
var ErrSandboxCallback = errors.New("payment: sandbox: the payment was made but its callback was not delivered")

// Sandbox is a simulated payment gateway, for the demo and the tests:
// customers Pay (or Start paying), Lapse charges, refunds, queries and
// closes through lapse.PaymentProvider, and checkout payments and refunds
// are announced by callbacks signed with the HMAC scheme. Failures are
// injected at the configured rates. Safe for concurrent use.
//
// An order's payments follow the gateway rules Lapse relies on: once an order
// is closed (a payment of it closed) it can no longer be paid; a customer may
// pay an open order twice, each payment with its own transaction id; refunds
// of a payment never exceed what was captured; a charge or a refund sent
// again under its idempotency key is the same one.
//
// The gateway's state (payments, charges, refunds, the latest callback of
// each payment) is in its Store, and each call is one transaction of it that
// first locks the order it is about, so that the rules hold for every
// Sandbox of the same Provider name sharing the Store: several processes on
// one database are one gateway. What stays with each Sandbox is its own:
// the injected failures (rates and Rand), the counts of Calls, and its
// callbacks, which go to its own CallbackURL signed with its own Secret
// (Redeliver's too, whichever sandbox made the payment).
type Sandbox struct {
	name, merchant string
	secret         []byte
	callbackURL    string
	clock          lapse.Clock
	client         *http.Client
	store          lapse.SandboxStore

	mu          sync.Mutex // guards what follows, this sandbox's own
	rng         *rand.Rand
	failRate    float64
	unknownRate float64
	calls       SandboxCalls
}

// SandboxCalls counts the calls a Sandbox received and the callbacks it sent.
// The counts are the Sandbox's own, not those of other sandboxes sharing its
// Store.
type SandboxCalls struct {
	Pay         int
	Start       int
	Charge      int
	Refund      int
	RefundQuery int
	Query       int
	Close       int
	// Callbacks counts the callbacks sent, delivered or not;
	// CallbackFailures those that got no 2xx answer.
	Callbacks        int
	CallbackFailures int
	// Failed counts the Charge, Refund and Close calls that FailRate failed
	// before any effect; Lost those that UnknownRate applied and then
	// answered with an unknown outcome.
	Failed int
	Lost   int
}

// sandboxRefusal is a call the sandbox refuses for good; status is what its
// Handler answers.
type sandboxRefusal struct {
	status int
	msg    string
}

func (e *sandboxRefusal) Error() string { return e.msg }
func (e *sandboxRefusal) Unwrap() error { return lapse.ErrRefused }

func sandboxRefuse(status int, format string, args ...any) error {
	return &sandboxRefusal{status: status, msg: fmt.Sprintf(format, args...)}
}

// errSandboxDown is the transient failure FailRate injects.
var errSandboxDown = lapse.Errorf(lapse.EUNAVAILABLE, "sandbox: simulated gateway failure; nothing was done")

// NewSandbox returns a sandbox on cfg.Store, or on a store of its own with
// no payments. It panics when cfg.Validate fails: the sandbox is configured
// by code, which calls Validate first when the settings come from a user.
func NewSandbox(cfg SandboxConfig) *Sandbox {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	src := cfg.Rand
	if src == nil {
		var seed [16]byte
		crand.Read(seed[:])
		src = rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))
	}
	var clock lapse.Clock = lapse.SystemClock{}
	if cfg.Clock != nil {
		clock = cfg.Clock
	}
	client := cfg.HTTPClient
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil // the callback URL is Lapse's own
		client = &http.Client{
			Transport:     t,
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	store := cfg.Store
	if store == nil {
		store = NewMemorySandboxStore()
	}
	return &Sandbox{
		name:        cmp.Or(cfg.Provider, "sandbox"),
		merchant:    cmp.Or(cfg.Merchant, "sandbox-merchant"),
		secret:      slices.Clone(cfg.Secret),
		callbackURL: cfg.CallbackURL,
		clock:       clock,
		client:      client,
		store:       store,
		failRate:    cfg.FailRate,
		unknownRate: cfg.UnknownRate,
		rng:         rand.New(src),
	}
}

var _ lapse.PaymentProvider = (*Sandbox)(nil)

// Name returns the provider name the sandbox's callbacks carry.
func (s *Sandbox) Name() string { return s.name }

// Verifier returns the callback verifier that accepts the sandbox's
// callbacks: what Lapse mounts at the sandbox's callback URL.
func (s *Sandbox) Verifier() *HMAC {
	return &HMAC{Provider: s.name, Secrets: [][]byte{slices.Clone(s.secret)}}
}

// Pay is a customer paying orderNo at checkout: the order's pending payment
// for that amount is captured, or else a new payment, with a fresh
// transaction id, and the paid callback is sent. Paying an order that was
// closed is refused with an error wrapping lapse.ErrRefused; paying an open
// order again makes a second payment, as a customer who pays twice does. When
// only the callback failed, Pay returns the payment and an error wrapping
// ErrSandboxCallback.
func (s *Sandbox) Pay(ctx context.Context, orderNo string, amount int64, currency string) (*lapse.ProviderPayment, error) {
	if err := sandboxCheck(orderNo, amount, currency); err != nil {
		return nil, fmt.Errorf("sandbox: pay %s: %w", orderNo, err)
	}
	s.count(&s.calls.Pay)
	var p *lapse.SandboxPayment
	err := s.inOrder(ctx, orderNo, func(tx lapse.SandboxStore, ps []*lapse.SandboxPayment) error {
		if isClosed(ps) {
			return sandboxRefuse(http.StatusConflict, "order %s was closed: it can no longer be paid", orderNo)
		}
		if p = pending(ps, amount, currency); p == nil {
			p = s.newPayment(orderNo, amount, currency)
		}
		p.Status, p.PaidAt = lapse.ProviderPaid, s.clock.Now()
		s.setCallback(p, Notice{Kind: lapse.NoticePaid, PaidAt: p.PaidAt})
		return tx.SandboxPaymentPut(ctx, p)
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: pay %s: %w", orderNo, err)
	}
	out := p.ProviderPayment
	if err := s.send(ctx, p.Callback); err != nil {
		return &out, fmt.Errorf("sandbox: pay %s: %w: %w", orderNo, ErrSandboxCallback, err)
	}
	return &out, nil
}

// Start records a pending payment for orderNo, as when a customer opens the
// gateway's checkout page without paying yet; an existing pending payment
// for the same amount is returned instead. Starting a closed order is
// refused with an error wrapping lapse.ErrRefused.
func (s *Sandbox) Start(ctx context.Context, orderNo string, amount int64, currency string) (*lapse.ProviderPayment, error) {
	if err := sandboxCheck(orderNo, amount, currency); err != nil {
		return nil, fmt.Errorf("sandbox: start %s: %w", orderNo, err)
	}
	s.count(&s.calls.Start)
	var p *lapse.SandboxPayment
	err := s.inOrder(ctx, orderNo, func(tx lapse.SandboxStore, ps []*lapse.SandboxPayment) error {
		if isClosed(ps) {
			return sandboxRefuse(http.StatusConflict, "order %s was closed: it can no longer be paid", orderNo)
		}
		if p = pending(ps, amount, currency); p != nil {
			return nil
		}
		p = s.newPayment(orderNo, amount, currency)
		return tx.SandboxPaymentPut(ctx, p)
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: start %s: %w", orderNo, err)
	}
	out := p.ProviderPayment
	return &out, nil
}

// Charge captures r.Amount from the stored method r.Method at once. The same
// IdempotencyKey returns the same payment, never charged twice; a key sent
// again with another request is refused. The method "fail" is always
// declined. Refusals wrap lapse.ErrRefused.
func (s *Sandbox) Charge(ctx context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	op := "charge " + r.IdempotencyKey
	if r.IdempotencyKey == "" {
		return nil, fmt.Errorf("sandbox: charge: %w", sandboxRefuse(http.StatusBadRequest, "the idempotency key is missing"))
	}
	if err := sandboxCheck(r.OrderNo, r.Amount, r.Currency); err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	fail, lose := s.fate(&s.calls.Charge)
	if fail {
		return nil, fmt.Errorf("sandbox: %s: %w: %w", op, errSandboxDown, lapse.ErrNotSent)
	}
	var p *lapse.SandboxPayment
	err := s.inOrder(ctx, r.OrderNo, func(tx lapse.SandboxStore, ps []*lapse.SandboxPayment) error {
		c, err := tx.SandboxChargeGet(ctx, s.name, r.IdempotencyKey)
		switch {
		case err == nil && (c.OrderNo != r.OrderNo || c.Amount != r.Amount || c.Currency != r.Currency || c.Method != r.Method):
			return sandboxRefuse(http.StatusConflict, "idempotency key %q was used for another charge", r.IdempotencyKey)
		case err == nil:
			p, err = tx.SandboxPaymentGet(ctx, s.name, c.TxnID)
			return err
		case !errors.Is(err, lapse.ErrProviderNotFound):
			return err
		case r.Method == "fail":
			return sandboxRefuse(http.StatusPaymentRequired, "the payment method was declined")
		case isClosed(ps):
			return sandboxRefuse(http.StatusConflict, "order %s was closed: it can no longer be paid", r.OrderNo)
		}
		p = s.newPayment(r.OrderNo, r.Amount, r.Currency)
		p.Status, p.PaidAt = lapse.ProviderPaid, s.clock.Now()
		s.setCallback(p, Notice{Kind: lapse.NoticePaid, PaidAt: p.PaidAt})
		if err := tx.SandboxPaymentPut(ctx, p); err != nil {
			return err
		}
		created, err := tx.SandboxChargeCreate(ctx, &lapse.SandboxCharge{Gateway: s.name, Key: r.IdempotencyKey,
			OrderNo: r.OrderNo, Amount: r.Amount, Currency: r.Currency, Method: r.Method, TxnID: p.TxnID})
		if err == nil && !created {
			// Created meanwhile for another order, whose lock this is not.
			return sandboxRefuse(http.StatusConflict, "idempotency key %q was used for another charge", r.IdempotencyKey)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	if lose {
		return nil, sandboxLost(op)
	}
	out := p.ProviderPayment
	return &out, nil
}

// Query returns orderNo's payment: the first paid one, else the first
// refunded one, else the latest; or an error wrapping
// lapse.ErrProviderNotFound when the order has none.
func (s *Sandbox) Query(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	s.count(&s.calls.Query)
	ps, err := s.store.SandboxPaymentList(ctx, s.name, orderNo)
	if err != nil {
		return nil, fmt.Errorf("sandbox: query %s: %w", orderNo, err)
	}
	p := current(ps)
	if p == nil {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no payment for order %q", orderNo)
	}
	out := p.ProviderPayment
	return &out, nil
}

// Close closes orderNo's pending payments, so that the order can no longer be
// paid; an order with no payment yet gets a closed one, as closing is the
// promise that the customer cannot pay any more. It returns the order's
// payment as Query would: closed, or paid (not an error) when the customer
// paid first, for the caller to apply; nothing was closed then, and the
// customer may still pay again, as one who pays twice does.
func (s *Sandbox) Close(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	op := "close " + orderNo
	fail, lose := s.fate(&s.calls.Close)
	if fail {
		return nil, fmt.Errorf("sandbox: %s: %w: %w", op, errSandboxDown, lapse.ErrNotSent)
	}
	var p *lapse.SandboxPayment
	err := s.inOrder(ctx, orderNo, func(tx lapse.SandboxStore, ps []*lapse.SandboxPayment) error {
		for _, x := range ps {
			if x.Status == lapse.ProviderPending {
				x.Status = lapse.ProviderClosed
				if err := tx.SandboxPaymentPut(ctx, x); err != nil {
					return err
				}
			}
		}
		if len(ps) == 0 {
			x := s.newPayment(orderNo, 0, "")
			x.Status = lapse.ProviderClosed
			if err := tx.SandboxPaymentPut(ctx, x); err != nil {
				return err
			}
			ps = append(ps, x)
		}
		p = current(ps)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	if lose {
		return nil, sandboxLost(op)
	}
	out := p.ProviderPayment
	return &out, nil
}

// inOrder runs fn in one transaction of the store that holds the lock of
// orderNo, with the order's payments as they stand.
func (s *Sandbox) inOrder(ctx context.Context, orderNo string, fn func(tx lapse.SandboxStore, ps []*lapse.SandboxPayment) error) error {
	return s.store.SandboxTx(ctx, func(tx lapse.SandboxStore) error {
		if err := tx.SandboxOrderLock(ctx, s.name, orderNo); err != nil {
			return err
		}
		ps, err := tx.SandboxPaymentList(ctx, s.name, orderNo)
		if err != nil {
			return err
		}
		return fn(tx, ps)
	})
}

// isClosed reports whether an order with payments ps was closed: no
// payment can be made for it.
func isClosed(ps []*lapse.SandboxPayment) bool {
	return slices.ContainsFunc(ps, func(p *lapse.SandboxPayment) bool { return p.Status == lapse.ProviderClosed })
}

// current is the payment Query reports of an order with payments ps.
func current(ps []*lapse.SandboxPayment) *lapse.SandboxPayment {
	for _, want := range []lapse.ProviderPaymentStatus{lapse.ProviderPaid, lapse.ProviderRefunded} {
		if i := slices.IndexFunc(ps, func(p *lapse.SandboxPayment) bool { return p.Status == want }); i >= 0 {
			return ps[i]
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps[len(ps)-1]
}

// pending returns the pending payment among ps for amount, if any.
func pending(ps []*lapse.SandboxPayment, amount int64, currency string) *lapse.SandboxPayment {
	for _, p := range ps {
		if p.Status == lapse.ProviderPending && p.Amount == amount && p.Currency == currency {
			return p
		}
	}
	return nil
}

// SetRates changes the failure rates of later calls, as when a gateway
// degrades or recovers; the rates are as in SandboxConfig.
func (s *Sandbox) SetRates(fail, unknown float64) error {
	if fail < 0 || unknown < 0 || fail+unknown > 1 {
		return fmt.Errorf("payment: sandbox: fail rate %v and unknown rate %v must be shares that add up to at most 1", fail, unknown)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRate, s.unknownRate = fail, unknown
	return nil
}

// Payments returns every payment of the gateway, in the order they were
// made, made through this sandbox or another sharing its Store. It is for
// tests and the demo: a Store that cannot be read yields none.
func (s *Sandbox) Payments() []lapse.ProviderPayment {
	ps, err := s.store.SandboxPaymentList(context.Background(), s.name, "")
	if err != nil {
		return nil
	}
	out := make([]lapse.ProviderPayment, len(ps))
	for i, p := range ps {
		out[i] = p.ProviderPayment
	}
	return out
}

// Refunds returns every refund of the gateway, in the order they were made,
// made through this sandbox or another sharing its Store. It is for tests
// and the demo: a Store that cannot be read yields none.
func (s *Sandbox) Refunds() []lapse.ProviderRefund {
	rs, err := s.store.SandboxRefundList(context.Background(), s.name)
	if err != nil {
		return nil
	}
	out := make([]lapse.ProviderRefund, len(rs))
	for i, r := range rs {
		out[i] = *providerRefund(r)
	}
	return out
}

// Calls returns how many calls of each kind this sandbox has received: its
// own, not those of other sandboxes sharing its Store.
func (s *Sandbox) Calls() SandboxCalls {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// count counts one call of the kind c points to.
func (s *Sandbox) count(c *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*c++
}

// fate counts one Charge, Refund or Close call and draws what happens to
// it: failed before any effect, answered, or applied with its answer lost.
func (s *Sandbox) fate(c *int) (fail, lose bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*c++
	if s.failRate == 0 && s.unknownRate == 0 {
		return false, false
	}
	x := s.rng.Float64()
	fail, lose = x < s.failRate, x >= s.failRate && x < s.failRate+s.unknownRate
	if fail {
		s.calls.Failed++
	}
	if lose {
		s.calls.Lost++
	}
	return fail, lose
}

// sandboxCheck refuses a payment that no gateway would take.
func sandboxCheck(orderNo string, amount int64, currency string) error {
	switch {
	case orderNo == "":
		return sandboxRefuse(http.StatusUnprocessableEntity, "order_no is missing")
	case amount <= 0:
		return sandboxRefuse(http.StatusUnprocessableEntity, "amount must be a positive number of minor units")
	case !lapse.ValidCurrency(currency):
		return sandboxRefuse(http.StatusUnprocessableEntity, "currency %q is not an ISO 4217 currency in use", currency)
	}
	return nil
}

// newPayment returns a pending payment with a fresh transaction id, for
// the caller to put.
func (s *Sandbox) newPayment(orderNo string, amount int64, currency string) *lapse.SandboxPayment {
	var b [12]byte
	crand.Read(b[:]) // never from Rand: a replayed seed must not reuse ids Lapse has stored
	return &lapse.SandboxPayment{Gateway: s.name, ProviderPayment: lapse.ProviderPayment{
		TxnID: "sbx_" + hex.EncodeToString(b[:]), OrderNo: orderNo, Status: lapse.ProviderPending,
		Amount: amount, Currency: currency, Merchant: s.merchant,
	}}
}

// sandboxLost is the error of a call that took effect but whose answer was lost.
func sandboxLost(op string) error {
	return fmt.Errorf("sandbox: %s: %w (simulated: the call took effect, its answer was lost)", op, lapse.ErrUnknownOutcome)
}
