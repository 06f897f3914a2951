package http

import (
	"bytes"
	"io"
	"math"
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// A stake is read from the body as its handler reads it (s.decode: the
// Content-Type, unknown or repeated keys, keys in another case), so that
// a request its handler would refuse is never held for approval: a stake
// that cannot be told leaves the request to its handler, which refuses it.

// decodeStake decodes body, the body of r, into dst as the route's handler
// will. body arrived in full within the limit (bodyBytes), so the limit
// never needs the ResponseWriter that s.decode is given none of.
func (s *Server) decodeStake(r *http.Request, body []byte, dst any) error {
	r2 := new(http.Request)
	*r2 = *r // the handler reads r's body later: decode a copy
	r2.Body = io.NopCloser(bytes.NewReader(body))
	return s.decode(nil, r2, dst)
}

// refundStake is what a refund puts at risk, in its order's currency: its
// amount and every refund of the order that did not fail, so that a refund
// split into pieces below the threshold still needs four eyes once they add
// up past it.
func refundStake(s *Server, r *http.Request, body []byte) (stake, error) {
	var req refundRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	if req.Amount == nil {
		return stake{}, lapse.FieldError("amount", "is required")
	}
	o, err := s.engine.Order(r.Context(), r.PathValue("order_no"))
	if err != nil {
		return stake{}, err
	}
	refs, err := s.engine.OrderRefunds(r.Context(), o.OrderNo)
	if err != nil {
		return stake{}, err
	}
	total := *req.Amount
	for _, ref := range refs {
		if ref.Status != lapse.OrderRefundFailed && ref.Key != r.Header.Get("Idempotency-Key") {
			if sum, ok := lapse.AddInt64(total, ref.Amount); ok {
				total = sum
			} else {
				total = math.MaxInt64
			}
		}
	}
	return stake{amount: *req.Amount, atRisk: total, currency: o.Currency, reason: req.Reason}, nil
}

// settleStake is what settling a review's refund puts at stake: the
// refund's amount, which it marks gone back or not.
func settleStake(s *Server, r *http.Request, body []byte) (stake, error) {
	var req settleRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	id, err := pathID(r, "a review id")
	if err != nil {
		return stake{}, err
	}
	amount, currency, err := s.engine.SettleStake(r.Context(), id)
	if err != nil {
		return stake{}, err
	}
	return stake{amount: amount, currency: currency, reason: req.Note}, nil
}

// retryStake is what a retry of the order puts at risk (a compensation
// moves no money; its order's amount stands for it).
func retryStake(s *Server, r *http.Request, body []byte) (stake, error) {
	amount, currency, err := s.engine.RetryStake(r.Context(), r.PathValue("order_no"))
	if err != nil {
		return stake{}, err
	}
	return retryBody(s, r, body, stake{amount: amount, currency: currency})
}

// groupRetryStake is what a retry of a failed group buy can charge: the
// price of every member not charged yet, not the group's order's amount,
// which is what one member pays.
func groupRetryStake(s *Server, r *http.Request, body []byte) (stake, error) {
	amount, currency, err := s.engine.RetryGroupStake(r.Context(), r.PathValue("group_id"))
	if err != nil {
		return stake{}, err
	}
	return retryBody(s, r, body, stake{amount: amount, currency: currency})
}

// groupAbandonStake is what abandoning a failed group buy refunds: the
// price of every member charged, or whose charge is under way.
func groupAbandonStake(s *Server, r *http.Request, body []byte) (stake, error) {
	amount, currency, err := s.engine.AbandonGroupStake(r.Context(), r.PathValue("group_id"))
	if err != nil {
		return stake{}, err
	}
	return retryBody(s, r, body, stake{amount: amount, currency: currency})
}

// fireStake is what an event fired at an order puts at stake: when it ends
// the order (a CANCEL of an unpaid one), that order, counted as a manual
// close of it counts it, so that closing orders one event at a time adds up
// as closing them together does.
func fireStake(s *Server, r *http.Request, body []byte) (stake, error) {
	var req fireRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	n, err := s.engine.FireStake(r.Context(), r.PathValue("order_no"), engine.Fire{Event: lapse.Event(req.Event),
		Reason: req.Reason, By: actor(r)})
	if err != nil {
		return stake{}, err
	}
	return stake{count: n, reason: req.Reason}, nil
}

// deadlineStake is what a deadline move puts at stake: brought earlier,
// the order's timer closes it sooner, as a manual close would close it now,
// so the order (an open group buy: its members, which its deadline
// settles) counts as a close of it does; so that closing orders by moving
// their deadlines to a moment away is no way around a second operator. A
// deadline moved later counts nothing.
func deadlineStake(s *Server, r *http.Request, body []byte) (stake, error) {
	return movedStake(s, r, body, r.PathValue("order_no"), false)
}

// groupDeadlineStake is what a group buy's deadline moved as the group
// puts at stake: brought earlier while the group is open, its members,
// counted as a cancel of the group counts them.
func groupDeadlineStake(s *Server, r *http.Request, body []byte) (stake, error) {
	return movedStake(s, r, body, r.PathValue("group_id"), true)
}

func movedStake(s *Server, r *http.Request, body []byte, no string, group bool) (stake, error) {
	var req deadlineRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	c, err := req.change(r, group)
	if err != nil {
		return stake{}, err
	}
	n, err := s.engine.DeadlineStake(r.Context(), no, c)
	if err != nil {
		return stake{}, deadlineRoute(err, no)
	}
	return stake{count: n, reason: req.Reason}, nil
}

// groupFireStake is what an event fired at a group buy puts at stake: when
// it ends the group while it is open, each member's purchase, counted as a
// manual close counts its orders.
func groupFireStake(s *Server, r *http.Request, body []byte) (stake, error) {
	var req fireRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	n, err := s.engine.GroupFireStake(r.Context(), r.PathValue("group_id"), engine.Fire{Event: lapse.Event(req.Event),
		Reason: req.Reason, By: actor(r)})
	if err != nil {
		return stake{}, err
	}
	return stake{count: n, reason: req.Reason}, nil
}

// retryBody adds the reason of a retry's body to st.
func retryBody(s *Server, r *http.Request, body []byte, st stake) (stake, error) {
	var req retryRequest
	if !bodyLeftOut(r) { // the body is optional, as retry reads it
		if err := s.decodeStake(r, body, &req); err != nil {
			return stake{}, err
		}
	}
	st.reason = req.Reason
	return st, nil
}

// closeStake is the number of orders a manual close would close: of a
// close confirmed from a preview, those the preview counted that it would
// close now (closes.Closer.PreviewSince), not the orders made since, which
// it leaves out.
func closeStake(s *Server, r *http.Request, body []byte) (stake, error) {
	if s.closer == nil {
		return stake{}, errNoCloser
	}
	var req closeRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	previewed, err := req.previewed()
	if err != nil {
		return stake{}, err
	}
	pv, err := s.closer.PreviewSince(r.Context(), &req.Selector, previewed)
	if err != nil {
		return stake{}, err
	}
	return stake{count: pv.Count, reason: req.Reason, closing: pv}, nil
}
