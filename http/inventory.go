package http

import (
	"net/http"
	"net/url"
	"time"

	"github.com/lapsehq/lapse"
)

// stockRequest is the body of PUT /v1/stock/{sku}.
type stockRequest struct {
	OnHand *int64 `json:"on_hand"`
}

// stockView is a SKU's line of the built-in stock ledger.
type stockView struct {
	SKU       string    `json:"sku"`
	OnHand    int64     `json:"on_hand"`
	Reserved  int64     `json:"reserved"`
	Available int64     `json:"available"`
	UpdatedAt time.Time `json:"updated_at"`
}

func newStockView(st *lapse.Stock) stockView {
	return stockView{SKU: st.SKU, OnHand: st.OnHand, Reserved: st.Reserved, Available: st.Available(), UpdatedAt: st.UpdatedAt.UTC()}
}

func (s *Server) putStock(w http.ResponseWriter, r *http.Request) {
	var req stockRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if req.OnHand == nil {
		s.error(w, r, lapse.FieldError("on_hand", "is required"))
		return
	}
	st, err := s.engine.SetStock(r.Context(), r.PathValue("sku"), *req.OnHand)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newStockView(st))
}

func (s *Server) getStock(w http.ResponseWriter, r *http.Request) {
	st, err := s.engine.Stock(r.Context(), r.PathValue("sku"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newStockView(st))
}

// couponRequest is the body of POST /v1/coupons.
type couponRequest struct {
	Code *string `json:"code"`
}

// couponView is a coupon of the built-in ledger with its journal.
type couponView struct {
	Code      string              `json:"code"`
	Status    lapse.CouponStatus  `json:"status"`
	OrderNo   string              `json:"order_no"`
	CreatedAt time.Time           `json:"created_at"`
	UpdatedAt time.Time           `json:"updated_at"`
	Moves     []*lapse.CouponMove `json:"moves"`
}

func newCouponView(c *lapse.Coupon, moves []*lapse.CouponMove) couponView {
	v := couponView{Code: c.Code, Status: c.Status, OrderNo: c.OrderNo, CreatedAt: c.CreatedAt.UTC(), UpdatedAt: c.UpdatedAt.UTC(), Moves: []*lapse.CouponMove{}}
	for _, m := range moves {
		mv := *m
		mv.CreatedAt = mv.CreatedAt.UTC()
		v.Moves = append(v.Moves, &mv)
	}
	return v
}

func (s *Server) createCoupon(w http.ResponseWriter, r *http.Request) {
	var req couponRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	if req.Code == nil {
		s.error(w, r, lapse.FieldError("code", "is required"))
		return
	}
	c, err := s.engine.CreateCoupon(r.Context(), *req.Code)
	if err != nil {
		s.error(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/coupons/"+url.PathEscape(c.Code))
	s.writeJSON(w, r, http.StatusCreated, newCouponView(c, nil))
}

func (s *Server) getCoupon(w http.ResponseWriter, r *http.Request) {
	c, moves, err := s.engine.Coupon(r.Context(), r.PathValue("code"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newCouponView(c, moves))
}
