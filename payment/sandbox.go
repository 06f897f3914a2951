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

// Sandbox is a simulated payment gateway held in memory, for the demo and the
// tests: customers Pay (or Start paying), Lapse charges, refunds, queries and
// closes through lapse.PaymentProvider, and checkout payments and refunds
// are announced by callbacks signed with the HMAC scheme. Failures are
// injected at the configured rates. Safe for concurrent use.
//
// An order's payments follow the gateway rules Lapse relies on: once an order
// is closed (a payment of it closed) it can no longer be paid; a customer may
// pay an open order twice, each payment with its own transaction id; refunds
// of a payment never exceed what was captured.
type Sandbox struct {
	name, merchant string
	secret         []byte
	callbackURL    string
	clock          lapse.Clock
	client         *http.Client
	failRate       float64
	unknownRate    float64

	mu       sync.Mutex
	rng      *rand.Rand
	payments []*sandboxPayment          // in the order they were made
	txns     map[string]*sandboxPayment // by txn id
	orders   map[string][]*sandboxPayment
	charges  map[string]*sandboxCharge
	refunds  []*sandboxRefund
	byKey    map[string]*sandboxRefund
	calls    SandboxCalls
}

// SandboxCalls counts the calls a Sandbox received and the callbacks it sent.
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
}

type sandboxPayment struct {
	lapse.ProviderPayment
	refunded int64
	callback []byte // the body of the latest callback about this payment
}

type sandboxCharge struct {
	req lapse.ChargeRequest
	p   *sandboxPayment
}

