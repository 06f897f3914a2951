package http_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goConstants returns the string values of the constants declared in the
// Go files (tests aside) of package directory dir that are of type typ, or,
// when typ is empty, untyped and named by the pattern name.
func goConstants(t *testing.T, dir, typ string, name *regexp.Regexp) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, _ := vs.Type.(*ast.Ident)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					switch {
					case typ != "" && (id == nil || id.Name != typ):
						continue
					case typ == "" && (vs.Type != nil || !name.MatchString(n.Name)):
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no constants of %s%v in %s", typ, name, dir)
	}
	return out
}

// jsonAt returns the value at JSON pointer ptr of doc (~1 for /).
func jsonAt(t *testing.T, doc any, ptr string) any {
	t.Helper()
	v := doc
	for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch n := v.(type) {
		case map[string]any:
			v = n[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i >= len(n) {
				t.Fatalf("%s: no element %s", ptr, part)
			}
			v = n[i]
		default:
			t.Fatalf("%s: no %s", ptr, part)
		}
	}
	if v == nil {
		t.Fatalf("the document has nothing at %s", ptr)
	}
	return v
}

// TestOpenAPIEnums: every enum of the document that lists Go constants
// lists exactly the values of those constants, so that a new fired_by path,
// error code or status cannot be left out of it.
func TestOpenAPIEnums(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	const (
		root   = ".."
		access = "../access"
		eng    = "../engine"
	)
	for _, tc := range []struct {
		enums []string // JSON pointers to the enums' schemas
		dir   string   // the package of the constants
		typ   string   // their type; "" for untyped ones named by name
		name  *regexp.Regexp
	}{
		{[]string{"/components/schemas/FiredBy"}, root, "FiredBy", nil},
		{[]string{"/components/schemas/Problem/properties/code"}, root, "", regexp.MustCompile(`^E[A-Z]+$`)},
		{[]string{"/components/schemas/Delivery/properties/status"}, root, "DeliveryStatus", nil},
		{[]string{"/components/schemas/DeliveryAttempt/properties/outcome"}, root, "", regexp.MustCompile(`^Outcome[A-Z]`)},
		{[]string{"/components/schemas/Payment/properties/status"}, root, "PaymentStatus", nil},
		{[]string{"/components/schemas/HeldPayment/properties/status", "/paths/~1v1~1held-payments/get/parameters/0/schema"}, root, "HeldPaymentStatus", nil},
		{[]string{"/components/schemas/OrderRefund/properties/status"}, root, "OrderRefundStatus", nil},
		{[]string{"/components/schemas/GroupMember/properties/status"}, root, "ChargeStatus", nil},
		{[]string{"/components/schemas/Card/properties/status"}, root, "CardStatus", nil},
		{[]string{"/components/schemas/Coupon/properties/status"}, root, "CouponStatus", nil},
		{[]string{"/components/schemas/CouponMove/properties/kind"}, root, "CouponMoveKind", nil},
		{[]string{"/components/schemas/Approval/properties/status", "/paths/~1v1~1approvals/get/parameters/0/schema"}, root, "ApprovalStatus", nil},
		{[]string{"/components/schemas/CloseBatch/properties/status", "/paths/~1v1~1closes/get/parameters/0/schema"}, root, "CloseBatchStatus", nil},
		{[]string{"/components/schemas/Session/properties/role"}, access, "", regexp.MustCompile(`^Role[A-Z]`)},
		{[]string{"/components/schemas/TriggerStatus/properties/mode", "/components/schemas/TriggerRequest/properties/mode"}, eng, "TriggerMode", nil},
		{[]string{"/components/schemas/ProbeRun/properties/failed_step", "/components/schemas/ProbeStep/properties/name"}, eng, "", regexp.MustCompile(`^ProbeStep[A-Z]`)},
		{[]string{"/components/schemas/ProbeRun/properties/result"}, eng, "", regexp.MustCompile(`^Probe(OK|Failed)$`)},
	} {
		want := goConstants(t, tc.dir, tc.typ, tc.name)
		slices.Sort(want)
		for _, ptr := range tc.enums {
			schema, _ := jsonAt(t, doc, ptr).(map[string]any)
			list, _ := schema["enum"].([]any)
			var got []string
			for _, v := range list {
				s, _ := v.(string)
				got = append(got, s)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s: enum %q, want the constants %q", ptr, got, want)
			}
		}
	}
}
