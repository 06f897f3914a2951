package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/lapsehq/lapse"
)

// Handler serves the sandbox as a gateway speaking the protocol of
// HTTPProvider, so that the same simulated gateway can be reached over HTTP.
// Every request must be signed with the sandbox's Secret (401 otherwise);
// mounted under a prefix with http.StripPrefix, it still checks the
// signature against the target as sent.
// A call whose answer the sandbox simulates as lost (UnknownRate) takes
// effect and then has its connection dropped without an answer; one that
// FailRate fails is answered 503.
func (s *Sandbox) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.serveCharge)
	mux.HandleFunc("POST /refunds", s.serveRefund)
	mux.HandleFunc("GET /refunds/{key}", func(w http.ResponseWriter, r *http.Request) {
		rf, err := s.RefundQuery(r.Context(), r.PathValue("key"))
		s.answer(w, toHTTPRefund(rf), err)
	})
	mux.HandleFunc("GET /payments/{order_no}", func(w http.ResponseWriter, r *http.Request) {
		p, err := s.Query(r.Context(), r.PathValue("order_no"))
		s.answer(w, toHTTPPayment(p), err)
	})
	mux.HandleFunc("POST /payments/{order_no}/close", func(w http.ResponseWriter, r *http.Request) {
		p, err := s.Close(r.Context(), r.PathValue("order_no"))
		s.answer(w, toHTTPPayment(p), err)
	})
	return s.authenticated(mux)
}

// authenticated lets through only requests signed with the sandbox's secret.
func (s *Sandbox) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxProviderBody))
		if err != nil {
			writeProviderError(w, http.StatusBadRequest, "invalid", "the body cannot be read: "+err.Error())
			return
		}
		msg := requestMessage(r.Method, r.RequestURI, r.Header.Get(idempotencyHead), body)
		if err := verifyProviderRequest(r.Header.Get(SignatureHeader), s.secret, msg, s.clock.Now()); err != nil {
			writeProviderError(w, http.StatusUnauthorized, "unauthorized", lapse.ErrorMessage(err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// verifyProviderRequest checks a request's SignatureHeader against secret and its
// timestamp against DefaultTolerance; the error wraps lapse.ErrSignature.
func verifyProviderRequest(header string, secret, msg []byte, now time.Time) error {
	if header == "" {
		return lapse.Refine(lapse.ErrSignature, "the %s header is missing", SignatureHeader)
	}
	return checkSignature(header, [][]byte{secret}, msg, now, DefaultTolerance, "request")
}

func (s *Sandbox) serveCharge(w http.ResponseWriter, r *http.Request) {
	var c httpCharge
	if !sandboxDecode(w, r, &c) {
		return
	}
	p, err := s.Charge(r.Context(), &lapse.ChargeRequest{IdempotencyKey: r.Header.Get(idempotencyHead),
		OrderNo: c.OrderNo, Amount: c.Amount, Currency: c.Currency, Method: c.Method})
	s.answer(w, toHTTPPayment(p), err)
}

func (s *Sandbox) serveRefund(w http.ResponseWriter, r *http.Request) {
	var c httpRefundRequest
	if !sandboxDecode(w, r, &c) {
		return
	}
	rf, err := s.Refund(r.Context(), &lapse.RefundRequest{IdempotencyKey: r.Header.Get(idempotencyHead),
		TxnID: c.TxnID, OrderNo: c.OrderNo, Amount: c.Amount, Currency: c.Currency, Reason: c.Reason})
	s.answer(w, toHTTPRefund(rf), err)
}

func sandboxDecode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, _ := io.ReadAll(r.Body) // already read in full by authenticated
	if err := decodeStrict(body, v); err != nil {
		writeProviderError(w, http.StatusBadRequest, "invalid", err.Error())
		return false
	}
	return true
}

// answer writes v, or the protocol's answer to err.
func (s *Sandbox) answer(w http.ResponseWriter, v any, err error) {
	var refusal *sandboxRefusal
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	case errors.Is(err, lapse.ErrUnknownOutcome):
		// The effect happened; the answer is lost on the way, as the
		// connection drops.
		panic(http.ErrAbortHandler)
	case errors.As(err, &refusal):
		writeProviderError(w, refusal.status, "refused", refusal.msg)
	case errors.Is(err, lapse.ErrProviderNotFound):
		writeProviderError(w, http.StatusNotFound, codeNotFound, lapse.ErrorMessage(err))
	default:
		writeProviderError(w, http.StatusServiceUnavailable, "unavailable", lapse.ErrorMessage(err))
	}
}

func writeProviderError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(httpError{Code: code, Message: msg})
}

