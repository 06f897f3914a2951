package http

import (
	"context"
	"net/http"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

// Manual close (seed 004): orders chosen by number, user or creation time
// are previewed (POST /v1/closes/preview: a count and a sample, changing
// nothing), then closed through their flows as one batch (POST
// /v1/closes), whose progress GET /v1/closes/{id} shows. The same path as
// lapse close.

// closeBodyBytes is the body limit of the manual close's routes: room for
// closes.MaxOrderNos order numbers of lapse.MaxOrderNoLen each, quoted and
// comma-separated, beside the rest of the body, which the default limit
// holds. The default limit of 64 KiB took a few thousand numbers, not the
// MaxOrderNos a selector takes.
const closeBodyBytes = closes.MaxOrderNos*(lapse.MaxOrderNoLen+3) + DefaultMaxBodyBytes

var errNoCloser = lapse.Errorf(lapse.EUNAVAILABLE, "manual close is not configured on this server")

// closeRequest is the body of POST /v1/closes and /v1/closes/preview.
type closeRequest struct {
	Selector closes.Selector `json:"selector"`
	Reason   string          `json:"reason"`
	// Preview is the preview a close was confirmed from (its as_of and
	// count), which bounds what it closes; the preview route ignores it.
	Preview *previewSeen `json:"preview,omitempty"`
}

// previewSeen is what a preview showed: when it read, how many orders it
// counted to close, and, when given, the selection it counted them in.
type previewSeen struct {
	AsOf      *time.Time `json:"as_of"`
	Count     *int64     `json:"count"`
	Selection string     `json:"selection,omitempty"`
}

// previewed returns the preview req was confirmed from, nil when none.
func (req *closeRequest) previewed() (*closes.Preview, error) {
	if req.Preview == nil {
		return nil, nil
	}
	if req.Preview.AsOf == nil || req.Preview.Count == nil || *req.Preview.Count < 0 {
		return nil, lapse.FieldError("preview", "needs the preview's as_of and count")
	}
	return &closes.Preview{AsOf: *req.Preview.AsOf, Count: *req.Preview.Count, Selection: req.Preview.Selection}, nil
}

// keptTo is the bound of a close confirmed from previewed (nil: none) and
// admitted on the count admitted (closeStake; nil: none): nothing made or
// changed after either, and no more than either counted. Without it, orders
// that came into the selection while the close was admitted (a range that
// runs into the future, a preview whose as_of is to come) were closed with
// it, beyond the count four eyes judged.
func keptTo(previewed, admitted *closes.Preview) *closes.Preview {
	switch {
	case admitted == nil:
		return previewed
	case previewed == nil:
		return &closes.Preview{AsOf: admitted.AsOf, Count: admitted.Count, Selection: admitted.Selection}
	}
	b := *previewed
	if admitted.AsOf.Before(b.AsOf) {
		b.AsOf = admitted.AsOf
	}
	b.Count = min(b.Count, admitted.Count)
	return &b
}

// entryKey carries the audit row of a route whose handler writes its own
// (route.selfAudit).
type entryKey struct{}

func (s *Server) previewClose(w http.ResponseWriter, r *http.Request) {
	if s.closer == nil {
		s.error(w, r, errNoCloser)
		return
	}
	var req closeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.error(w, r, err)
		return
	}
	pv, err := s.closer.Preview(r.Context(), &req.Selector)
	if err != nil {
		s.error(w, r, err)
		return
	}
	sample := make([]*lapse.Order, 0, len(pv.Sample))
	for _, o := range pv.Sample {
		sample = append(sample, orderView(o))
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"count": pv.Count, "skipped": pv.Skipped, "sample": sample, "as_of": pv.AsOf, "selection": pv.Selection})
}

