package http

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/lapsehq/lapse"
)

// Problem is an RFC 9457 problem detail: the body of every error answer,
// served as application/problem+json.
//
// Type is always "about:blank", so Title is the HTTP status text; clients
// branch on Code, which is one of the lapse error codes (invalid, not_found,
// conflict, unavailable, internal).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// Field names the request field at fault (a JSON path such as
	// items[0].sku, or a query parameter), when it is known.
	Field string `json:"field,omitempty"`
}

// ContentTypeProblem is the media type of every error answer.
const ContentTypeProblem = "application/problem+json"

// statusOf maps every lapse error code to its HTTP status. It is the only
// such table: handlers return errors and never pick a status themselves.
var statusOf = map[string]int{
	lapse.EINVALID:      http.StatusBadRequest,
	lapse.ENOTFOUND:     http.StatusNotFound,
	lapse.ECONFLICT:     http.StatusConflict,
	lapse.EUNAVAILABLE:  http.StatusServiceUnavailable,
	lapse.EUNAUTHORIZED: http.StatusUnauthorized,
	lapse.EINTERNAL:     http.StatusInternalServerError,
}

func problemFor(status int, code, field, detail string) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code, Field: field}
}

// unavailableRetryAfter is the Retry-After of an EUNAVAILABLE answer: long
// enough that clients do not hammer a database that is restarting or failing
// over, short enough that they are back soon after it is.
const unavailableRetryAfter = "5"

// error answers r with the problem that err stands for. Internal errors are
// logged here, once, and their text is never shown to the caller. Errors of
// a dependency that is unavailable get Retry-After and are logged once per
// burst, not once per request.
func (s *Server) error(w http.ResponseWriter, r *http.Request, err error) {
	code := lapse.ErrorCode(err)
	status, ok := statusOf[code]
	if !ok {
		status, code = http.StatusInternalServerError, lapse.EINTERNAL // an unknown code is a bug
	}
	if errors.As(err, new(*mediaTypeError)) {
		status = http.StatusUnsupportedMediaType // still code invalid: the caller sent something wrong
	}
	detail, field := lapse.ErrorMessage(err), ""
	var le *lapse.Error
	if errors.As(err, &le) {
		field = le.Field
	}
	if code == lapse.EUNAVAILABLE {
		w.Header().Set("Retry-After", unavailableRetryAfter)
		s.unavailable.add("method", r.Method, "path", r.URL.Path, "err", err)
	}
	if code == lapse.EINTERNAL {
		detail, field = "internal error", ""
		if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
			// The caller went away; nobody reads the answer and nothing is broken.
			s.log.Debug("http: request cancelled", "method", r.Method, "path", r.URL.Path, "err", err)
		} else {
			s.log.Error("http: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	writeProblem(w, problemFor(status, code, field, detail))
}

// mediaTypeError is a request body that is not JSON. It is the one input
// error with its own status, 415, which tells clients to fix a header rather
// than the body.
type mediaTypeError struct{ err *lapse.Error }

func (e *mediaTypeError) Error() string { return e.err.Error() }
func (e *mediaTypeError) Unwrap() error { return e.err }

func writeProblem(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		panic("lapse/http: problem does not marshal: " + err.Error()) // only strings and an int
	}
	w.Header().Set("Content-Type", ContentTypeProblem)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
