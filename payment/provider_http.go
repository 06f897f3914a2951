package payment

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/httpcall"
)

// HTTPProvider is a lapse.PaymentProvider that speaks Lapse's generic
// payment protocol over HTTP: a merchant whose gateway Lapse has no port for
// puts a small adapter in front of it. Safe for concurrent use.
//
// # The protocol
//
// The adapter serves five endpoints under a base URL; path segments are
// percent-encoded:
//
//	POST {base}/charges                     charge a stored payment method
//	POST {base}/refunds                     refund a captured payment
//	GET  {base}/refunds/{idempotency_key}   the refund made under a key
//	GET  {base}/payments/{order_no}         an order's payment
//	POST {base}/payments/{order_no}/close   close an order for payment
//
// Bodies are JSON objects; amounts are integer minor units, currencies ISO
// 4217 codes, times RFC 3339. Charges and refunds carry an Idempotency-Key
// header: the same key is the same charge or refund however often it is
// sent, so the adapter answers a repeat with the first result and never
// charges or refunds twice; a key sent again with another body is refused.
// Requests:
//
//	POST /charges  {"order_no": "A-1001", "amount": 1999, "currency": "USD", "method": "pm_123"}
//	POST /refunds  {"txn_id": "ch_42", "order_no": "A-1001", "amount": 1999, "currency": "USD", "reason": "late"}
//
// Close has no body. Success is a 2xx (200) with a payment (charges, GET
// payments, close) or a refund (refunds, GET refunds):
//
//	{"txn_id": "ch_42", "order_no": "A-1001", "status": "paid", "amount": 1999,
//	 "currency": "USD", "merchant": "acct_1", "paid_at": "2026-11-29T12:00:00Z"}
//	{"refund_id": "r-7", "txn_id": "ch_42", "amount": 1999, "currency": "USD", "status": "succeeded"}
//
// A payment's status is pending, paid, closed or refunded (refunded in full);
// paid_at is required for paid and refunded ones. A refund's is processing, succeeded or
// failed; its amount, what the refund gives back, is required, and its currency
// optional. Lapse completes a refund only when the answer's txn_id, amount and
// currency (when given) are those it asked for, and puts any other in review. GET payments answers the order's paid payment if it has one, else
// its latest. Close is a promise: after it, the order can no longer be paid,
// even if it had no payment yet. It answers the payment as it then stands:
// closed, or paid when the customer paid first, which is not an error (Lapse
// applies that payment). Unknown fields in answers are ignored; a key given
// twice is refused.
//
// Failures answer a status and {"code": "…", "message": "…"}:
//
//	404, code "not_found"  no such payment or refund: lapse.ErrProviderNotFound
//	408, 425, 429          not done this time: retried later with the same key
//	5xx                    not done, or done and its answer lost (a proxy's
//	                       502 or 504 after the adapter charged): to a
//	                       charge, refund or close, lapse.ErrUnknownOutcome,
//	                       asked about before it is sent again; to a query,
//	                       retried later
//	any other 4xx          refused for good (declined, over-refund, closed
//	                       order, key reused): lapse.ErrRefused
//
// A 404 without code "not_found" (a wrong base URL, a proxy's page) is a
// transient failure: it must never pass for "this payment does not exist".
// Redirects are not followed; a 3xx is transient, a configuration to fix.
//
// # Authentication
//
// Every request carries a SignatureHeader, t=<unix seconds>,v1=<hex>, whose
// v1 is the HMAC-SHA256 under the shared secret of
//
//	t + "." + method + " " + target + "\n" + idempotency_key + "\n" + body
//
// where target is the request target exactly as on the request line (the
// escaped path, e.g. /gw/payments/A-1001/close), idempotency_key the
// Idempotency-Key header (empty when absent) and body the raw body (empty for
// GET and close). The adapter refuses (401) a signature that does not match
// or a t more than DefaultTolerance from its clock; binding the method, path
// and key stops a captured signature from being replayed as another call.
//
// # Failure handling
//
// Connect and read timeouts are apart, and a bounded pool limits the calls in
// flight. A charge, refund or close that failed before its request was
// written in full (a refused or timed-out connection, no free slot) was not
// sent: a retryable error wrapping lapse.ErrNotSent. One that failed after
// (a read timeout, a connection lost while waiting, an answer that cannot
// be read) may have taken effect: its error wraps lapse.ErrUnknownOutcome,
// and the caller asks (Query, RefundQuery) before trying again. Queries
// have no effect; their failures are plain errors.
type HTTPProvider struct {
	name        string
	base        string // without a trailing slash
	signer      *HMAC
	client      *http.Client
	readTimeout time.Duration
	slots       chan struct{}
	clock       lapse.Clock
}

