package http_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// openAPIDoc is the part of an OpenAPI document these tests read.
type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

func fetchOpenAPI(t *testing.T, e *env) (*openAPIDoc, []byte) {
	t.Helper()
	r := e.do("GET", "/openapi.json", "").want(t, http.StatusOK)
	var doc openAPIDoc
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("decode /openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	return &doc, r.body
}

// TestOpenAPIMatchesRoutes checks that every route the server registers is in
// the document with the same method, and that the document has no others.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doc, _ := fetchOpenAPI(t, e)
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var documented []string
	for path, item := range doc.Paths {
		for key := range item {
			if slices.Contains(methods, key) {
				documented = append(documented, strings.ToUpper(key)+" "+path)
			}
		}
	}
	served := e.server.Routes()
	slices.Sort(documented)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not documented", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s is documented but not served", r)
		}
	}
}

// TestOpenAPIRefsResolve checks that every $ref names a component that exists.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	_, raw := fetchOpenAPI(t, newEnv(t))
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "$ref" {
					ref, _ := x.(string)
					var at any = doc
					for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
						m, ok := at.(map[string]any)
						if !ok || m[part] == nil {
							t.Errorf("$ref %q does not resolve", ref)
							return
						}
						at = m[part]
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
}

// TestOpenAPISchemasMatchTypes checks that the schemas list exactly the JSON
// fields of the types the server encodes and decodes.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc, _ := fetchOpenAPI(t, newEnv(t))
	types := map[string]any{
		"Order":      lapse.Order{},
		"Item":       lapse.Item{},
		"Transition": lapse.TransitionRecord{},
		"Event":      lapse.OutboxEvent{},
		"Problem":    lapsehttp.Problem{},
	}
	types["CouponMove"] = lapse.CouponMove{}
	types["Review"] = lapse.Review{}
	types["Payment"] = lapse.Payment{}
	types["OrderRefund"] = lapse.OrderRefund{}
	types["GroupMember"] = lapse.GroupMember{}
	types["Card"] = lapse.Card{}
	types["TriggerStatus"] = engine.TriggerStatus{}
	for name, v := range lapsehttp.RequestBodies {
		types[name] = v
	}
	for name, v := range lapsehttp.ResponseBodies {
		types[name] = v
	}
	for name, v := range types {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var documented []string
		for p := range schema.Properties {
			documented = append(documented, p)
		}
		slices.Sort(documented)
		if fields := jsonFields(reflect.TypeOf(v)); !slices.Equal(documented, fields) {
			t.Errorf("schema %s has %v, the Go type %T has %v", name, documented, v, fields)
		}
		for _, r := range schema.Required {
			if !slices.Contains(documented, r) {
				t.Errorf("schema %s requires %s, which it does not describe", name, r)
			}
		}
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
