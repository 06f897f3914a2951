// Package problem writes RFC 9457 problem details (application/problem+json),
// the body of every error answer Lapse serves: the API's and the sandbox's.
package problem

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/lapsehq/lapse"
)

// Problem is an RFC 9457 problem detail.
//
// Type is always "about:blank", so Title is the HTTP status text; clients
// branch on Code, which is one of the lapse error codes (invalid, not_found,
// conflict, unavailable, unauthorized, forbidden, internal).
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

// ContentType is the media type of every error answer.
const ContentType = "application/problem+json"

// statusOf maps every lapse error code to its HTTP status. It is the only
// such table: handlers return errors and never pick a status themselves.
var statusOf = map[string]int{
	lapse.EINVALID:      http.StatusBadRequest,
	lapse.ENOTFOUND:     http.StatusNotFound,
	lapse.ECONFLICT:     http.StatusConflict,
	lapse.EUNAVAILABLE:  http.StatusServiceUnavailable,
	lapse.EUNAUTHORIZED: http.StatusUnauthorized,
	lapse.EFORBIDDEN:    http.StatusForbidden,
	lapse.EINTERNAL:     http.StatusInternalServerError,
}

// New returns the problem of a status, a lapse error code, a field and a
// detail for the caller.
func New(status int, code, field, detail string) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code, Field: field}
}

// MediaTypeError is a request body that is not JSON by its Content-Type. It
// is the one input error with its own status, 415, which tells clients to
// fix a header rather than the body.
type MediaTypeError struct{ Err *lapse.Error }

func (e *MediaTypeError) Error() string { return e.Err.Error() }
func (e *MediaTypeError) Unwrap() error { return e.Err }

// Of returns the problem err stands for. The text of an internal error (any
// error without a lapse code) is never shown: its detail is "internal
// error", and the caller is told so by internal, to log it once.
func Of(err error) (p *Problem, internal bool) {
	code := lapse.ErrorCode(err)
	status, ok := statusOf[code]
	if !ok {
		status, code = http.StatusInternalServerError, lapse.EINTERNAL // an unknown code is a bug
	}
	if _, ok := errors.AsType[*MediaTypeError](err); ok {
		status = http.StatusUnsupportedMediaType // still code invalid: the caller sent something wrong
	}
	if code == lapse.EINTERNAL {
		return New(status, code, "", "internal error"), true
	}
	field := ""
	if le, ok := errors.AsType[*lapse.Error](err); ok {
		field = le.Field
	}
	return New(status, code, field, lapse.ErrorMessage(err)), false
}

// Write answers with p.
func Write(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		panic("lapse/problem: problem does not marshal: " + err.Error()) // only strings and an int
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