type sandboxRefund struct {
	lapse.ProviderRefund
	req lapse.RefundRequest
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

// NewSandbox returns a sandbox with no payments. It panics when
// cfg.Validate fails: the sandbox is configured by code, which calls
// Validate first when the settings come from a user.
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
	return &Sandbox{
		name:        cmp.Or(cfg.Provider, "sandbox"),
		merchant:    cmp.Or(cfg.Merchant, "sandbox-merchant"),
		secret:      slices.Clone(cfg.Secret),
		callbackURL: cfg.CallbackURL,
		clock:       clock,
		client:      client,
		failRate:    cfg.FailRate,
		unknownRate: cfg.UnknownRate,
		rng:         rand.New(src),
		txns:        map[string]*sandboxPayment{},
		orders:      map[string][]*sandboxPayment{},
		charges:     map[string]*sandboxCharge{},
		byKey:       map[string]*sandboxRefund{},
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
	s.mu.Lock()
	s.calls.Pay++
	if s.isClosed(orderNo) {
		s.mu.Unlock()
		return nil, fmt.Errorf("sandbox: pay %s: %w", orderNo, sandboxRefuse(http.StatusConflict, "order %s was closed: it can no longer be paid", orderNo))
	}
	p := s.pending(orderNo, amount, currency)
	if p == nil {
		p = s.newPayment(orderNo, amount, currency)
	}
	p.Status, p.PaidAt = lapse.ProviderPaid, s.clock.Now()
	body := s.setCallback(p, Notice{Kind: lapse.NoticePaid, PaidAt: p.PaidAt})
	out := p.ProviderPayment
	s.mu.Unlock()
	if err := s.send(ctx, body); err != nil {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Start++
	if s.isClosed(orderNo) {
		return nil, fmt.Errorf("sandbox: start %s: %w", orderNo, sandboxRefuse(http.StatusConflict, "order %s was closed: it can no longer be paid", orderNo))
	}
	p := s.pending(orderNo, amount, currency)
	if p == nil {
		p = s.newPayment(orderNo, amount, currency)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Charge++
	fail, lose := s.fate()
	if fail {
		return nil, fmt.Errorf("sandbox: %s: %w", op, errSandboxDown)
	}
	c := s.charges[r.IdempotencyKey]
	switch {
	case c != nil && c.req != *r:
		return nil, fmt.Errorf("sandbox: %s: %w", op, sandboxRefuse(http.StatusConflict, "idempotency key %q was used for another charge", r.IdempotencyKey))
	case c != nil:
	case r.Method == "fail":
		return nil, fmt.Errorf("sandbox: %s: %w", op, sandboxRefuse(http.StatusPaymentRequired, "the payment method was declined"))
	case s.isClosed(r.OrderNo):
		return nil, fmt.Errorf("sandbox: %s: %w", op, sandboxRefuse(http.StatusConflict, "order %s was closed: it can no longer be paid", r.OrderNo))
	default:
		p := s.newPayment(r.OrderNo, r.Amount, r.Currency)
		p.Status, p.PaidAt = lapse.ProviderPaid, s.clock.Now()
		s.setCallback(p, Notice{Kind: lapse.NoticePaid, PaidAt: p.PaidAt})
		c = &sandboxCharge{req: *r, p: p}
		s.charges[r.IdempotencyKey] = c
	}
	if lose {
		return nil, sandboxLost(op)
	}
	out := c.p.ProviderPayment
	return &out, nil
}

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
	s.mu.Lock()
	s.calls.Refund++
	fail, lose := s.fate()
	if fail {
		s.mu.Unlock()
		return nil, fmt.Errorf("sandbox: %s: %w", op, errSandboxDown)
	}
	rf, body, err := s.refund(r)
	s.mu.Unlock()
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
	return &rf, nil
}

// refund makes the refund r asks for, or finds the one made under its key,
// and returns the callback to send about a new one. s.mu is held.
func (s *Sandbox) refund(r *lapse.RefundRequest) (lapse.ProviderRefund, []byte, error) {
	if prev := s.byKey[r.IdempotencyKey]; prev != nil {
		if prev.req.TxnID != r.TxnID || prev.req.Amount != r.Amount || prev.req.OrderNo != r.OrderNo || prev.req.Currency != r.Currency {
			return lapse.ProviderRefund{}, nil, sandboxRefuse(http.StatusConflict, "idempotency key %q was used for another refund", r.IdempotencyKey)
		}
		return prev.ProviderRefund, nil, nil
	}
	p := s.txns[r.TxnID]
	switch {
	case p == nil:
		return lapse.ProviderRefund{}, nil, sandboxRefuse(http.StatusUnprocessableEntity, "no payment %q to refund", r.TxnID)
	case r.OrderNo != "" && r.OrderNo != p.OrderNo:
		return lapse.ProviderRefund{}, nil, sandboxRefuse(http.StatusUnprocessableEntity, "payment %s is for order %s, not %s", p.TxnID, p.OrderNo, r.OrderNo)
	case r.Currency != "" && r.Currency != p.Currency:
		return lapse.ProviderRefund{}, nil, sandboxRefuse(http.StatusUnprocessableEntity, "payment %s is in %s, not %s", p.TxnID, p.Currency, r.Currency)
	case p.Status != lapse.ProviderPaid:
		return lapse.ProviderRefund{}, nil, sandboxRefuse(http.StatusConflict, "payment %s is %s: only a paid payment can be refunded", p.TxnID, p.Status)
	case r.Amount > p.Amount-p.refunded:
		return lapse.ProviderRefund{}, nil, sandboxRefuse(http.StatusConflict, "refunding %d would exceed payment %s: %d of %d is left", r.Amount, p.TxnID, p.Amount-p.refunded, p.Amount)
	}
	p.refunded += r.Amount
	if p.refunded == p.Amount {
		p.Status = lapse.ProviderRefunded
	}
	rf := &sandboxRefund{req: *r, ProviderRefund: lapse.ProviderRefund{
		RefundID: r.IdempotencyKey, TxnID: p.TxnID, Amount: r.Amount, Status: lapse.RefundSucceeded,
	}}
	s.refunds = append(s.refunds, rf)
	s.byKey[r.IdempotencyKey] = rf
	body := s.setCallback(p, Notice{Kind: lapse.NoticeRefunded, RefundID: rf.RefundID, Amount: r.Amount, PaidAt: s.clock.Now()})
	return rf.ProviderRefund, body, nil
}

// RefundQuery returns the refund made under idempotencyKey, or an error
// wrapping lapse.ErrProviderNotFound.
func (s *Sandbox) RefundQuery(ctx context.Context, idempotencyKey string) (*lapse.ProviderRefund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.RefundQuery++
	rf := s.byKey[idempotencyKey]
	if rf == nil {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no refund under key %q", idempotencyKey)
	}
	out := rf.ProviderRefund
	return &out, nil
}

// Query returns orderNo's payment: the first paid one, else the first
// refunded one, else the latest; or an error wrapping
// lapse.ErrProviderNotFound when the order has none.
func (s *Sandbox) Query(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Query++
	p := s.current(orderNo)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Close++
	fail, lose := s.fate()
	if fail {
		return nil, fmt.Errorf("sandbox: %s: %w", op, errSandboxDown)
	}
	for _, p := range s.orders[orderNo] {
		if p.Status == lapse.ProviderPending {
			p.Status = lapse.ProviderClosed
		}
	}
	if len(s.orders[orderNo]) == 0 {
		s.newPayment(orderNo, 0, "").Status = lapse.ProviderClosed
	}
	if lose {
		return nil, sandboxLost(op)
	}
	out := s.current(orderNo).ProviderPayment
	return &out, nil
}

// isClosed reports whether orderNo was closed: no payment can be made for
// it. s.mu is held.
func (s *Sandbox) isClosed(orderNo string) bool {
	return slices.ContainsFunc(s.orders[orderNo], func(p *sandboxPayment) bool { return p.Status == lapse.ProviderClosed })
}

// current is the payment Query reports for orderNo. s.mu is held.
func (s *Sandbox) current(orderNo string) *sandboxPayment {
	ps := s.orders[orderNo]
	for _, want := range []lapse.ProviderPaymentStatus{lapse.ProviderPaid, lapse.ProviderRefunded} {
		if i := slices.IndexFunc(ps, func(p *sandboxPayment) bool { return p.Status == want }); i >= 0 {
			return ps[i]
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps[len(ps)-1]
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

// Payments returns every payment the sandbox holds, in the order they were
// made.
func (s *Sandbox) Payments() []lapse.ProviderPayment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]lapse.ProviderPayment, len(s.payments))
	for i, p := range s.payments {
		out[i] = p.ProviderPayment
	}
	return out
}

// Refunds returns every refund the sandbox made, in the order it made them.
func (s *Sandbox) Refunds() []lapse.ProviderRefund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]lapse.ProviderRefund, len(s.refunds))
	for i, r := range s.refunds {
		out[i] = r.ProviderRefund
	}
	return out
}

