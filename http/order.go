package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
)

// Listing limits of GET /v1/orders.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// orderCreateRequest is the body of POST /v1/orders. The required fields are
// pointers so that a missing field is told apart from its zero value (an
// amount of 0 is refused by the engine in a flow that takes payments, with
// its own reason; a missing amount is a bug in the caller).
// Only presence and parsing are checked here; the rules about values live in
// lapse.OrderCreate.Validate and the engine.
type orderCreateRequest struct {
	OrderNo    *string         `json:"order_no"`
	Flow       *string         `json:"flow"`
	UserID     *string         `json:"user_id"`
	Amount     *int64          `json:"amount"`
	Currency   *string         `json:"currency"`
	Items      []lapse.Item    `json:"items"`
	Coupon     string          `json:"coupon"`
	TTL        *string         `json:"ttl"`         // a Go duration: "15m", "90s", "1h30m"
	DeadlineAt *string         `json:"deadline_at"` // RFC 3339
	Metadata   json.RawMessage `json:"metadata"`
}

func (q *orderCreateRequest) orderCreate() (*lapse.OrderCreate, error) {
	for _, f := range []struct {
		name    string
		present bool
	}{
		{"order_no", q.OrderNo != nil},
		{"flow", q.Flow != nil},
		{"user_id", q.UserID != nil},
		{"amount", q.Amount != nil},
		{"currency", q.Currency != nil},
	} {
		if !f.present {
			return nil, lapse.FieldError(f.name, "is required")
		}
	}
	c := &lapse.OrderCreate{
		OrderNo:  *q.OrderNo,
		Flow:     *q.Flow,
		UserID:   *q.UserID,
		Amount:   *q.Amount,
		Currency: *q.Currency,
		Items:    q.Items,
		Coupon:   q.Coupon,
	}
	if q.TTL != nil {
		// Zero means "the flow's default" to the engine, so a TTL that is
		// sent must be positive to mean what it says.
		d, err := parseDuration("ttl", *q.TTL)
		if err != nil {
			return nil, err
		}
		if d <= 0 {
			return nil, lapse.FieldError("ttl", "must be a positive duration such as \"15m\"")
		}
		c.TTL = d
	}
	if q.DeadlineAt != nil {
		t, err := parseTime("deadline_at", *q.DeadlineAt)
		if err != nil {
			return nil, err
		}
		c.DeadlineAt = &t
	}
	if !isNull(q.Metadata) {
		c.Metadata = q.Metadata
	}
	return c, nil
}