// HTTPProviderConfig configures an HTTPProvider. BaseURL and Secret are
// required; zero values take the documented defaults and negative ones are
// rejected.
type HTTPProviderConfig struct {
	// Name names the provider in errors. Default: the BaseURL's host.
	Name string
	// BaseURL is the adapter's base URL, absolute http or https.
	BaseURL string
	// Secret signs every request.
	Secret []byte
	// ConnectTimeout bounds making a connection: the dial and the TLS
	// handshake. A call that fails here was not sent. Default: 2s.
	ConnectTimeout time.Duration
	// ReadTimeout bounds the rest, from the moment a connection is held:
	// writing the request, waiting for the answer and reading it. Default: 10s.
	ReadTimeout time.Duration
	// MaxConcurrent bounds the calls in flight. Excess callers wait for a
	// slot until their context ends, then fail without sending. Default: 16.
	MaxConcurrent int
	// Clock dates the signatures. Default: lapse.SystemClock.
	Clock lapse.Clock
	// HTTPClient replaces the client built from ConnectTimeout, for tests.
	// ReadTimeout and the detection of unknown outcomes still apply as long
	// as its transport reports httptrace events, as net/http's does.
	HTTPClient *http.Client
}

// Errors in the chain of an HTTPProvider's errors.
var (
	// ErrProviderBusy: every slot stayed busy until the caller's context
	// ended; nothing was sent.
	ErrProviderBusy = errors.New("payment: no free slot for a provider call before the context ended")
	// ErrProviderTimeout: the connection was held but no answer came within
	// the read timeout.
	ErrProviderTimeout = errors.New("payment: no answer from the provider within the read timeout")
)

const (
	// maxProviderBody bounds a body read, so that a broken peer cannot
	// exhaust memory.
	maxProviderBody = 1 << 20
	providerAgent   = "lapse-payment/1"
	idempotencyHead = "Idempotency-Key"
)

// NewHTTPProvider returns an HTTPProvider calling cfg.BaseURL.
func NewHTTPProvider(cfg HTTPProviderConfig) (*HTTPProvider, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("payment: HTTP provider: base URL %q is not an absolute http or https URL without query or fragment", httpcall.RedactURL(cfg.BaseURL))
	}
	name := cmp.Or(cfg.Name, u.Host)
	switch {
	case len(cfg.Secret) == 0:
		return nil, fmt.Errorf("payment: HTTP provider %q: a secret is required to sign requests", name)
	case cfg.ConnectTimeout < 0 || cfg.ReadTimeout < 0 || cfg.MaxConcurrent < 0:
		return nil, fmt.Errorf("payment: HTTP provider %q: timeouts and MaxConcurrent must not be negative", name)
	}
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 2*time.Second)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, 10*time.Second)
	cfg.MaxConcurrent = cmp.Or(cfg.MaxConcurrent, 16)
	p := &HTTPProvider{
		name:        name,
		base:        strings.TrimRight(u.String(), "/"),
		signer:      &HMAC{Provider: name, Secrets: [][]byte{slices.Clone(cfg.Secret)}},
		client:      cfg.HTTPClient,
		readTimeout: cfg.ReadTimeout,
		slots:       make(chan struct{}, cfg.MaxConcurrent),
		clock:       cfg.Clock,
	}
	if p.clock == nil {
		p.clock = lapse.SystemClock{}
	}
	if p.client == nil {
		// The adapter is the merchant's own service, reached directly: an
		// environment proxy would add a hop whose failures blur the line
		// between not sent and unknown, and whose pages could pass for
		// answers.
		p.client = httpcall.NewClient(httpcall.NewTimeouts(cfg.ConnectTimeout, cfg.ReadTimeout), cfg.MaxConcurrent, true)
	}
	return p, nil
}

