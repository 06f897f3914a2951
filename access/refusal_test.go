package access_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// TestRefusalRowIsBounded: the row of a refused action keeps parameters up
// to MaxRefusalParams as they are, and longer ones as their length and
// SHA-256, so that a caller who is refused cannot grow the audit log by a
// whole body a request.
func TestRefusalRowIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, access.Config{})
	p := &access.Principal{Kind: access.KindKey, ID: "abc", Name: "viewer", Scopes: []string{access.ScopeOrdersRead}}
	refused := lapse.Errorf(lapse.EFORBIDDEN, "needs orders:write")

	small := map[string]string{"order_no": "R-1"}
	if err := e.svc.RecordRefusal(e.ctx, p.Entry("order.create", "order:R-1", small), refused); err != nil {
		t.Fatal(err)
	}
	if got := string(e.lastAudit("order.create").Params); got != `{"order_no":"R-1"}` {
		t.Fatalf("small params kept as %s", got)
	}

	big := map[string]string{"metadata": strings.Repeat("x", 60<<10)}
	entry := p.Entry("order.create", "order:R-2", big)
	whole := entry.Params
	if err := e.svc.RecordRefusal(e.ctx, entry, refused); err != nil {
		t.Fatal(err)
	}
	row := e.lastAudit("order.create")
	if len(row.Params) > 200 || !strings.HasPrefix(row.Result, "refused: ") {
		t.Fatalf("a refusal of %d bytes of params keeps %d bytes: %.200s", len(whole), len(row.Params), row.Params)
	}
	var kept struct {
		OmittedBytes int    `json:"omitted_bytes"`
		SHA256       string `json:"sha256"`
	}
	sum := sha256.Sum256(whole)
	if err := json.Unmarshal(row.Params, &kept); err != nil || kept.OmittedBytes != len(whole) || kept.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("params kept as %s (%v), want their length %d and SHA-256", row.Params, err, len(whole))
	}
	if len(entry.Params) != len(whole) {
		t.Fatal("RecordRefusal changed its entry")
	}
}
