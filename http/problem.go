package http

import (
	"context"
	"errors"
	"net/http"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/problem"
)

// Problem is an RFC 9457 problem detail: the body of every error answer,
// served as application/problem+json.
//
// Type is always "about:blank", so Title is the HTTP status text; clients
// branch on Code, which is one of the lapse error codes (invalid, not_found,
// conflict, unavailable, unauthorized, forbidden, internal).
type Problem = problem.Problem

// ContentTypeProblem is the media type of every error answer.
const ContentTypeProblem = problem.ContentType

func problemFor(status int, code, field, detail string) *Problem {
	return problem.New(status, code, field, detail)
}

// unavailableRetryAfter is the Retry-After of an EUNAVAILABLE answer: long
// enough that clients do not hammer a database that is restarting or failing
// over, short enough that they are back soon after it is.
const unavailableRetryAfter = "5"

// error answers r with the problem that err stands for (the one table of
// statuses is in internal/problem). Internal errors are logged here, once,
// and their text is never shown to the caller. Errors of a dependency that
// is unavailable get Retry-After and are logged once per burst, not once per
// request.
func (s *Server) error(w http.ResponseWriter, r *http.Request, err error) {
	p, internal := problem.Of(err)
	if p.Code == lapse.EUNAVAILABLE {
		w.Header().Set("Retry-After", unavailableRetryAfter)
		s.unavailable.add("method", r.Method, "path", r.URL.Path, "err", err)
	}
	if internal {
		if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
			// The caller went away; nobody reads the answer and nothing is broken.
			s.log.Debug("http: request cancelled", "method", r.Method, "path", r.URL.Path, "err", err)
		} else {
			s.log.Error("http: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p *Problem) { problem.Write(w, p) }
