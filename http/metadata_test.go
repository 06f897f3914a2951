package http_test

import (
	"net/http"
	"strings"
	"testing"
)

// nestedMetadata is a metadata object that nests depth objects and arrays,
// itself the first, with brackets in a string that count for nothing.
func nestedMetadata(depth int) string {
	inner := strings.Repeat(`[`, depth-1) + `"[{"` + strings.Repeat(`]`, depth-1)
	return `{"deep":` + inner + `}`
}

// TestMetadataDepthIsCapped: metadata nested deeper than
// lapse.MaxMetadataDepth is refused with a 400 naming the field, on every
// route that takes metadata, and nothing is written; at the cap it is taken.
func TestMetadataDepthIsCapped(t *testing.T) {
	t.Parallel()
	const depthCap = 32 // lapse.MaxMetadataDepth, as the API's document says
	e := newEnv(t)
	for _, c := range []struct{ path, body, get string }{
		{"/v1/orders", `{"order_no":"MD-%s","flow":"checkout","user_id":"u","amount":100,"currency":"USD","metadata":%s}`, "/v1/orders/MD-%s"},
		{"/v1/groups", `{"group_id":"GD-%s","organiser":"org","price":990,"currency":"CNY","metadata":%s}`, "/v1/groups/GD-%s"},
	} {
		deep := strings.Replace(strings.Replace(c.body, "%s", "deep", 1), "%s", nestedMetadata(depthCap+1), 1)
		p := e.do("POST", c.path, deep).want(t, http.StatusBadRequest).problem(t)
		if p.Field != "metadata" || !strings.Contains(p.Detail, "32 levels") {
			t.Errorf("POST %s with metadata %d levels deep: %+v, want a 400 naming metadata and its cap", c.path, depthCap+1, p)
		}
		e.do("GET", strings.Replace(c.get, "%s", "deep", 1), "").want(t, http.StatusNotFound)
		// Far deeper, as encoding/json would take it: the same answer.
		deepest := strings.Replace(strings.Replace(c.body, "%s", "deepest", 1), "%s", nestedMetadata(5000), 1)
		if p := e.do("POST", c.path, deepest).want(t, http.StatusBadRequest).problem(t); p.Field != "metadata" {
			t.Errorf("POST %s with metadata 5000 levels deep: %+v, want a 400 naming metadata", c.path, p)
		}
		e.do("GET", strings.Replace(c.get, "%s", "deepest", 1), "").want(t, http.StatusNotFound)
		ok := strings.Replace(strings.Replace(c.body, "%s", "ok", 1), "%s", nestedMetadata(depthCap), 1)
		e.do("POST", c.path, ok).want(t, http.StatusCreated)
	}
}