var _ lapse.PaymentProvider = (*HTTPProvider)(nil)

// Charge POSTs r to {base}/charges under its idempotency key. A charge
// without one is refused unsent.
func (p *HTTPProvider) Charge(ctx context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	if r.IdempotencyKey == "" {
		return nil, p.errorf("charge", "%w: the idempotency key is missing", lapse.ErrRefused)
	}
	body, _ := json.Marshal(httpCharge{OrderNo: r.OrderNo, Amount: r.Amount, Currency: r.Currency, Method: r.Method})
	var pay httpPayment
	if err := p.call(ctx, "charge "+r.IdempotencyKey, http.MethodPost, "/charges", r.IdempotencyKey, body, &pay); err != nil {
		return nil, err
	}
	return p.payment("charge "+r.IdempotencyKey, &pay, r.OrderNo, true)
}

// Refund POSTs r to {base}/refunds under its idempotency key. A refund
// without one is refused unsent.
func (p *HTTPProvider) Refund(ctx context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	if r.IdempotencyKey == "" {
		return nil, p.errorf("refund", "%w: the idempotency key is missing", lapse.ErrRefused)
	}
	body, _ := json.Marshal(httpRefundRequest{TxnID: r.TxnID, OrderNo: r.OrderNo, Amount: r.Amount, Currency: r.Currency, Reason: r.Reason})
	var rf httpRefund
	if err := p.call(ctx, "refund "+r.IdempotencyKey, http.MethodPost, "/refunds", r.IdempotencyKey, body, &rf); err != nil {
		return nil, err
	}
	return p.refund("refund "+r.IdempotencyKey, &rf, r.TxnID, true)
}

// RefundQuery GETs {base}/refunds/{idempotency_key}.
func (p *HTTPProvider) RefundQuery(ctx context.Context, idempotencyKey string) (*lapse.ProviderRefund, error) {
	op := "refund query " + idempotencyKey
	var rf httpRefund
	if err := p.call(ctx, op, http.MethodGet, "/refunds/"+url.PathEscape(idempotencyKey), "", nil, &rf); err != nil {
		return nil, err
	}
	return p.refund(op, &rf, "", false)
}

// Query GETs {base}/payments/{order_no}.
func (p *HTTPProvider) Query(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	op := "query " + orderNo
	var pay httpPayment
	if err := p.call(ctx, op, http.MethodGet, "/payments/"+url.PathEscape(orderNo), "", nil, &pay); err != nil {
		return nil, err
	}
	return p.payment(op, &pay, orderNo, false)
}

// Close POSTs to {base}/payments/{order_no}/close. A payment paid before the
// close comes back paid, without an error.
func (p *HTTPProvider) Close(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	op := "close " + orderNo
	var pay httpPayment
	if err := p.call(ctx, op, http.MethodPost, "/payments/"+url.PathEscape(orderNo)+"/close", "", nil, &pay); err != nil {
		return nil, err
	}
	return p.payment(op, &pay, orderNo, true)
}

// call makes one signed request and decodes a 2xx answer into out. effect
// says whether the request may change anything: then a failure after the
// request was written, an unreadable answer included, is an unknown outcome.
func (p *HTTPProvider) call(ctx context.Context, op, method, path, key string, body []byte, out any) error {
	effect := method != http.MethodGet
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, bytes.NewReader(body))
	if err != nil {
		return p.errorf(op, "%w: %w", lapse.ErrRefused, err)
	}
	req.Header.Set("User-Agent", providerAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(idempotencyHead, key)
	}

	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return p.errorf(op, "%w: %w: %w", lapse.ErrNotSent, ErrProviderBusy, context.Cause(ctx))
	}
	defer func() { <-p.slots }()
	// Signed once a slot is held, so that a long wait cannot make the
	// timestamp stale.
	req.Header.Set(SignatureHeader, p.signer.Sign(requestMessage(method, req.URL.RequestURI(), key, body), p.clock.Now()))

	status, answer, written, err := p.roundTrip(ctx, req)
	switch {
	case err != nil && written && effect:
		return p.errorf(op, "%w: %w", lapse.ErrUnknownOutcome, err)
	case err != nil && !effect:
		return p.errorf(op, "%w", err)
	case err != nil:
		return p.errorf(op, "%w: %w", lapse.ErrNotSent, err)
	case status/100 == 5 && effect:
		// Not necessarily the adapter's own answer: a gateway's 502 or
		// 504 comes after the request went through, perhaps after the
		// adapter charged.
		return p.errorf(op, "%w: %w", lapse.ErrUnknownOutcome, providerStatusError(status, answer))
	case status/100 != 2:
		return p.errorf(op, "%w", providerStatusError(status, answer))
	}
	if err := decodeLenient(answer, out); err != nil {
		return p.unreadable(op, effect, err)
	}
	return nil
}