func (s *Server) createOrder(w http.ResponseWriter, r *http.Request) {
	var req orderCreateRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	c, err := req.orderCreate()
	if err != nil {
		s.error(w, r, err)
		return
	}
	o, created, err := s.engine.CreateOrder(r.Context(), c, actor(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/orders/"+url.PathEscape(o.OrderNo))
	status := http.StatusOK // a repeat of the request that created it
	if created {
		status = http.StatusCreated
	} else {
		repeated(r)
	}
	s.writeJSON(w, r, status, orderView(o))
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	o, err := s.engine.Order(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, orderView(o))
}

// orderPage is one page of GET /v1/orders.
type orderPage struct {
	Orders     []*lapse.Order `json:"orders"`
	NextCursor *string        `json:"next_cursor"` // null on the last page
}

func (s *Server) listOrders(w http.ResponseWriter, r *http.Request) {
	p, err := listParams(r.URL.RawQuery)
	if err != nil {
		s.error(w, r, err)
		return
	}
	limit := p.Limit
	p.Limit++ // one more than asked tells whether another page exists
	got, err := s.engine.Orders(r.Context(), p)
	if err != nil {
		s.error(w, r, err)
		return
	}
	page := orderPage{Orders: make([]*lapse.Order, 0, min(len(got), limit))}
	if len(got) > limit {
		got = got[:limit]
		last := got[len(got)-1]
		cur := encodeCursor(orderCursor, last.CreatedAt, last.ID)
		page.NextCursor = &cur
	}
	for _, o := range got {
		page.Orders = append(page.Orders, orderView(o))
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// listParams parses the query of GET /v1/orders (see listQuery). The
// engine checks the state and the flow against its flows (Engine.Orders):
// an unknown one is refused rather than matching nothing.
func listParams(rawQuery string) (*lapse.OrderListParams, error) {
	q, err := listQuery(rawQuery, "state", "user_id", "flow", "created_from", "created_to", "limit", "cursor")
	if err != nil {
		return nil, err
	}
	p := &lapse.OrderListParams{
		State:  lapse.State(q.Get("state")),
		UserID: q.Get("user_id"),
		Flow:   q.Get("flow"),
		Limit:  DefaultListLimit,
	}
	if v := q.Get("created_from"); v != "" {
		t, err := parseTime("created_from", v)
		if err != nil {
			return nil, err
		}
		p.CreatedFrom = &t
	}
	if v := q.Get("created_to"); v != "" {
		t, err := parseTime("created_to", v)
		if err != nil {
			return nil, err
		}
		p.CreatedTo = &t
	}
	if p.CreatedFrom != nil && p.CreatedTo != nil && !p.CreatedTo.After(*p.CreatedFrom) {
		return nil, lapse.FieldError("created_to", "must be after created_from (created_from is inclusive, created_to exclusive)")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return nil, lapse.FieldError("limit", "must be an integer from 1 to %d", MaxListLimit)
		}
		p.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		at, id, err := decodeCursor(orderCursor, v)
		if err != nil {
			return nil, err
		}
		p.Before = &lapse.OrderCursor{CreatedAt: at, ID: id}
	}
	return p, nil
}

// fireRequest is the body of POST /v1/orders/{order_no}/events.
type fireRequest struct {
	Event  string `json:"event"`
	Reason string `json:"reason"` // for the transition log
}

func (s *Server) fireEvent(w http.ResponseWriter, r *http.Request) {
	var req fireRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	o, err := s.engine.Fire(r.Context(), r.PathValue("order_no"), engine.Fire{
		Event: lapse.Event(req.Event), Reason: req.Reason, By: actor(r), External: true})
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, orderView(o))
}

// deadlineRequest is the body of PATCH /v1/orders/{order_no}/deadline: one of
// deadline_at (RFC 3339, earlier or later) or extend_by (a Go duration). The
// optional Idempotency-Key header makes a retry change nothing and answer
// with the order as it stands, as a refund's retry does.
type deadlineRequest struct {
	DeadlineAt *string `json:"deadline_at"`
	ExtendBy   *string `json:"extend_by"`
	Reason     string  `json:"reason"` // for the order.deadline_changed event
}

// change is the engine's change of req by r's caller, of a group buy as
// the group when group is set (PATCH /v1/groups/{group_id}/deadline).
func (req *deadlineRequest) change(r *http.Request, group bool) (engine.DeadlineChange, error) {
	c := engine.DeadlineChange{Reason: req.Reason, By: actor(r), External: true, Group: group, Key: r.Header.Get("Idempotency-Key")}
	if req.DeadlineAt != nil {
		t, err := parseTime("deadline_at", *req.DeadlineAt)
		if err != nil {
			return c, err
		}
		c.At = &t
	}
	if req.ExtendBy != nil {
		d, err := parseDuration("extend_by", *req.ExtendBy)
		if err == nil && d == 0 {
			// The engine reads zero as "not sent"; a zero that was sent is a mistake.
			err = lapse.FieldError("extend_by", "must be a positive duration such as \"10m\"")
		}
		if err != nil {
			return c, err
		}
		c.ExtendBy = d // a negative one is refused by the engine, with a hint
	}
	return c, nil
}

func (s *Server) setDeadline(w http.ResponseWriter, r *http.Request) {
	o, ok := s.moveDeadline(w, r, r.PathValue("order_no"), false)
	if ok {
		s.writeJSON(w, r, http.StatusOK, orderView(o))
	}
}

// setGroupDeadline moves a group buy's deadline as the group: the one route
// that may bring an open group's deadline earlier, which settles it early
// for every member, and so guarded as a cancel of the group is (the
// operations:write scope, an operator's second factor, four eyes by its
// members: groupDeadlineStake). It answers with the group.
func (s *Server) setGroupDeadline(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("group_id")
	if _, ok := s.moveDeadline(w, r, id, true); !ok {
		return
	}
	g, err := s.engine.Group(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newGroupView(g))
}

// moveDeadline carries out the deadline change in r's body of the order no,
// as the group when group is set, and returns the order as it left it;
// false when it answered r with an error.
func (s *Server) moveDeadline(w http.ResponseWriter, r *http.Request, no string, group bool) (*lapse.Order, bool) {
	var req deadlineRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return nil, false
	}
	c, err := req.change(r, group)
	if err != nil {
		s.error(w, r, err)
		return nil, false
	}
	o, moved, err := s.engine.SetDeadline(r.Context(), no, c)
	if err != nil {
		s.error(w, r, deadlineRoute(err, no))
		return nil, false
	}
	if !moved {
		repeated(r) // the deadline as it stands
	}
	return o, true
}

// deadlineRoute is err, a deadline change's error, naming the route and
// the scope that change the group buy no's deadline when err says that is
// the group's to change.
func deadlineRoute(err error, no string) error {
	if errors.Is(err, engine.ErrDeadlineIsGroup) {
		return lapse.Refine(engine.ErrDeadlineIsGroup, "bringing the deadline of the open group buy %s earlier settles it early for every member: "+
			"change it as the group with PATCH /v1/groups/%s/deadline (scope %s)", no, url.PathEscape(no), access.ScopeOperationsWrite)
	}
	return err
}

func (s *Server) listTransitions(w http.ResponseWriter, r *http.Request) {
	trs, err := s.engine.Transitions(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]*lapse.TransitionRecord, len(trs))
	for i, tr := range trs {
		v := *tr
		v.CreatedAt = v.CreatedAt.UTC()
		out[i] = &v
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"transitions": out})
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	evs, err := s.engine.Events(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]*lapse.OutboxEvent, len(evs))
	for i, ev := range evs {
		v := *ev
		v.CreatedAt = v.CreatedAt.UTC()
		out[i] = &v
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"events": out})
}

