package access_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
)

// strand has bob approve request a as Approve does, in the store, and
// nothing after it: what a process that stopped between the approval and
// the end of its carrying out leaves behind.
func (f *four) strand(a *lapse.Approval) {
	f.t.Helper()
	if _, err := f.db.ApprovalDecide(f.ctx, &lapse.ApprovalDecideParams{ID: a.ID, From: lapse.ApprovalPending, To: lapse.ApprovalApproved,
		ApproverID: f.bob.OperatorID, ApproverName: "bob", DecidedAt: f.clock.Now()}); err != nil {
		f.t.Fatal(err)
	}
}

// actionRow records the audit row of a's action, carried out as alice,
// approved by bob, with result.
func (f *four) actionRow(a *lapse.Approval, id int64, result string) {
	f.t.Helper()
	e := f.alice.Entry(a.Action, a.Target, nil)
	e.At, e.Result, e.Approver, e.ApprovalID, e.SecondFactor = f.clock.Now(), result, "bob", id, "totp"
	if err := f.svc.Record(f.ctx, e); err != nil {
		f.t.Fatal(err)
	}
}

// TestStrandedApprovals: a request left approved by a process that
// stopped while carrying it out is settled, once it has been approved for
// StrandedAfter, by its action's audit rows: executed when the action's
// row naming it says ok, failed with the row's result when it says
// otherwise, failed when there is none (the action changed nothing); each
// with an audit row "approval.settle" of Lapse's. Rows of the same action
// for another request do not count. Reading a request, listing them, and
// SettleStranded (what lapse serve does at start) all settle.
func TestStrandedApprovals(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	done, failed, none, other := f.request(50000), f.request(60000), f.request(70000), f.request(80000)
	for _, a := range []*lapse.Approval{done, failed, none} {
		f.strand(a)
	}
	f.actionRow(done, done.ID, "ok")
	f.actionRow(failed, failed.ID, "409 conflict: the order has no payment to refund")
	f.actionRow(none, other.ID, "ok") // another request's row

	// Until StrandedAfter has passed it may still be under way.
	f.clock.Advance(access.StrandedAfter - time.Microsecond)
	if a, err := f.svc.Approval(f.ctx, done.ID); err != nil || a.Status != lapse.ApprovalApproved {
		t.Fatalf("before StrandedAfter: %+v, %v", a, err)
	}
	if n, err := f.svc.SettleStranded(f.ctx); n != 0 || err != nil {
		t.Fatalf("SettleStranded before StrandedAfter = %d, %v", n, err)
	}
	f.clock.Advance(time.Microsecond)

	a, err := f.svc.Approval(f.ctx, done.ID)
	if err != nil || a.Status != lapse.ApprovalExecuted || !strings.Contains(a.Result, "carried out") || a.ApproverName != "bob" {
		t.Fatalf("a request whose action's row says ok: %+v, %v; want executed", a, err)
	}
	list, err := f.svc.Approvals(f.ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalApproved})
	if err != nil || len(list) != 0 {
		t.Fatalf("approved after the list settled them: %v, %v", approvalIDs(list), err)
	}
	a, err = f.svc.Approval(f.ctx, failed.ID)
	if err != nil || a.Status != lapse.ApprovalFailed || !strings.Contains(a.Result, "the order has no payment to refund") {
		t.Fatalf("a request whose action's row says it failed: %+v, %v; want failed with its result", a, err)
	}
	a, err = f.svc.Approval(f.ctx, none.ID)
	if err != nil || a.Status != lapse.ApprovalFailed || !strings.Contains(a.Result, "not carried out") {
		t.Fatalf("a request with no row of its action: %+v, %v; want failed, not carried out", a, err)
	}
	rows := f.audit("approval.settle")
	if len(rows) != 3 {
		t.Fatalf("%d approval.settle rows, want 3", len(rows))
	}
	for _, row := range rows {
		if row.ActorKind != access.KindSystem || row.Result != "ok" || row.ApprovalID == 0 {
			t.Fatalf("settle row: %+v", row)
		}
	}
	// Settled once: a request executed or failed is not settled again.
	if n, err := f.svc.SettleStranded(f.ctx); n != 0 || err != nil {
		t.Fatalf("SettleStranded after = %d, %v", n, err)
	}
	// The pending one is untouched, and can still be approved.
	var r ran
	if a, err := f.svc.Approve(f.ctx, f.bob, other.ID, f.next(f.secrets["bob"]), r.execute("done", nil)); err != nil || a.Status != lapse.ApprovalExecuted {
		t.Fatalf("the pending request: %+v, %v", a, err)
	}
}

// TestSettleStrandedAtStart: SettleStranded settles every request left
// approved past StrandedAfter, and a list of the failed ones shows them.
func TestSettleStrandedAtStart(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a, b := f.request(50000), f.request(60000)
	f.strand(a)
	f.strand(b)
	f.clock.Advance(access.StrandedAfter)
	list, err := f.svc.Approvals(f.ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalFailed})
	if err != nil || len(list) != 2 {
		t.Fatalf("failed requests: %v, %v; want both settled first", approvalIDs(list), err)
	}
	if n, err := f.svc.SettleStranded(f.ctx); n != 0 || err != nil {
		t.Fatalf("SettleStranded = %d, %v; want none left", n, err)
	}

	c := f.request(70000)
	f.strand(c)
	f.clock.Advance(access.StrandedAfter)
	if n, err := f.svc.SettleStranded(f.ctx); n != 1 || err != nil {
		t.Fatalf("SettleStranded = %d, %v; want 1", n, err)
	}
	if got, _ := f.svc.Approval(f.ctx, c.ID); got.Status != lapse.ApprovalFailed {
		t.Fatalf("after SettleStranded: %+v", got)
	}
}

func approvalIDs(list []*lapse.Approval) []int64 {
	var out []int64
	for _, a := range list {
		out = append(out, a.ID)
	}
	return out
}
