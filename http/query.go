package http

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
)

// listQuery parses the query string of a list route that takes the
// parameters known, each at most once and with a value. A parameter the
// route does not take, one given twice, or one given empty (state=, or a
// bare state) is refused naming it: a misspelt or empty filter would
// otherwise list everything, and a repeated one leave the caller guessing
// which of its values counts. The values of enum-like parameters (a state,
// a status) are the handler's to check.
func listQuery(rawQuery string, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, lapse.Errorf(lapse.EINVALID, "the query string is malformed: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, k) {
			return nil, lapse.FieldError(k, "is not a parameter of this listing (it takes %s)", strings.Join(known, ", "))
		}
		if len(q[k]) > 1 {
			return nil, lapse.FieldError(k, "is given more than once")
		}
		if q[k][0] == "" {
			// Read as left out, user_id= (a variable the caller never set)
			// would list every user's orders.
			return nil, lapse.FieldError(k, "is given empty; give it a value, or leave it out")
		}
	}
	return q, nil
}

// noQuery refuses a request with query parameters, naming the first, for a
// route that takes none: a filter it ignored would answer everything, and
// the caller would take it for what it asked.
func (s *Server) noQuery(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			// Parsed as a list route's query is, so that a malformed one is
			// refused the same way; a bare "?" leaves nothing to refuse.
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				err = lapse.Errorf(lapse.EINVALID, "the query string is malformed: %v", err)
			} else if len(q) > 0 {
				err = lapse.FieldError(slices.Sorted(maps.Keys(q))[0], "is not a parameter of this route, which takes none")
			}
			if err != nil {
				s.error(w, r, err)
				return
			}
		}
		h(w, r)
	}
}
