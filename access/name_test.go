package access_test

import (
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestOperatorNamesDifferInMoreThanCase: an operator whose name differs
// from another's only in case (" Alice " beside alice) is refused: the audit
// log and the approvals page would read them as one. Both were added.
func TestOperatorNamesDifferInMoreThanCase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	e.addOperator("alice", access.RoleOperator)
	for _, name := range []string{"Alice", " ALICE ", "alice"} {
		_, _, err := e.svc.AddOperator(e.ctx, e.root, name, access.RoleViewer, "")
		wantErr(t, err, lapse.ECONFLICT, `an operator named "alice" exists`)
	}
	e.addOperator("alicia", access.RoleViewer)
}
