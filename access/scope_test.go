package access_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

func TestParseScopes(t *testing.T) {
	t.Parallel()
	got, err := access.ParseScopes(" orders:write,orders:read  orders:write ,, refunds:write\tadmin")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"admin", "orders:read", "orders:write", "refunds:write"}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseScopes = %v, want %v", got, want)
	}
	for _, bad := range []string{"", " , ", "orders:read,orders:delete", "ADMIN"} {
		_, err := access.ParseScopes(bad)
		wantErr(t, err, lapse.EINVALID, "orders:read")
		var le *lapse.Error
		if !asError(err, &le) || le.Field != "scopes" {
			t.Fatalf("ParseScopes(%q): %v, want a scopes field error", bad, err)
		}
		for _, s := range access.AllScopes() {
			if !strings.Contains(le.Message, s) {
				t.Fatalf("ParseScopes(%q): %q does not list %s", bad, le.Message, s)
			}
		}
	}
	all, err := access.ParseScopes(strings.Join(access.AllScopes(), " "))
	if err != nil || !slices.Equal(all, access.AllScopes()) || !slices.IsSorted(all) || len(all) != 9 {
		t.Fatalf("AllScopes round trip: %v, %v", all, err)
	}
}

func TestRoleScopes(t *testing.T) {
	t.Parallel()
	for role, want := range map[string][]string{
		access.RoleViewer: {access.ScopeAuditRead, access.ScopeOrdersRead},
		access.RoleAdmin:  {access.ScopeAdmin},
		access.RoleOperator: {access.ScopeAuditRead, access.ScopeInventoryWrite, access.ScopeMetricsRead,
			access.ScopeOperationsWrite, access.ScopeOrdersRead, access.ScopeOrdersWrite,
			access.ScopePaymentsWrite, access.ScopeRefundsWrite},
	} {
		got, err := access.RoleScopes(role)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("RoleScopes(%s) = %v, %v; want %v", role, got, err, want)
		}
	}
	_, err := access.RoleScopes("root")
	wantErr(t, err, lapse.EINVALID, "viewer")
}

func TestPrincipalCan(t *testing.T) {
	t.Parallel()
	viewer := &access.Principal{Kind: access.KindOperator, Scopes: []string{access.ScopeAuditRead, access.ScopeOrdersRead}}
	if !viewer.Can(access.ScopeOrdersRead) || viewer.Can(access.ScopeRefundsWrite) || viewer.Can(access.ScopeAdmin) {
		t.Fatal("viewer's scopes")
	}
	for _, s := range access.AllScopes() {
		if !access.CLI("root").Can(s) {
			t.Fatalf("the command line cannot %s", s)
		}
	}
	var none *access.Principal
	if none.Can(access.ScopeOrdersRead) {
		t.Fatal("a nil principal can read")
	}
}

func TestPrincipalEntry(t *testing.T) {
	t.Parallel()
	key := &access.Principal{Kind: access.KindKey, ID: "abcdefghijkl", Name: "shop", Scopes: []string{"orders:read", "orders:write"}, ClientAddr: "192.0.2.7"}
	e := key.Entry("refund.create", "order:A-1", map[string]any{"amount": 100, "note": "a b"})
	if e.ActorKind != "key" || e.ActorID != "abcdefghijkl" || e.ActorName != "shop" || e.Role != "orders:read orders:write" ||
		e.Action != "refund.create" || e.Target != "order:A-1" || e.ClientAddr != "192.0.2.7" {
		t.Fatalf("entry: %+v", e)
	}
	if string(e.Params) != `{"amount":100,"note":"a b"}` {
		t.Fatalf("params %s", e.Params)
	}
	if got := key.Entry("x", "y", json.RawMessage("{ \"a\" :  1 }")).Params; string(got) != `{"a":1}` {
		t.Fatalf("raw params %s", got)
	}
	op := &access.Principal{Kind: access.KindOperator, ID: "7", Name: "alice", Role: "operator", Scopes: []string{"orders:read"}}
	if e := op.Entry("login", "", nil); e.Role != "operator" || e.Params != nil || e.ActorID != "7" {
		t.Fatalf("operator entry: %+v", e)
	}
	cli := access.CLI("root")
	if e := cli.Entry("order.close", "order:A-1", nil); e.ActorKind != "cli" || e.ActorID != "root" || e.Role != "admin" {
		t.Fatalf("cli entry: %+v", e)
	}
	if op.Actor() != "operator:alice" || cli.Actor() != "cli:root" || key.Actor() != "key:abcdefghijkl" {
		t.Fatalf("actors %s %s %s", op.Actor(), cli.Actor(), key.Actor())
	}
}
