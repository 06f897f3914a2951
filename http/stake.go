package http

import (
	"bytes"
	"io"
	"math"
	"net/http"

	"github.com/lapsehq/lapse"
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

// orderStake is the amount of the order a retry (a compensation) is
// about.
func orderStake(s *Server, r *http.Request, body []byte) (stake, error) {
	o, err := s.engine.Order(r.Context(), r.PathValue("order_no"))
	if err != nil {
		return stake{}, err
	}
	reason, err := s.retryReason(r, body)
	if err != nil {
		return stake{}, err
	}
	return stake{amount: o.Amount, currency: o.Currency, reason: reason}, nil
}

// groupStake is what retrying a group buy charges: the price of every
// member not charged yet, not one member's price.
func groupStake(s *Server, r *http.Request, body []byte) (stake, error) {
	g, err := s.engine.Group(r.Context(), r.PathValue("group_id"))
	if err != nil {
		return stake{}, err
	}
	reason, err := s.retryReason(r, body)
	if err != nil {
		return stake{}, err
	}
	var total int64
	for _, m := range g.Members {
		if m.Status == lapse.ChargeCharged {
			continue
		}
		if sum, ok := lapse.AddInt64(total, m.Amount); ok {
			total = sum
		} else {
			total = math.MaxInt64
		}
	}
	return stake{amount: total, currency: g.Order.Currency, reason: reason}, nil
}

// retryReason reads the reason of a retry from its body, which is
// optional, as retryOrder reads it.
func (s *Server) retryReason(r *http.Request, body []byte) (string, error) {
	var req retryRequest
	if r.ContentLength != 0 {
		if err := s.decodeStake(r, body, &req); err != nil {
			return "", err
		}
	}
	return req.Reason, nil
}

// closeStake is the number of orders a manual close would close.
func closeStake(s *Server, r *http.Request, body []byte) (stake, error) {
	if s.closer == nil {
		return stake{}, errNoCloser
	}
	var req closeRequest
	if err := s.decodeStake(r, body, &req); err != nil {
		return stake{}, err
	}
	pv, err := s.closer.Preview(r.Context(), &req.Selector)
	if err != nil {
		return stake{}, err
	}
	return stake{count: pv.Count, reason: req.Reason}, nil
}
