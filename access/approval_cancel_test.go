package access_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/mysql"
	"github.com/lapsehq/lapse/postgres"
)

// wantCancelled fails unless request id is cancelled, naming what and who,
// with its audit row, and approving it does nothing.
func (f *four) wantCancelled(id int64, what, by string) {
	f.t.Helper()
	a, err := f.svc.Approval(f.ctx, id)
	if err != nil || a.Status != lapse.ApprovalCancelled || a.DecidedAt.IsZero() ||
		!strings.Contains(a.Result, "was "+what+" by "+by) {
		f.t.Fatalf("request %d: %+v, %v; want it cancelled (%s by %s)", id, a, err, what, by)
	}
	found := false
	for _, row := range f.audit("approval.cancel") {
		if row.ApprovalID == id {
			found = true
			if row.Result != "ok" || row.ActorKind+":"+row.ActorID != by || params(f.t, row)["because"] != what {
				f.t.Fatalf("cancel row: %+v %s", row, row.Params)
			}
		}
	}
	if !found {
		f.t.Fatalf("no approval.cancel row of request %d", id)
	}
	var r ran
	_, err = f.svc.Approve(f.ctx, f.bob, id, f.next(f.secrets["bob"]), r.execute("ok", nil))
	wantErr(f.t, err, lapse.ECONFLICT, "cancelled, not pending")
	if r.n.Load() != 0 {
		f.t.Fatal("a cancelled request was carried out")
	}
}

// TestResetCancelsApprovals: a reset ends the operator's sessions and
// cancels the requests they made that are pending, and no one else's;
// those decided already stay as they are.
func TestResetCancelsApprovals(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	mine, mine2 := f.request(50000), f.request(60000)
	decided := f.request(70000)
	if _, err := f.svc.Reject(f.ctx, f.bob, decided.ID, "no"); err != nil {
		t.Fatal(err)
	}
	theirs, err := f.svc.RequestApproval(f.ctx, f.bob, &lapse.Approval{Action: "refund.create", Target: "order:B-1", Amount: 9}, "totp")
	if err != nil {
		t.Fatal(err)
	}

	if _, _, err := f.svc.ResetOperator(f.ctx, f.root, "alice", ""); err != nil {
		t.Fatal(err)
	}
	f.wantCancelled(mine.ID, "reset", "cli:root")
	f.wantCancelled(mine2.ID, "reset", "cli:root")
	if a, _ := f.svc.Approval(f.ctx, decided.ID); a.Status != lapse.ApprovalRejected {
		t.Fatalf("a rejected request: %+v", a)
	}
	if a, _ := f.svc.Approval(f.ctx, theirs.ID); a.Status != lapse.ApprovalPending {
		t.Fatalf("bob's request: %+v", a)
	}
	if p := params(t, f.lastAudit("operator.reset")); p["approvals_cancelled"] != float64(2) {
		t.Fatalf("reset row: %v", p)
	}
	// The session alice made them through is over: she asks nothing more
	// with it.
	_, err = f.svc.RequestApproval(f.ctx, f.alice, &lapse.Approval{Action: "refund.create", Amount: 1}, "totp")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
}

// TestDisableCancelsApprovals: a disabled operator's pending requests are
// cancelled with the disable, and a request they make, or decide, through
// a session let in before the disable changes nothing.
func TestDisableCancelsApprovals(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	mine := f.request(50000)
	theirs, err := f.svc.RequestApproval(f.ctx, f.carol, &lapse.Approval{Action: "refund.create", Target: "order:C-1", Amount: 9}, "totp")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.DisableOperator(f.ctx, f.root, "alice"); err != nil {
		t.Fatal(err)
	}
	f.wantCancelled(mine.ID, "disabled", "cli:root")
	if p := params(t, f.lastAudit("operator.disable")); p["approvals_cancelled"] != float64(1) {
		t.Fatalf("disable row: %v", p)
	}
	_, err = f.svc.RequestApproval(f.ctx, f.alice, &lapse.Approval{Action: "refund.create", Amount: 1}, "totp")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")

	// bob, disabled after his request was let in (his principal in hand),
	// neither approves nor rejects.
	if _, _, err := f.svc.DisableOperator(f.ctx, f.root, "bob"); err != nil {
		t.Fatal(err)
	}
	var r ran
	_, err = f.svc.Approve(f.ctx, f.bob, theirs.ID, f.next(f.secrets["bob"]), r.execute("ok", nil))
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	_, err = f.svc.Reject(f.ctx, f.bob, theirs.ID, "no")
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	if a, _ := f.svc.Approval(f.ctx, theirs.ID); a.Status != lapse.ApprovalPending || r.n.Load() != 0 {
		t.Fatalf("carol's request after a disabled approver: %+v, ran %d", a, r.n.Load())
	}
}

