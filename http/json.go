package http

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/lapsehq/lapse/internal/jsonbody"
)

// decode reads r's body into dst, which must point to a struct. It is strict
// because a field the server ignores, or reads other than the caller meant,
// is a request the caller thinks it made: the body must be JSON by
// Content-Type, at most s.maxBody bytes, and pass jsonbody.Decode (exactly
// one object; keys exactly as named, each once; valid UTF-8; every value of
// its field's type). Every failure is an EINVALID error (a *problem.MediaTypeError
// for the Content-Type) naming the field when there is one.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	return jsonbody.Read(w, r, s.maxBody, dst)
}

// writeJSON answers with v as JSON. The body is encoded before the header is
// written so that a value that does not encode is still a clean 500.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.error(w, r, fmt.Errorf("encode %T: %w", v, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
