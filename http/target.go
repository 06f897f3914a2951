package http

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/lapsehq/lapse"
)

// targetOf is what a call of rt is about, for its audit row: rt.target with
// its path value or body field filled in. The value is read before anything
// checks it, so that a refusal is in the log too: one that no id can be,
// too long for a store's column or holding what a store cannot keep as text
// (NUL), is cut as a reason is (lapse.CleanReason), so that the row of its
// refusal can be written. A valid id is kept as it is.
func (rt *route) targetOf(r *http.Request, body []byte) string {
	kind, spec, ok := strings.Cut(rt.target, ":")
	if !ok {
		return rt.target
	}
	if field, ok := strings.CutPrefix(spec, "body."); ok {
		var m map[string]json.RawMessage
		var v string
		if json.Unmarshal(body, &m) == nil && json.Unmarshal(m[field], &v) == nil {
			return kind + ":" + lapse.CleanReason(v)
		}
		return kind
	}
	return kind + ":" + lapse.CleanReason(r.PathValue(strings.Trim(spec, "{}")))
}