// orderView is o as the API shows it: times in UTC whatever zone the store
// returned. Every answer with an order shows it through orderView; its
// items show as [] when there are none, as every list of an answer does
// (writeJSON).
func orderView(o *lapse.Order) *lapse.Order {
	v := *o
	v.CreatedAt, v.UpdatedAt = v.CreatedAt.UTC(), v.UpdatedAt.UTC()
	v.DeadlineAt, v.ClosedAt = utc(v.DeadlineAt), utc(v.ClosedAt)
	v.IntentAt, v.PayBy, v.ClosedDeadlineAt = utc(v.IntentAt), utc(v.PayBy), utc(v.ClosedDeadlineAt)
	return &v
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, lapse.FieldError(field, "must be an RFC 3339 timestamp such as 2026-11-29T12:00:00Z, not %q", s)
	}
	return t, nil
}

// parseDuration reads a duration of the API as flow files write theirs
// (lapse.ParseDuration): 90s, 15m, 1h30m, 7d, 1d12h.
func parseDuration(field, s string) (time.Duration, error) {
	d, err := lapse.ParseDuration(s)
	if err != nil {
		return 0, lapse.FieldError(field, "must be a duration such as \"15m\", \"90s\", \"1h30m\" or \"7d\", not %q", s)
	}
	return d, nil
}

// isNull reports whether raw is absent or the JSON null, which both mean
// "no metadata".
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