// TestLoggedOutApproverDecidesNothing: an approver logged out everywhere,
// whose second factor is still fresh in the principal let in before,
// decides nothing.
func TestLoggedOutApproverDecidesNothing(t *testing.T) {
	t.Parallel()
	f := newFour(t, access.Config{})
	a := f.request(50000)
	if err := f.svc.VerifySecondFactor(f.ctx, f.bob, f.next(f.secrets["bob"])); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.EndOperatorSessions(f.ctx, f.root, "bob"); err != nil {
		t.Fatal(err)
	}
	var r ran
	_, err := f.svc.Approve(f.ctx, f.bob, a.ID, "", r.execute("ok", nil))
	wantErr(t, err, lapse.EUNAUTHORIZED, "")
	if got, _ := f.svc.Approval(f.ctx, a.ID); got.Status != lapse.ApprovalPending || r.n.Load() != 0 {
		t.Fatalf("after a logged-out approver: %+v, ran %d", got, r.n.Load())
	}
}

// TestDisableRacesRequests: an operator's requests for approval made while
// they are disabled, on PostgreSQL and MySQL, where the two run side by
// side: each request either goes in before the disable, which cancels it,
// or is refused; none is left pending for a disabled operator.
func TestDisableRacesRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type store interface {
		lapse.Store
		Migrate(context.Context) error
	}
	for name, open := range map[string]func(t *testing.T) (store, error){
		"postgres": func(t *testing.T) (store, error) {
			return postgres.Open(ctx, testenv.PostgresSchema(t), postgres.Config{})
		},
		"mysql": func(t *testing.T) (store, error) {
			return mysql.Open(ctx, testenv.MySQLDatabase(t), mysql.Config{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, err := open(t)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if err := db.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			disableRacesRequests(t, db)
		})
	}
}

func disableRacesRequests(t *testing.T, db lapse.Store) {
	ctx := context.Background()
	svc, err := access.New(db, access.Config{HashParams: fastHash})
	if err != nil {
		t.Fatal(err)
	}
	root := access.CLI("root")
	if _, _, err := svc.AddOperator(ctx, root, "alice", access.RoleOperator, ""); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		alice, err := svc.OperatorPrincipal(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 5 {
				_, err := svc.RequestApproval(ctx, alice, &lapse.Approval{Action: "refund.create", Target: "order:R", Amount: 1}, "totp")
				if err != nil && lapse.ErrorCode(err) != lapse.EUNAUTHORIZED {
					t.Errorf("round %d: RequestApproval: %v", round, err)
				}
			}
		})
		wg.Go(func() {
			if _, _, err := svc.DisableOperator(ctx, root, "alice"); err != nil {
				t.Errorf("round %d: DisableOperator: %v", round, err)
			}
		})
		wg.Wait()
		pending, err := svc.Approvals(ctx, &lapse.ApprovalListParams{Status: lapse.ApprovalPending})
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != 0 {
			t.Fatalf("round %d: %d requests of a disabled operator pending: %+v", round, len(pending), pending[0])
		}
		if _, _, err := svc.EnableOperator(ctx, root, "alice"); err != nil {
			t.Fatal(err)
		}
	}
}