// roundTrip sends req and reads the answer. written reports whether the
// whole request reached a connection. See httpcall.Exchange for the
// timeouts.
func (p *HTTPProvider) roundTrip(ctx context.Context, req *http.Request) (status int, body []byte, written bool, err error) {
	written, err = httpcall.Exchange(ctx, p.client, req, p.readTimeout, ErrProviderTimeout, func(resp *http.Response) error {
		var err error
		body, err = io.ReadAll(io.LimitReader(resp.Body, maxProviderBody+1))
		switch {
		case err != nil:
			return fmt.Errorf("reading the answer: %w", err)
		case len(body) > maxProviderBody:
			return fmt.Errorf("the answer is longer than %d bytes", maxProviderBody)
		}
		status = resp.StatusCode
		return nil
	})
	if err != nil {
		return 0, nil, written, err
	}
	return status, body, true, nil
}

func (p *HTTPProvider) errorf(op, format string, args ...any) error {
	return fmt.Errorf("payment provider %q: %s: %w", p.name, op, fmt.Errorf(format, args...))
}

// unreadable is the error of a 2xx answer that cannot be used: for a call
// with an effect, the effect happened but what it was is unknown.
func (p *HTTPProvider) unreadable(op string, effect bool, err error) error {
	if effect {
		return fmt.Errorf("payment provider %q: %s: %w: the answer cannot be read: %w", p.name, op, lapse.ErrUnknownOutcome, err)
	}
	return fmt.Errorf("payment provider %q: %s: the answer cannot be read: %w", p.name, op, err)
}

// payment checks an answered payment: for the order asked about, with a known
// status, and complete once paid.
func (p *HTTPProvider) payment(op string, w *httpPayment, orderNo string, effect bool) (*lapse.ProviderPayment, error) {
	var err error
	switch {
	case w.TxnID == "":
		err = errors.New("txn_id is missing")
	case w.OrderNo != orderNo:
		err = fmt.Errorf("the payment is for order %q, not %q", w.OrderNo, orderNo)
	case !slices.Contains([]lapse.ProviderPaymentStatus{lapse.ProviderPending, lapse.ProviderPaid, lapse.ProviderClosed, lapse.ProviderRefunded}, w.Status):
		err = fmt.Errorf("unknown payment status %q", w.Status)
	case w.Amount < 0:
		err = fmt.Errorf("negative amount: %d minor units", w.Amount)
	case (w.Status == lapse.ProviderPaid || w.Status == lapse.ProviderRefunded) && (w.Amount == 0 || !lapse.WellFormedCurrency(w.Currency) || w.PaidAt.IsZero()):
		err = errors.New("a paid payment needs a positive amount, a currency and paid_at")
	}
	if err != nil {
		return nil, p.unreadable(op, effect, err)
	}
	return &lapse.ProviderPayment{TxnID: w.TxnID, OrderNo: w.OrderNo, Status: w.Status, Amount: w.Amount,
		Currency: w.Currency, Merchant: w.Merchant, PaidAt: lapse.Truncate(w.PaidAt)}, nil
}

