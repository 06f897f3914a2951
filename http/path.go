package http

import (
	"net/http"
	"strconv"

	"github.com/lapsehq/lapse"
)

// pathID reads the path value id as what, a positive integer in its one
// decimal form. strconv.ParseInt alone also takes "+7" and "07": the call
// then acted on 7 while its audit row's target named "+7", which no search
// for the record finds. A refusal is EINVALID, naming id.
func pathID(r *http.Request, what string) (int64, error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != raw {
		return 0, lapse.FieldError("id", "must be %s: a positive integer, without sign or leading zeros", what)
	}
	return id, nil
}

// bareID reads the path value id as pathID does, for an action on a record
// that takes no body: one may be sent, an empty object, read as
// decodeOptional reads it.
func (s *Server) bareID(w http.ResponseWriter, r *http.Request, what string) (int64, error) {
	id, err := pathID(r, what)
	if err != nil {
		return 0, err
	}
	return id, s.decodeOptional(w, r, &struct{}{})
}
