package access

import (
	"slices"
	"strings"
	"unicode"

	"github.com/lapsehq/lapse"
)

// Scopes: what a key or a role may do. ScopeAdmin implies every other.
const (
	ScopeOrdersRead      = "orders:read"
	ScopeOrdersWrite     = "orders:write"
	ScopePaymentsWrite   = "payments:write"
	ScopeRefundsWrite    = "refunds:write"
	ScopeInventoryWrite  = "inventory:write"
	ScopeOperationsWrite = "operations:write" // manual closes, deliveries, reviews
	ScopeAuditRead       = "audit:read"
	ScopeMetricsRead     = "metrics:read"
	ScopeAdmin           = "admin" // keys and operators; implies every scope
)

var allScopes = []string{
	ScopeAdmin, ScopeAuditRead, ScopeInventoryWrite, ScopeMetricsRead,
	ScopeOperationsWrite, ScopeOrdersRead, ScopeOrdersWrite,
	ScopePaymentsWrite, ScopeRefundsWrite,
}

// AllScopes returns every scope, sorted.
func AllScopes() []string { return slices.Clone(allScopes) }

// ParseScopes reads scopes separated by commas and/or spaces and returns
// them deduplicated and sorted. No scope, or one that is not in AllScopes,
// is an EINVALID error about the field "scopes" that lists the valid ones.
func ParseScopes(s string) ([]string, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(fields) == 0 {
		return nil, lapse.FieldError("scopes", "give at least one of %s", strings.Join(allScopes, ", "))
	}
	for _, f := range fields {
		if !slices.Contains(allScopes, f) {
			return nil, lapse.FieldError("scopes", "unknown scope %q; the scopes are %s", lapse.CleanReason(f), strings.Join(allScopes, ", "))
		}
	}
	slices.Sort(fields)
	return slices.Compact(fields), nil
}

// Roles of operators.
const (
	RoleViewer   = "viewer"   // reads orders and the audit log
	RoleOperator = "operator" // every scope but admin
	RoleAdmin    = "admin"    // everything, managing keys and operators too
)

// RoleScopes returns the scopes of role, sorted; an unknown role is an
// EINVALID error about the field "role".
func RoleScopes(role string) ([]string, error) {
	switch role {
	case RoleViewer:
		return []string{ScopeAuditRead, ScopeOrdersRead}, nil
	case RoleOperator:
		return slices.DeleteFunc(AllScopes(), func(s string) bool { return s == ScopeAdmin }), nil
	case RoleAdmin:
		return []string{ScopeAdmin}, nil
	}
	return nil, lapse.FieldError("role", "unknown role %q; the roles are %s, %s and %s", lapse.CleanReason(role), RoleViewer, RoleOperator, RoleAdmin)
}
