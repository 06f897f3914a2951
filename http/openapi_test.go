package http_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
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
		SecuritySchemes map[string]struct {
			Type   string `json:"type"`
			Scheme string `json:"scheme"`
			In     string `json:"in"`
			Name   string `json:"name"`
		} `json:"securitySchemes"`
	} `json:"components"`
}

// openAPIOperation is the part of an operation the access test reads.
type openAPIOperation struct {
	Security     []map[string][]string      `json:"security"`
	Scope        string                     `json:"x-lapse-scope"`
	SecondFactor bool                       `json:"x-lapse-second-factor"`
	Parameters   []map[string]any           `json:"parameters"`
	Responses    map[string]json.RawMessage `json:"responses"`
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

// TestOpenAPIMatchesAccess checks each operation's security against the
// route table: a route with a scope names it as x-lapse-scope and in both
// security requirements (a key's and a session's) and answers 401 and 403;
// a session route lists the session alone, with no scope, and answers 401
// and 403 (another origin);
// an open route has an empty security; x-lapse-second-factor is the route's
// risky, and a risky route lists the Lapse-Second-Factor header; a route with a stake may
// answer 202 with an approval request.
func TestOpenAPIMatchesAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doc, _ := fetchOpenAPI(t, e)
	key, session := doc.Components.SecuritySchemes["apiKey"], doc.Components.SecuritySchemes["session"]
	if key.Type != "http" || key.Scheme != "bearer" {
		t.Errorf("securitySchemes.apiKey is %+v, want http bearer", key)
	}
	if session.Type != "apiKey" || session.In != "cookie" || session.Name != lapsehttp.SessionCookie {
		t.Errorf("securitySchemes.session is %+v, want apiKey in the cookie %s", session, lapsehttp.SessionCookie)
	}
	secondFactor := map[string]any{"$ref": "#/components/parameters/SecondFactor"}
	for route, want := range e.server.Access() {
		method, path, _ := strings.Cut(route, " ")
		raw, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			continue // TestOpenAPIMatchesRoutes reports it
		}
		var op openAPIOperation
		if err := json.Unmarshal(raw, &op); err != nil {
			t.Errorf("%s: %v", route, err)
			continue
		}
		switch {
		case op.Security == nil:
			t.Errorf("%s has no security; an open route says security: []", route)
		case want.Session && !reflect.DeepEqual(op.Security, []map[string][]string{{"session": {}}}):
			t.Errorf("%s needs an operator's session and no scope, but its security is %v", route, op.Security)
		case want.Scope == "" && !want.Session && len(op.Security) != 0:
			t.Errorf("%s is open, but its security is %v", route, op.Security)
		case want.Scope != "" && !reflect.DeepEqual(op.Security, []map[string][]string{{"apiKey": {want.Scope}}, {"session": {want.Scope}}}):
			t.Errorf("%s needs %s, but its security is %v", route, want.Scope, op.Security)
		}
		if op.Scope != want.Scope {
			t.Errorf("%s needs %q, but its x-lapse-scope is %q", route, want.Scope, op.Scope)
		}
		if op.SecondFactor != want.Risky {
			t.Errorf("%s: x-lapse-second-factor is %v, the route's risky %v", route, op.SecondFactor, want.Risky)
		}
		if want.Risky && !slices.ContainsFunc(op.Parameters, func(p map[string]any) bool { return reflect.DeepEqual(p, secondFactor) }) {
			t.Errorf("%s is risky but does not list the Lapse-Second-Factor header", route)
		}
		for _, status := range []string{"401", "403"} {
			if _, ok := op.Responses[status]; (want.Scope != "" || want.Session) && !ok {
				t.Errorf("%s needs a credential but does not document %s", route, status)
			}
		}
		if _, ok := op.Responses["202"]; want.Stake && !ok {
			t.Errorf("%s may wait for approval but does not document 202", route)
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
	types["HeldPayment"] = lapse.HeldPayment{}
	types["OrderRefund"] = lapse.OrderRefund{}
	types["GroupMember"] = lapse.GroupMember{}
	types["Card"] = lapse.Card{}
	types["TriggerStatus"] = engine.TriggerStatus{}
	types["Selector"] = closes.Selector{}
	types["ClosePreview"] = closes.Preview{}
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

// TestOpenAPIProblemCodes checks that Problem.code lists every lapse error
// code, and no other.
func TestOpenAPIProblemCodes(t *testing.T) {
	t.Parallel()
	doc, _ := fetchOpenAPI(t, newEnv(t))
	var code struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["Problem"].Properties["code"], &code); err != nil {
		t.Fatal(err)
	}
	want := []string{lapse.EINVALID, lapse.EUNAUTHORIZED, lapse.EFORBIDDEN, lapse.ENOTFOUND, lapse.ECONFLICT, lapse.EUNAVAILABLE, lapse.EINTERNAL}
	slices.Sort(code.Enum)
	slices.Sort(want)
	if !slices.Equal(code.Enum, want) {
		t.Errorf("Problem.code lists %v, the lapse codes are %v", code.Enum, want)
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
