package http

import (
	"encoding/json"
	"net/http"
	"strings"
)

// targetOf is what a call of rt is about, for its audit row: rt.target with
// its path value or body field filled in.
func (rt *route) targetOf(r *http.Request, body []byte) string {
	kind, spec, ok := strings.Cut(rt.target, ":")
	if !ok {
		return rt.target
	}
	if field, ok := strings.CutPrefix(spec, "body."); ok {
		var m map[string]json.RawMessage
		var v string
		if json.Unmarshal(body, &m) == nil && json.Unmarshal(m[field], &v) == nil {
			return kind + ":" + v
		}
		return kind
	}
	return kind + ":" + r.PathValue(strings.Trim(spec, "{}"))
}
