package http

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
)

// groupCreateRequest is the body of POST /v1/groups: a group buy is an order
// of the groupbuy flow (or another group flow) whose amount is the price
// each member pays and whose user is the organiser.
type groupCreateRequest struct {
	GroupID    *string         `json:"group_id"`
	Flow       *string         `json:"flow"` // default groupbuy
	Organiser  *string         `json:"organiser"`
	Price      *int64          `json:"price"`
	Currency   *string         `json:"currency"`
	TTL        *string         `json:"ttl"`
	DeadlineAt *string         `json:"deadline_at"`
	Metadata   json.RawMessage `json:"metadata"`
}

// groupView is a group buy with its members and their charges.
type groupView struct {
	GroupID   string               `json:"group_id"`
	Flow      string               `json:"flow"`
	State     lapse.State          `json:"state"`
	Organiser string               `json:"organiser"`
	Price     int64                `json:"price"`
	Currency  string               `json:"currency"`
	Order     *lapse.Order         `json:"order"`
	Members   []*lapse.GroupMember `json:"members"`
}

func newGroupView(g *engine.Group) *groupView {
	ms := g.Members
	if ms == nil {
		ms = []*lapse.GroupMember{}
	}
	o := orderView(g.Order)
	return &groupView{GroupID: o.OrderNo, Flow: o.Flow, State: o.State, Organiser: o.UserID, Price: o.Amount, Currency: o.Currency,
		Order: o, Members: ms}
}

func (s *Server) createGroup(w http.ResponseWriter, r *http.Request) {
	var req groupCreateRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	for _, f := range []struct {
		name    string
		present bool
	}{{"group_id", req.GroupID != nil}, {"organiser", req.Organiser != nil}, {"price", req.Price != nil}, {"currency", req.Currency != nil}} {
		if !f.present {
			s.error(w, r, lapse.FieldError(f.name, "is required"))
			return
		}
	}
	if *req.Price <= 0 || *req.Price > lapse.MaxAmount {
		s.error(w, r, lapse.FieldError("price", "must be a positive number of minor units, at most %d", int64(lapse.MaxAmount)))
		return
	}
	flow := "groupbuy"
	if req.Flow != nil {
		flow = *req.Flow
	}
	if f := s.engine.Flow(flow); f != nil && f.Group.Join == "" {
		s.error(w, r, lapse.FieldError("flow", "flow %s is not a group buy", flow))
		return
	}
	oreq := orderCreateRequest{OrderNo: req.GroupID, Flow: &flow, UserID: req.Organiser, Amount: req.Price, Currency: req.Currency,
		TTL: req.TTL, DeadlineAt: req.DeadlineAt, Metadata: req.Metadata}
	c, err := oreq.orderCreate()
	if err != nil {
		s.error(w, r, err)
		return
	}
	_, created, err := s.engine.CreateOrder(r.Context(), c, actor(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	g, err := s.engine.Group(r.Context(), c.OrderNo)
	if err != nil {
		s.error(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/groups/"+url.PathEscape(c.OrderNo))
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	} else {
		repeated(r)
	}
	s.writeJSON(w, r, status, newGroupView(g))
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	g, err := s.engine.Group(r.Context(), r.PathValue("group_id"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newGroupView(g))
}

// joinRequest is the body of POST /v1/groups/{group_id}/members.
type joinRequest struct {
	UserID   string `json:"user_id"`
	Provider string `json:"provider"` // default: the only provider configured
	Method   string `json:"method"`   // what the provider charges
}

func (s *Server) joinGroup(w http.ResponseWriter, r *http.Request) {
	var req joinRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	m, created, err := s.engine.JoinGroup(r.Context(), r.PathValue("group_id"), engine.JoinRequest{UserID: req.UserID,
		Provider: req.Provider, Method: req.Method, By: actor(r)})
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
	s.writeJSON(w, r, status, m)
}

// fireGroupEvent fires an event at a group buy as a whole: the one route
// that may end a group while it is open (a CANCEL, which cancels every
// member's purchase), and so guarded as a manual close is: the
// operations:write scope, an operator's second factor, four eyes by its
// members (groupFireStake). Its body is that of the order's events route,
// which refuses such an event. It answers with the group.
func (s *Server) fireGroupEvent(w http.ResponseWriter, r *http.Request) {
	var req fireRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	id := r.PathValue("group_id")
	if _, err := s.engine.Fire(r.Context(), id, engine.Fire{Event: lapse.Event(req.Event), Reason: req.Reason, By: actor(r),
		External: true, Group: true}); err != nil {
		s.error(w, r, err)
		return
	}
	g, err := s.engine.Group(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newGroupView(g))
}

// retryRequest is the body of an operator's retry; it may be empty.
type retryRequest struct {
	Reason string `json:"reason"`
}

// retryOrder retries what automation gave up on for an order that is not
// a group buy (a membership's compensation in manual review); retryGroup
// retries a failed group buy, which charges its members. Each route has
// its scope, and refuses the other's orders, naming the route that takes
// them.
func (s *Server) retryOrder(w http.ResponseWriter, r *http.Request) {
	s.retry(w, r, r.PathValue("order_no"), s.engine.Retry)
}

func (s *Server) retryGroup(w http.ResponseWriter, r *http.Request) {
	s.retry(w, r, r.PathValue("group_id"), s.engine.RetryGroup)
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request, no string,
	retry func(ctx context.Context, no, reason string, by engine.Actor) (*lapse.Order, error)) {
	var req retryRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	o, err := retry(r.Context(), no, req.Reason, actor(r))
	if err != nil {
		s.error(w, r, retryRoute(err, no))
		return
	}
	s.writeJSON(w, r, http.StatusOK, orderView(o))
}

// abandonGroup gives up on a failed group buy: its members charged are
// refunded, once each, and the others released (engine.AbandonGroup). The
// body, {"reason": "…"}, is optional.
func (s *Server) abandonGroup(w http.ResponseWriter, r *http.Request) {
	var req retryRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	o, err := s.engine.AbandonGroup(r.Context(), r.PathValue("group_id"), req.Reason, actor(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, orderView(o))
}

// retryRoute is err, a retry's error, naming the route that retries the
// order no when err says it is another route's.
func retryRoute(err error, no string) error {
	switch {
	case errors.Is(err, engine.ErrRetryIsGroup):
		return lapse.Refine(engine.ErrRetryIsGroup, "order %s is a group buy, whose retry charges its members: retry it with POST /v1/groups/%s/retry (scope %s)",
			no, url.PathEscape(no), access.ScopePaymentsWrite)
	case errors.Is(err, engine.ErrRetryNotGroup):
		return lapse.Refine(engine.ErrRetryNotGroup, "order %s is not a group buy: retry it with POST /v1/orders/%s/retry (scope %s)",
			no, url.PathEscape(no), access.ScopeOperationsWrite)
	}
	return err
}
