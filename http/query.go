package http

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
)

// listQuery parses the query string of a list route that takes the
// parameters known, each at most once. A parameter the route does not take,
// or one given twice, is refused naming it: a misspelt filter would
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
	}
	return q, nil
}