// refund checks an answered refund; txnID, when set, is the payment refunded.
func (p *HTTPProvider) refund(op string, w *httpRefund, txnID string, effect bool) (*lapse.ProviderRefund, error) {
	var err error
	switch {
	case w.RefundID == "" || w.TxnID == "":
		err = errors.New("refund_id or txn_id is missing")
	case txnID != "" && w.TxnID != txnID:
		err = fmt.Errorf("the refund is of payment %q, not %q", w.TxnID, txnID)
	case !slices.Contains([]lapse.ProviderRefundStatus{lapse.RefundProcessing, lapse.RefundSucceeded, lapse.RefundFailed}, w.Status):
		err = fmt.Errorf("unknown refund status %q", w.Status)
	case w.Amount <= 0:
		err = fmt.Errorf("amount %d (minor units) is not positive", w.Amount)
	case w.Currency != "" && !lapse.WellFormedCurrency(w.Currency):
		// Three capital letters, as a callback's: a refund reported in a
		// code no order has is read, and then goes to review as a refund
		// of another currency than the one asked for.
		err = fmt.Errorf("currency %q is not three capital letters", w.Currency)
	}
	if err != nil {
		return nil, p.unreadable(op, effect, err)
	}
	return &lapse.ProviderRefund{RefundID: w.RefundID, TxnID: w.TxnID, Amount: w.Amount, Currency: w.Currency, Status: w.Status}, nil
}

// HTTPStatusError is an HTTPProvider's answer that was not a success. It
// wraps lapse.ErrProviderNotFound for a protocol 404 and lapse.ErrRefused
// for a refusal for good.
type HTTPStatusError struct {
	StatusCode int
	Code       string // the answer's code, if it had one
	Message    string // the answer's message, or the start of its body
}

func (e *HTTPStatusError) Error() string {
	s := "HTTP " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
	if e.refused() {
		s += ", refused for good"
	}
	if e.Message != "" {
		s += ": " + strconv.Quote(e.Message)
	}
	return s
}

// Unwrap returns the sentinel the status stands for, if any.
func (e *HTTPStatusError) Unwrap() error {
	switch {
	case e.StatusCode == http.StatusNotFound && e.Code == codeNotFound:
		return lapse.ErrProviderNotFound
	case e.refused():
		return lapse.ErrRefused
	}
	return nil
}

func (e *HTTPStatusError) refused() bool {
	switch e.StatusCode {
	case http.StatusNotFound, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return e.StatusCode/100 == 4
}

// providerStatusError reads a failure answer's code and message.
func providerStatusError(status int, body []byte) *HTTPStatusError {
	var e httpError
	if json.Unmarshal(body, &e) != nil || e.Message == "" {
		e.Message = strings.ToValidUTF8(string(body[:min(len(body), 256)]), "\uFFFD")
	}
	return &HTTPStatusError{StatusCode: status, Code: e.Code, Message: e.Message}
}

// requestMessage is what a request's signature covers (see HTTPProvider).
func requestMessage(method, target, key string, body []byte) []byte {
	return slices.Concat([]byte(method+" "+target+"\n"+key+"\n"), body)
}

// The protocol's JSON objects.
type (
	httpCharge struct {
		OrderNo  string `json:"order_no"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
		Method   string `json:"method"`
	}
	httpRefundRequest struct {
		TxnID    string `json:"txn_id"`
		OrderNo  string `json:"order_no"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
		Reason   string `json:"reason"`
	}
	httpPayment struct {
		TxnID    string                      `json:"txn_id"`
		OrderNo  string                      `json:"order_no"`
		Status   lapse.ProviderPaymentStatus `json:"status"`
		Amount   int64                       `json:"amount"`
		Currency string                      `json:"currency"`
		Merchant string                      `json:"merchant"`
		PaidAt   time.Time                   `json:"paid_at,omitzero"`
	}
	httpRefund struct {
		RefundID string                     `json:"refund_id"`
		TxnID    string                     `json:"txn_id"`
		Amount   int64                      `json:"amount"`
		Currency string                     `json:"currency,omitempty"`
		Status   lapse.ProviderRefundStatus `json:"status"`
	}
	httpError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
)

// codeNotFound is the code of a 404 that means "no such payment or refund".
const codeNotFound = "not_found"