func toHTTPPayment(p *lapse.ProviderPayment) *httpPayment {
	if p == nil {
		return nil
	}
	return &httpPayment{TxnID: p.TxnID, OrderNo: p.OrderNo, Status: p.Status, Amount: p.Amount,
		Currency: p.Currency, Merchant: p.Merchant, PaidAt: p.PaidAt}
}

func toHTTPRefund(r *lapse.ProviderRefund) *httpRefund {
	if r == nil {
		return nil
	}
	return &httpRefund{RefundID: r.RefundID, TxnID: r.TxnID, Amount: r.Amount, Currency: r.Currency, Status: r.Status}
}

// Redeliver sends the latest callback about txnID again, freshly signed, as
// a gateway retries callbacks that were not acknowledged. The payment may
// have been made through any sandbox sharing this one's Store; the callback
// goes to this sandbox's CallbackURL. It returns an error wrapping
// lapse.ErrProviderNotFound for an unknown txnID.
func (s *Sandbox) Redeliver(ctx context.Context, txnID string) error {
	body, err := s.latest(ctx, txnID)
	if err != nil {
		return fmt.Errorf("sandbox: redeliver %s: %w", txnID, err)
	}
	return s.send(ctx, body)
}

// Callback returns the latest callback about txnID, its body and its
// SignatureHeader signed now, so that a test can replay it or forge a
// variant; nil and "" for a transaction with no callback (or a Store that
// cannot be read). A charge's callback is kept but not sent: the caller has
// the answer.
func (s *Sandbox) Callback(txnID string) (body []byte, header string) {
	body, err := s.latest(context.Background(), txnID)
	if err != nil {
		return nil, ""
	}
	return body, s.Verifier().Sign(body, s.clock.Now())
}

// latest returns the latest callback body about txnID, or an error
// wrapping lapse.ErrProviderNotFound when there is none.
func (s *Sandbox) latest(ctx context.Context, txnID string) ([]byte, error) {
	p, err := s.store.SandboxPaymentGet(ctx, s.name, txnID)
	if err != nil {
		return nil, err
	}
	if p.Callback == nil {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no callback about %q", txnID)
	}
	return p.Callback, nil
}

// setCallback records n, completed from p, as p's latest callback and
// returns its body; the caller puts p.
func (s *Sandbox) setCallback(p *lapse.SandboxPayment, n Notice) []byte {
	n.TxnID, n.OrderNo, n.Currency, n.Merchant = p.TxnID, p.OrderNo, p.Currency, p.Merchant
	if n.Amount == 0 {
		n.Amount = p.Amount
	}
	body, err := json.Marshal(n)
	if err != nil {
		panic(err) // a Notice always marshals
	}
	p.Callback = body
	return body
}

// send POSTs a callback body to the callback URL, signed now.
func (s *Sandbox) send(ctx context.Context, body []byte) error {
	if s.callbackURL == "" {
		return nil
	}
	err := s.post(ctx, body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Callbacks++
	if err != nil {
		s.calls.CallbackFailures++
	}
	return err
}

func (s *Sandbox) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.callbackURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, s.Verifier().Sign(body, s.clock.Now()))
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("callback answered HTTP %d: %q", resp.StatusCode, answer)
	}
	return nil
}
