package engine_test

import (
	"errors"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestAuditWithEffect: an audited call's row commits in the transaction of
// its effect, on every store; a call that fails or changes nothing writes
// none, and says so, so that its caller records it.
func TestAuditWithEffect(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		as := s.(lapse.AccessStore)
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, s, clk)
		ctx := ctxT(t)
		rows := func() []*lapse.AuditEntry {
			t.Helper()
			got, err := as.AuditList(ctx, &lapse.AuditListParams{})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		entry := func(action, target string) *lapse.AuditEntry {
			return &lapse.AuditEntry{ActorKind: "operator", ActorID: "1", ActorName: "alice", Role: "operator", Action: action, Target: target}
		}

		// A create: the order and its row.
		actx := engine.WithAudit(ctx, entry("order.create", "order:A-1"))
		if _, created, err := e.CreateOrder(actx, checkout("A-1", 0), app); err != nil || !created {
			t.Fatalf("CreateOrder = %v, %v", created, err)
		}
		if !engine.AuditWritten(actx) {
			t.Fatal("the create's audit row was not written with it")
		}
		if got := rows(); len(got) != 1 || got[0].Action != "order.create" || got[0].Result != "ok" || !got[0].At.Equal(t0) {
			t.Fatalf("audit rows = %+v", got)
		}

		// The same create again changes nothing: no row of its own.
		actx = engine.WithAudit(ctx, entry("order.create", "order:A-1"))
		if _, created, err := e.CreateOrder(actx, checkout("A-1", 0), app); err != nil || created {
			t.Fatalf("CreateOrder again = %v, %v", created, err)
		}
		if engine.AuditWritten(actx) || len(rows()) != 1 {
			t.Fatalf("a create that changed nothing wrote an audit row (written %v, rows %d)", engine.AuditWritten(actx), len(rows()))
		}

		// A refused event: no row.
		actx = engine.WithAudit(ctx, entry("order.fire", "order:A-1"))
		if _, err := e.Fire(actx, "A-1", engine.Fire{Event: flows.RefundDone, By: app}); err == nil {
			t.Fatal("REFUND_DONE on an unpaid order was accepted")
		}
		if engine.AuditWritten(actx) || len(rows()) != 1 {
			t.Fatal("a refused event wrote an audit row")
		}

		// A manual close: the close and its row, fired by the operator.
		actx = engine.WithAudit(ctx, entry("order.close", "order:A-1"))
		o, err := e.CloseOrder(actx, "A-1", "stuck", engine.Actor{FiredBy: lapse.FiredByOperator, Name: "operator:alice"})
		if err != nil || o.State != flows.Closed || o.FiredBy != lapse.FiredByOperator {
			t.Fatalf("CloseOrder = %+v, %v", o, err)
		}
		if !engine.AuditWritten(actx) || len(rows()) != 2 {
			t.Fatal("the close's audit row was not written with it")
		}
		// Closing again finds nothing to close.
		if _, err := e.CloseOrder(ctx, "A-1", "again", engine.Actor{FiredBy: lapse.FiredByOperator, Name: "operator:alice"}); !errors.Is(err, engine.ErrNotClosable) {
			t.Fatalf("CloseOrder of a closed order = %v, want ErrNotClosable", err)
		}
		// Both rows committed unsealed, and a sealer chains them.
		if c, err := lapse.AuditVerify(ctx, as, 10); err != nil || c.Rows != 0 || c.Unsealed != 2 || !c.OldestUnsealed.Equal(t0) {
			t.Fatalf("AuditVerify before sealing = %+v, %v; want 2 rows unsealed from %v", c, err, t0)
		}
		sealer, err := engine.NewAuditSealer(e, engine.AuditSealerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := sealer.RunOnce(ctx); n != 2 || err != nil {
			t.Fatalf("RunOnce = %d, %v; want the 2 rows sealed", n, err)
		}
		if c, err := lapse.AuditVerify(ctx, as, 10); err != nil || c.Rows != 2 || c.Unsealed != 0 {
			t.Fatalf("AuditVerify = %+v, %v", c, err)
		}
	})
}