// startClose records its own audit rows (route.selfAudit): closes.Start
// those of a batch and of its failures once its input is valid, startClose
// (failed) those of the rest.
func (s *Server) startClose(w http.ResponseWriter, r *http.Request) {
	if s.closer == nil {
		s.failed(w, r, errNoCloser)
		return
	}
	var req closeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.failed(w, r, err)
		return
	}
	previewed, err := req.previewed()
	if err != nil {
		s.failed(w, r, err)
		return
	}
	by, _ := r.Context().Value(entryKey{}).(*lapse.AuditEntry)
	if by == nil {
		by = &lapse.AuditEntry{ActorKind: "api", ActorName: "api", Action: "close.batch", ClientAddr: s.clientAddr(r)}
	}
	var approved *lapse.Approval // the one carried out (carryOut), which bounds what is closed
	if ap, _ := r.Context().Value(approvedKey{}).(*approval); ap != nil {
		approved = ap.Approval
	}
	if st, _ := r.Context().Value(admittedKey{}).(*stake); st != nil {
		previewed = keptTo(previewed, st.closing)
	}
	b, err := s.closer.Start(r.Context(), &req.Selector, req.Reason, by, approved, previewed)
	switch {
	case lapse.ErrorCode(err) == lapse.EINVALID: // input Start refused before its own row
		s.failed(w, r, err)
		return
	case err != nil:
		s.error(w, r, err)
		return
	}
	run := *by
	go func() {
		// The batch outlives the request, and an outage of the database:
		// Finish runs it again until it is done. A process that stops
		// meanwhile leaves it running, for the next start to carry on.
		if _, err := s.closer.Finish(context.WithoutCancel(r.Context()), b.ID, &run, nil); err != nil {
			s.log.Error("http: a manual close batch stopped", "batch", b.ID, "err", err)
		}
	}()
	s.writeJSON(w, r, http.StatusAccepted, batchOut(b))
}

// batchJSON is a close batch as the API shows it.
type batchJSON struct {
	ID         int64                  `json:"id"`
	Status     lapse.CloseBatchStatus `json:"status"`
	Selector   rawJSON                `json:"selector"`
	Reason     string                 `json:"reason"`
	CreatedBy  string                 `json:"created_by"`
	ApprovalID int64                  `json:"approval_id,omitempty"`
	CreatedAt  time.Time              `json:"created_at"`
	Total      int64                  `json:"total"`
	Closed     int64                  `json:"closed"`
	Skipped    int64                  `json:"skipped"`
	Failed     int64                  `json:"failed"`
	FinishedAt *time.Time             `json:"finished_at,omitempty"`
}

func batchOut(b *lapse.CloseBatch) batchJSON {
	out := batchJSON{ID: b.ID, Status: b.Status, Selector: b.Selector, Reason: b.Reason, CreatedBy: b.CreatedBy,
		ApprovalID: b.ApprovalID, CreatedAt: b.CreatedAt, Total: b.Total, Closed: b.Closed, Skipped: b.Skipped, Failed: b.Failed}
	if !b.FinishedAt.IsZero() {
		out.FinishedAt = &b.FinishedAt
	}
	return out
}

func (s *Server) listCloses(w http.ResponseWriter, r *http.Request) {
	if s.closer == nil {
		s.error(w, r, errNoCloser)
		return
	}
	q, err := listQuery(r.URL.RawQuery, "status", "limit", "cursor")
	if err != nil {
		s.error(w, r, err)
		return
	}
	p := &lapse.CloseBatchListParams{Status: lapse.CloseBatchStatus(q.Get("status"))}
	switch p.Status {
	case "", lapse.CloseBatchRunning, lapse.CloseBatchDone:
	default:
		s.error(w, r, lapse.FieldError("status", "must be running or done"))
		return
	}
	limit, before, err := idPage(q, closeCursor, defaultCloseLimit)
	if err != nil {
		s.error(w, r, err)
		return
	}
	p.Limit, p.Before = limit+1, before // one more than asked tells whether another page exists
	bs, err := s.closer.Batches(r.Context(), p)
	if err != nil {
		s.error(w, r, err)
		return
	}
	bs, next := pageOf(bs, limit, closeCursor, func(b *lapse.CloseBatch) (time.Time, int64) { return b.CreatedAt, b.ID })
	out := make([]batchJSON, 0, len(bs))
	for _, b := range bs {
		out = append(out, batchOut(b))
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"batches": out, "next_cursor": next})
}

// defaultCloseLimit is the page size of GET /v1/closes without a limit:
// the 100 it always answered before it took one.
const defaultCloseLimit = 100

func (s *Server) getClose(w http.ResponseWriter, r *http.Request) {
	if s.closer == nil {
		s.error(w, r, errNoCloser)
		return
	}
	id, err := pathID(r, "a batch number")
	if err != nil {
		s.error(w, r, err)
		return
	}
	b, err := s.closer.Batch(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, batchOut(b))
}
