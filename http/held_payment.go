package http

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

// heldPaymentView is a held payment as the API shows it, times in UTC.
func heldPaymentView(h *lapse.HeldPayment) *lapse.HeldPayment {
	v := *h
	v.PaidAt, v.CreatedAt, v.UpdatedAt = v.PaidAt.UTC(), v.CreatedAt.UTC(), v.UpdatedAt.UTC()
	return &v
}

// listHeldPayments lists the payments held without their order, by id: all
// of them, or those of one status, a page at a time (after: the last id of
// the page before).
func (s *Server) listHeldPayments(w http.ResponseWriter, r *http.Request) {
	q, err := listQuery(r.URL.RawQuery, "status", "after", "limit")
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := &lapse.HeldPaymentListParams{Limit: DefaultListLimit}
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "status":
			st := lapse.HeldPaymentStatus(v)
			switch st {
			case lapse.HeldWaiting, lapse.HeldReview, lapse.HeldApplied, lapse.HeldRefunding, lapse.HeldRefunded, lapse.HeldDismissed:
			default:
				s.error(w, r, lapse.FieldError("status", "must be held, review, applied, refunding, refunded or dismissed"))
				return
			}
			p.Statuses = []lapse.HeldPaymentStatus{st}
		case "after":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				s.error(w, r, lapse.FieldError("after", "must be a held payment id"))
				return
			}
			p.AfterID = n
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				s.error(w, r, lapse.FieldError("limit", "must be an integer from 1 to %d", MaxListLimit))
				return
			}
			p.Limit = n
		}
	}
	hs, err := s.engine.HeldPayments(r.Context(), p)
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]*lapse.HeldPayment, len(hs))
	for i, h := range hs {
		out[i] = heldPaymentView(h)
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"held_payments": out})
}

func (s *Server) getHeldPayment(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "a held payment id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	h, err := s.engine.HeldPayment(r.Context(), id)
	s.writeHeld(w, r, h, err)
}

// refundHeldPayment refunds a held payment in review, in full, through its
// provider's port; the answer says where it then stands.
func (s *Server) refundHeldPayment(w http.ResponseWriter, r *http.Request) {
	id, err := s.bareID(w, r, "a held payment id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	h, err := s.engine.RefundHeldPayment(r.Context(), id, actor(r))
	s.writeHeld(w, r, h, err)
}

// applyHeldPayment applies a held payment in review to its order through
// the payment path; 409 when the order cannot take it.
func (s *Server) applyHeldPayment(w http.ResponseWriter, r *http.Request) {
	id, err := s.bareID(w, r, "a held payment id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	h, err := s.engine.ApplyHeldPayment(r.Context(), id, actor(r))
	s.writeHeld(w, r, h, err)
}

// dismissHeldPayment takes a held payment in review off the desk with a
// note. Line breaks sent as CRLF are kept as LF, as resolveReview keeps them.
func (s *Server) dismissHeldPayment(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "a held payment id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	var req resolveRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	h, err := s.engine.DismissHeldPayment(r.Context(), id, strings.ReplaceAll(req.Note, "\r\n", "\n"), actor(r))
	s.writeHeld(w, r, h, err)
}

// writeHeld answers r with h, or with err.
func (s *Server) writeHeld(w http.ResponseWriter, r *http.Request, h *lapse.HeldPayment, err error) {
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, heldPaymentView(h))
}

// heldStake is what refunding a held payment puts at stake: its amount,
// which goes back; or applying it: its amount, which pays its order.
func heldStake(s *Server, r *http.Request, _ []byte) (stake, error) {
	return heldPaymentStake(s, r, "")
}

// dismissStake is what dismissing a held payment puts at stake: its
// amount, which goes off the desk. A dismissal without a note, which its
// handler refuses, is never held for approval.
func dismissStake(s *Server, r *http.Request, body []byte) (stake, error) {
	var req resolveRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	if strings.TrimSpace(req.Note) == "" {
		return stake{}, lapse.FieldError("note", "is required: say what became of the money")
	}
	return heldPaymentStake(s, r, req.Note)
}

func heldPaymentStake(s *Server, r *http.Request, reason string) (stake, error) {
	id, err := pathID(r, "a held payment id")
	if err != nil {
		return stake{}, err
	}
	h, err := s.engine.HeldPayment(r.Context(), id)
	if err != nil {
		return stake{}, err
	}
	return stake{amount: h.Amount, currency: h.Currency, reason: reason}, nil
}
