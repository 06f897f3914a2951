package access

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

// Kinds of Principal, as audit rows name their actors.
const (
	KindKey      = "key"
	KindOperator = "operator"
	KindCLI      = "cli"
	// KindSystem is Lapse itself (a first start, an expiry): it acts in
	// audit rows only and is never given to a request.
	KindSystem = "system"
)

// Principal is who a request acts as: a service's API key, an operator
// (a person) or the command line.
type Principal struct {
	Kind       string // KindKey, KindOperator or KindCLI
	ID         string // the key's prefix, the operator's id (decimal), the OS user
	Name       string
	Role       string // an operator's role; "" for keys and the command line
	Scopes     []string
	OperatorID int64
	// Session is the login an operator acts through; nil otherwise.
	Session *lapse.Session
	// ClientAddr is where the request came from, when the caller knows
	// (the HTTP layer sets it); audit rows made for the principal carry it.
	ClientAddr string
	// Lang and TimeZone are an operator's console preferences (en or zh;
	// an IANA zone).
	Lang, TimeZone string
}

// Can reports whether p holds scope; ScopeAdmin implies every scope. A nil
// Principal can do nothing.
func (p *Principal) Can(scope string) bool {
	if p == nil {
		return false
	}
	return slices.Contains(p.Scopes, scope) || slices.Contains(p.Scopes, ScopeAdmin)
}

// Actor names p as CloseBatch.CreatedBy and APIKey.CreatedBy do:
// "operator:alice", "key:abcdefghijkl", "cli:root".
func (p *Principal) Actor() string {
	if p.Kind == KindOperator {
		return p.Kind + ":" + p.Name
	}
	return p.Kind + ":" + p.ID
}

// Entry returns an audit row of p doing action on target, with the actor's
// fields (ActorKind, ActorID, ActorName, Role: the role, or for keys and
// the command line the space-separated scopes) and ClientAddr filled, and
// params, when not nil, as compact JSON. The caller sets At, Result and
// the rest. Params must hold no secret.
func (p *Principal) Entry(action, target string, params any) *lapse.AuditEntry {
	role := p.Role
	if role == "" {
		role = strings.Join(p.Scopes, " ")
	}
	return &lapse.AuditEntry{
		ActorKind:  p.Kind,
		ActorID:    p.ID,
		ActorName:  p.Name,
		Role:       role,
		Action:     action,
		Target:     target,
		Params:     marshal(params),
		ClientAddr: p.ClientAddr,
	}
}

// marshal is params as compact JSON; nil when params is nil. Params are
// made by Lapse's own code, so a value that does not marshal is a bug; the
// row then says so rather than losing the action.
func marshal(params any) []byte {
	if params == nil {
		return nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"unmarshalable": fmt.Sprintf("%T", params)})
	}
	return b
}

// CLI is the command line run by the OS user user: it acts with the
// database's own credentials, so with the admin scope.
func CLI(user string) *Principal {
	return &Principal{Kind: KindCLI, ID: user, Name: user, Scopes: []string{ScopeAdmin}}
}

// system is Lapse acting by itself, for audit rows.
func system() *Principal { return &Principal{Kind: KindSystem, ID: "lapse", Name: "lapse"} }

// operatorPrincipal is the principal of operator o acting through sess.
// An unknown role (a newer version's, or a damaged row) gives no scopes.
func operatorPrincipal(o *lapse.Operator, sess *lapse.Session) *Principal {
	scopes, _ := RoleScopes(o.Role)
	return &Principal{
		Kind:       KindOperator,
		ID:         strconv.FormatInt(o.ID, 10),
		Name:       o.Name,
		Role:       o.Role,
		Scopes:     scopes,
		OperatorID: o.ID,
		Session:    sess,
		Lang:       o.Lang,
		TimeZone:   o.TimeZone,
	}
}

// requireAdmin refuses, with EFORBIDDEN, a principal without ScopeAdmin.
func requireAdmin(p *Principal, what string) error {
	if !p.Can(ScopeAdmin) {
		return lapse.Errorf(lapse.EFORBIDDEN, "%s needs the %s scope", what, ScopeAdmin)
	}
	return nil
}

// OperatorPrincipal is the operator named name as a principal without a
// session, with the role they have now: who an approved request acts as.
// A disabled operator is an EFORBIDDEN error.
func (s *Service) OperatorPrincipal(ctx context.Context, name string) (*Principal, error) {
	o, err := s.access.OperatorGet(ctx, name)
	if err != nil {
		return nil, err
	}
	if !o.DisabledAt.IsZero() {
		return nil, lapse.Errorf(lapse.EFORBIDDEN, "operator %q is disabled", name)
	}
	return operatorPrincipal(o, nil), nil
}
