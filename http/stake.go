package http

import (
	"encoding/json"
	"net/http"

	"github.com/lapsehq/lapse"
)

// refundStake is the amount a refund asks for, in its order's currency.
func refundStake(s *Server, r *http.Request, body []byte) (stake, error) {
	var req refundRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Amount == nil {
		return stake{}, lapse.FieldError("amount", "is required")
	}
	o, err := s.engine.Order(r.Context(), r.PathValue("order_no"))
	if err != nil {
		return stake{}, err
	}
	return stake{amount: *req.Amount, currency: o.Currency, reason: req.Reason}, nil
}

// orderStake is the amount of the order a retry (a compensation, or a
// group's charges) is about, by the path value that names it.
func orderStake(name string) func(s *Server, r *http.Request, body []byte) (stake, error) {
	return func(s *Server, r *http.Request, body []byte) (stake, error) {
		o, err := s.engine.Order(r.Context(), r.PathValue(name))
		if err != nil {
			return stake{}, err
		}
		var req struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(body, &req)
		return stake{amount: o.Amount, currency: o.Currency, reason: req.Reason}, nil
	}
}

// closeStake is the number of orders a manual close would close.
func closeStake(s *Server, r *http.Request, body []byte) (stake, error) {
	if s.closer == nil {
		return stake{}, errNoCloser
	}
	var req closeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return stake{}, err
	}
	pv, err := s.closer.Preview(r.Context(), &req.Selector)
	if err != nil {
		return stake{}, err
	}
	return stake{count: pv.Count, reason: req.Reason}, nil
}
