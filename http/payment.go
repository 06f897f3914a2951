package http

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// intentRequest is the body of POST /v1/orders/{order_no}/payment-intents.
type intentRequest struct {
	Provider *string `json:"provider"`
}

func (s *Server) startPayment(w http.ResponseWriter, r *http.Request) {
	var req intentRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if req.Provider == nil || *req.Provider == "" {
		s.error(w, r, lapse.FieldError("provider", "is required"))
		return
	}
	o, err := s.engine.StartPayment(r.Context(), r.PathValue("order_no"), *req.Provider, actor(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, orderView(o))
}

func (s *Server) listPayments(w http.ResponseWriter, r *http.Request) {
	ps, err := s.engine.Payments(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	if ps == nil {
		ps = []*lapse.Payment{}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"payments": ps})
}

// paymentCallback verifies a provider's callback by the provider's own
// scheme, applies what it reports, and answers in the provider's format:
// a success only once the payment is recorded, so that the provider calls
// again after any failure. No refusal changes anything. A callback refused
// before its provider's signature is verified (unreadable, or not signed) is
// logged once per burst (forgedCalls), since anyone can send one; every
// other refusal is logged with its reason.
func (s *Server) paymentCallback(w http.ResponseWriter, r *http.Request) {
	provider := r.PathValue("provider")
	cb := s.callbacks[provider]
	if cb == nil {
		names := make([]string, 0, len(s.callbacks))
		for n := range s.callbacks {
			names = append(names, n)
		}
		slices.Sort(names)
		s.error(w, r, lapse.Errorf(lapse.ENOTFOUND, "no payment provider %q takes callbacks here (configured: %s)", provider, strings.Join(names, ", ")))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		err = lapse.Errorf(lapse.EINVALID, "the callback body is larger than the limit of %d bytes", mbe.Limit)
	case err != nil:
		err = lapse.Errorf(lapse.EINVALID, "the callback body could not be read")
	}
	if err != nil {
		s.forgedCalls.add("provider", provider, "err", err)
		cb.Ack(w, err)
		return
	}
	n, err := cb.Verify(r.Header, body, s.engine.Clock().Now())
	if err != nil {
		if errors.Is(err, lapse.ErrSignature) {
			// Anyone can send these, as fast as they like: a line each
			// would be theirs to write.
			s.forgedCalls.add("provider", provider, "err", err)
		} else {
			// Signed by the provider, and not readable: each one is news.
			s.log.Warn("payment callback refused", "provider", provider, "err", err)
		}
		cb.Ack(w, err)
		return
	}
	if n == nil { // verified, about something Lapse does not act on
		cb.Ack(w, nil)
		return
	}
	// Each line says what the notice reports: a payment, or a refund.
	what := noticeNoun(n.Kind)
	attrs := []any{"provider", provider, "kind", n.Kind, "txn_id", n.TxnID, "order_no", n.OrderNo}
	if n.RefundID != "" {
		attrs = append(attrs, "refund_id", n.RefundID)
	}
	p, err := s.engine.ApplyPayment(r.Context(), n)
	if err != nil {
		attrs = append(attrs, "err", err)
		switch lapse.ErrorCode(err) {
		case lapse.EUNAVAILABLE: // the provider sends it again; one line per outage
			w.Header().Set("Retry-After", unavailableRetryAfter)
			s.unavailable.add(append([]any{"method", r.Method, "path", r.URL.Path}, attrs...)...)
		case lapse.EINTERNAL:
			s.log.Error(what+" callback not applied", attrs...)
		default:
			s.log.Warn(what+" callback not applied", attrs...)
		}
		cb.Ack(w, err)
		return
	}
	// At Debug, as every request's line: the payment's row is its record,
	// and the engine logs those not applied; a line per callback at Info would
	// be a write to stderr per callback.
	status := "member charge" // a group member's charge, recorded on the member
	switch {
	case n.Kind == lapse.NoticeUnreadable:
		status = "review" // on its payment's desk, or its order's
	case p != nil:
		status = string(p.Status)
	}
	s.log.Debug(what+" callback applied", append(attrs, "status", status)...)
	if p != nil && p.Status == lapse.PaymentHeld && n.Kind == lapse.NoticePaid {
		if na, ok := cb.(lapse.NoteAcker); ok {
			na.AckNote(w, heldNote(p))
			return
		}
	}
	cb.Ack(w, nil)
}

// heldNote is what the answer to a callback whose payment was held without
// its order says.
func heldNote(p *lapse.Payment) string {
	return fmt.Sprintf("held: no order %s exists; payment %s (%s) is recorded as held without its order, "+
		"and is applied when the order is created, or goes to an operator", p.OrderNo, p.TxnID, lapse.Money(p.Amount, p.Currency))
}

// noticeNoun is what a provider's notice of kind k is about, as its log
// lines name it: a payment, a refund, or a dispute.
func noticeNoun(k lapse.PaymentNoticeKind) string {
	switch k {
	case lapse.NoticeRefunded:
		return "refund"
	case lapse.NoticeDispute:
		return "dispute"
	}
	return "payment"
}

// refundRequest is the body of POST /v1/orders/{order_no}/refunds; the
// optional Idempotency-Key header makes a retry return the same refund.
type refundRequest struct {
	Amount *int64 `json:"amount"`
	Reason string `json:"reason"`
}

func (s *Server) refundOrder(w http.ResponseWriter, r *http.Request) {
	var req refundRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if req.Amount == nil {
		s.error(w, r, lapse.FieldError("amount", "is required"))
		return
	}
	ref, created, err := s.engine.RefundOrder(r.Context(), r.PathValue("order_no"), engine.RefundRequest{
		Amount: *req.Amount, Reason: req.Reason, Key: r.Header.Get("Idempotency-Key"), By: actor(r)})
	if err != nil {
		s.error(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	} else {
		repeated(r)
	}
	s.writeJSON(w, r, status, ref)
}

func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	rs, err := s.engine.OrderRefunds(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	if rs == nil {
		rs = []*lapse.OrderRefund{}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"refunds": rs})
}
