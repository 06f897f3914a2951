package lapse_test

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
)

// TestAuditHashStable pins AuditHash: the rows of every existing log were
// chained with it, so that a change of its encoding would break them all.
// The row's ID is not covered: a row's place in the chain is its Seq.
func TestAuditHashStable(t *testing.T) {
	e := &lapse.AuditEntry{ID: 99, Seq: 2, At: time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC), ActorKind: "operator", ActorID: "7",
		ActorName: "alice", Role: "admin", Action: "refund.create", Target: "order:A-1", Params: []byte(`{"amount": 100}`), Result: "ok",
		Reason: "broken cup", SecondFactor: "totp", Approver: "carol", ApprovalID: 3, Batch: 4, ClientAddr: "203.0.113.7"}
	const want = "98f804ce7193100f71b0ca2f6a71b2ec9fcb96081122c16302fe2a4f53d7f966"
	if got := hex.EncodeToString(lapse.AuditHash([]byte("prev"), e)); got != want {
		t.Errorf("AuditHash = %s, want %s", got, want)
	}
	e.ID = 100
	if got := hex.EncodeToString(lapse.AuditHash([]byte("prev"), e)); got != want {
		t.Errorf("AuditHash with another ID = %s, want %s", got, want)
	}
}

func TestAuditCheckUnsealedAge(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		check lapse.AuditCheck
		want  time.Duration
	}{
		{lapse.AuditCheck{Rows: 3}, 0},
		{lapse.AuditCheck{Unsealed: 2, OldestUnsealed: now.Add(-1500 * time.Millisecond)}, 1500 * time.Millisecond},
		{lapse.AuditCheck{Unsealed: 1, OldestUnsealed: now.Add(time.Second)}, 0}, // a clock behind the row's
	} {
		if got := c.check.UnsealedAge(now); got != c.want {
			t.Errorf("%+v.UnsealedAge = %v, want %v", c.check, got, c.want)
		}
	}
	if !(&lapse.AuditEntry{Seq: 1}).Sealed() || (&lapse.AuditEntry{ID: 1}).Sealed() {
		t.Error("Sealed: want true with a Seq and false without")
	}
}
