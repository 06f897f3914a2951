package http

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// attemptView is one attempt of a delivery.
type attemptView struct {
	Attempt    int       `json:"attempt"`
	Worker     string    `json:"worker"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS float64   `json:"duration_ms"`
	Outcome    string    `json:"outcome"`
	Error      string    `json:"error"`
}

// deliveryView is a delivery with every attempt made of it. A relayed
// event (relayed true) has no delivery row: its id is 0 and it has no
// history; it is done once its subscriber's relay handed it over.
type deliveryView struct {
	ID            int64                `json:"id"`
	Relayed       bool                 `json:"relayed,omitempty"`
	EventID       string               `json:"event_id"`
	EventType     string               `json:"event_type"`
	OrderNo       string               `json:"order_no"`
	Subscriber    string               `json:"subscriber"`
	Status        lapse.DeliveryStatus `json:"status"`
	Attempts      int                  `json:"attempts"`
	NextAttemptAt *time.Time           `json:"next_attempt_at"` // null unless pending
	Unknown       bool                 `json:"unknown"`
	LastError     string               `json:"last_error"`
	CreatedAt     time.Time            `json:"created_at"`
	UpdatedAt     time.Time            `json:"updated_at"`
	DoneAt        *time.Time           `json:"done_at"`
	History       []attemptView        `json:"history"`
}

func newDeliveryView(d *lapse.Delivery, atts []*lapse.DeliveryAttempt) deliveryView {
	v := deliveryView{ID: d.ID, EventID: d.EventID, EventType: d.EventType, OrderNo: d.OrderNo, Subscriber: d.Subscriber,
		Status: d.Status, Attempts: d.Attempts, Unknown: d.Unknown, LastError: d.LastError,
		CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), DoneAt: utc(d.DoneAt), History: []attemptView{}}
	if d.Status == lapse.DeliveryPending {
		v.NextAttemptAt = utc(&d.NextAttemptAt)
	}
	for _, a := range atts {
		v.History = append(v.History, attemptView{Attempt: a.Attempt, Worker: a.Worker, StartedAt: a.StartedAt.UTC(),
			DurationMS: float64(a.Duration.Microseconds()) / 1000, Outcome: a.Outcome, Error: a.Error})
	}
	return v
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	hs, err := s.engine.Deliveries(r.Context(), r.PathValue("order_no"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	out := make([]deliveryView, len(hs))
	for i, h := range hs {
		out[i] = newDeliveryView(h.Delivery, h.History)
		out[i].Relayed = h.Relayed
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"deliveries": out})
}

func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request) {
	id, err := s.bareID(w, r, "a delivery id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	d, err := s.engine.RetryDelivery(r.Context(), id, actor(r))
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newDeliveryView(d, nil))
}

// reviewPage is one page of GET /v1/reviews.
type reviewPage struct {
	Reviews    []*lapse.Review `json:"reviews"`
	NextCursor *string         `json:"next_cursor"` // null on the last page
}

// listReviews lists reviews newest first, a page at a time: the cursor is a
// position (the last review's created_at and id), not a page number, so a
// review resolved between pages of open=true moves no other review to an
// earlier page, and none is skipped or listed twice.
func (s *Server) listReviews(w http.ResponseWriter, r *http.Request) {
	q, err := listQuery(r.URL.RawQuery, "open", "limit", "cursor")
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := &lapse.ReviewListParams{Limit: DefaultListLimit}
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "open":
			b, err := strconv.ParseBool(v)
			if err != nil {
				s.error(w, r, lapse.FieldError("open", "must be true or false"))
				return
			}
			p.Open = b
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				s.error(w, r, lapse.FieldError("limit", "must be an integer from 1 to %d", MaxListLimit))
				return
			}
			p.Limit = n
		case "cursor":
			at, id, err := decodeCursor(reviewCursor, v)
			if err != nil {
				s.error(w, r, err)
				return
			}
			p.Before = &lapse.ReviewCursor{CreatedAt: at, ID: id}
		}
	}
	limit := p.Limit
	p.Limit++ // one more than asked tells whether another page exists
	rs, err := s.engine.Reviews(r.Context(), p)
	if err != nil {
		s.error(w, r, err)
		return
	}
	page := reviewPage{Reviews: make([]*lapse.Review, 0, min(len(rs), limit))}
	if len(rs) > limit {
		rs = rs[:limit]
		last := rs[len(rs)-1]
		cur := encodeCursor(reviewCursor, last.CreatedAt, last.ID)
		page.NextCursor = &cur
	}
	for _, rv := range rs {
		v := *rv
		v.CreatedAt, v.ResolvedAt = v.CreatedAt.UTC(), utc(v.ResolvedAt)
		page.Reviews = append(page.Reviews, &v)
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// resolveRequest is the body of POST /v1/reviews/{id}/resolve.
type resolveRequest struct {
	Note string `json:"note"`
}

// resolveReview marks a review resolved with a note: the operator handled
// what automation gave up on. Line breaks sent as CRLF (a browser's
// textarea) are kept as LF.
func (s *Server) resolveReview(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "a review id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	var req resolveRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	note := strings.ReplaceAll(req.Note, "\r\n", "\n")
	if strings.TrimSpace(note) == "" {
		s.error(w, r, lapse.FieldError("note", "is required: say how it was resolved"))
		return
	}
	rv, err := s.engine.ResolveReview(r.Context(), id, note, actor(r))
	s.writeReview(w, r, rv, err)
}

// writeReview answers r with rv, as resolved, or with err.
func (s *Server) writeReview(w http.ResponseWriter, r *http.Request, rv *lapse.Review, err error) {
	if err != nil {
		s.error(w, r, err)
		return
	}
	v := *rv
	v.CreatedAt, v.ResolvedAt = v.CreatedAt.UTC(), utc(v.ResolvedAt)
	s.writeJSON(w, r, http.StatusOK, &v)
}

// settleRequest is the body of POST /v1/reviews/{id}/settle.
type settleRequest struct {
	Status lapse.OrderRefundStatus `json:"status"`
	Note   string                  `json:"note"`
}

// settleReview settles the refund in review that a review holds, as the
// operator found it at its provider (succeeded or failed), and resolves the
// review with the note, in one change. Line breaks sent as CRLF are kept as
// LF, as resolveReview keeps them.
func (s *Server) settleReview(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "a review id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	var req settleRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	rv, err := s.engine.SettleReview(r.Context(), id, req.Status, strings.ReplaceAll(req.Note, "\r\n", "\n"), actor(r))
	s.writeReview(w, r, rv, err)
}