// Calls returns how many calls of each kind the sandbox has received.
func (s *Sandbox) Calls() SandboxCalls {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// sandboxCheck refuses a payment that no gateway would take.
func sandboxCheck(orderNo string, amount int64, currency string) error {
	switch {
	case orderNo == "":
		return sandboxRefuse(http.StatusUnprocessableEntity, "order_no is missing")
	case amount <= 0:
		return sandboxRefuse(http.StatusUnprocessableEntity, "amount must be a positive number of minor units")
	case !lapse.ValidCurrency(currency):
		return sandboxRefuse(http.StatusUnprocessableEntity, "currency %q is not an ISO 4217 code", currency)
	}
	return nil
}

// pending returns orderNo's pending payment for amount, if any. s.mu is held.
func (s *Sandbox) pending(orderNo string, amount int64, currency string) *sandboxPayment {
	for _, p := range s.orders[orderNo] {
		if p.Status == lapse.ProviderPending && p.Amount == amount && p.Currency == currency {
			return p
		}
	}
	return nil
}

// newPayment records a pending payment with a fresh transaction id. s.mu is
// held.
func (s *Sandbox) newPayment(orderNo string, amount int64, currency string) *sandboxPayment {
	var b [12]byte
	crand.Read(b[:]) // never from Rand: a replayed seed must not reuse ids Lapse has stored
	p := &sandboxPayment{ProviderPayment: lapse.ProviderPayment{
		TxnID: "sbx_" + hex.EncodeToString(b[:]), OrderNo: orderNo, Status: lapse.ProviderPending,
		Amount: amount, Currency: currency, Merchant: s.merchant,
	}}
	s.payments = append(s.payments, p)
	s.txns[p.TxnID] = p
	s.orders[orderNo] = append(s.orders[orderNo], p)
	return p
}

// fate draws what happens to a Charge, Refund or Close call: failed before
// any effect, answered, or applied with its answer lost. s.mu is held.
func (s *Sandbox) fate() (fail, lose bool) {
	if s.failRate == 0 && s.unknownRate == 0 {
		return false, false
	}
	x := s.rng.Float64()
	return x < s.failRate, x >= s.failRate && x < s.failRate+s.unknownRate
}

// sandboxLost is the error of a call that took effect but whose answer was lost.
func sandboxLost(op string) error {
	return fmt.Errorf("sandbox: %s: %w (simulated: the call took effect, its answer was lost)", op, lapse.ErrUnknownOutcome)
}
