package access_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// TestApprovalExpiresOnTwoNodes: two processes look at a request past its
// ExpiresAt at once (two operators' approvals pages, on two nodes), and
// each moves it to expired. The one that commits second found it pending
// and then stale: its look failed with ErrStale, the page an error, though
// the request is expired as it meant it to be. It is answered with the
// request as the other left it, and the log has one "approval.expire".
func TestApprovalExpiresOnTwoNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := postgres.Open(ctx, testenv.PostgresSchema(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	if err := pg.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	hs := &hookStore{Store: pg}
	e := &env{t: t, ctx: ctx, clock: lapse.NewManualClock(start), root: access.CLI("root")}
	e.svc = e.service(hs, access.Config{ApprovalTTL: time.Hour})
	other := e.service(pg, access.Config{ApprovalTTL: time.Hour}) // the other node
	_, secret := e.addOperator("alice", access.RoleOperator)
	_, alice := e.login("alice", secret)
	request := func() *lapse.Approval {
		t.Helper()
		a, err := e.svc.RequestApproval(ctx, alice, &lapse.Approval{Action: "refund.create", Target: "order:A-1",
			Amount: 100, Currency: "EUR", Request: []byte(`{"amount":100}`), Reason: "customer asked"}, "totp")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a, b := request(), request()
	e.clock.Set(b.ExpiresAt)

	// The other node expires the request after this one read it pending
	// and before it moves it.
	var raced int
	hs.decide = func(ctx context.Context) {
		raced++
		id := ctx.Value(hookKey{}).(int64)
		if got, err := other.Approval(ctx, id); err != nil || got.Status != lapse.ApprovalExpired {
			t.Errorf("the other node: %+v, %v", got, err)
		}
	}
	got, err := e.svc.Approval(context.WithValue(ctx, hookKey{}, a.ID), a.ID)
	if err != nil || got.Status != lapse.ApprovalExpired {
		t.Fatalf("Approval past ExpiresAt, expired meanwhile by another node: %+v, %v", got, err)
	}
	list, err := e.svc.Approvals(context.WithValue(ctx, hookKey{}, b.ID), nil)
	if err != nil || len(list) != 2 || list[0].Status != lapse.ApprovalExpired || list[1].Status != lapse.ApprovalExpired {
		t.Fatalf("Approvals past ExpiresAt, one expired meanwhile by another node: %+v, %v", list, err)
	}
	if raced != 2 {
		t.Fatalf("the other node raced %d times, want 2", raced)
	}
	rows, err := pg.AuditList(ctx, &lapse.AuditListParams{Action: "approval.expire"})
	if err != nil || len(rows) != 2 || rows[0].ApprovalID == rows[1].ApprovalID {
		t.Fatalf("approval.expire rows: %+v, %v; want one for each request", rows, err)
	}
}
