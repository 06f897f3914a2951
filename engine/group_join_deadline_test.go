package engine_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/payment"
)

// TestJoinPastDeadlineWithoutGuard: a group buy's deadline ends its joins,
// whatever guard its flow put on the join (a flow built in Go may leave out
// lapse.BeforeDeadline). A member who joins once the deadline has passed,
// before the claimer comes by, would be charged for a group that closed
// without them; joining at the deadline itself is as late as paying at it.
func TestJoinPastDeadlineWithoutGuard(t *testing.T) {
	f := flows.Groupbuy()
	f.Name = "groupbuy_unguarded"
	for i := range f.Transitions {
		if f.Transitions[i].Event == f.Group.Join {
			f.Transitions[i].Guard = nil
		}
	}
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sb := payment.NewSandbox(payment.SandboxConfig{Secret: []byte("s"), Clock: clk})
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": sb}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		g := create(t, e, &lapse.OrderCreate{OrderNo: "GJ-1", Flow: f.Name, UserID: "organiser", Amount: 990, Currency: "CNY", TTL: time.Hour})
		clk.Set(g.DeadlineAt.Add(-time.Microsecond))
		if _, created, err := e.JoinGroup(ctx, "GJ-1", engine.JoinRequest{UserID: "early", Method: "tok-1", By: app}); err != nil || !created {
			t.Fatalf("a join a microsecond before the deadline = %v, %v; want it joined", created, err)
		}
		for _, at := range []time.Duration{0, time.Second} {
			clk.Set(g.DeadlineAt.Add(at))
			if _, _, err := e.JoinGroup(ctx, "GJ-1", engine.JoinRequest{UserID: "late", Method: "tok-2", By: app}); lapse.ErrorCode(err) != lapse.ECONFLICT {
				t.Errorf("a join %v past the deadline = %v; want ECONFLICT", at, err)
			}
		}
		got, err := e.Group(ctx, "GJ-1")
		if err != nil || len(got.Members) != 1 {
			t.Errorf("group GJ-1 = %+v, %v; want its one member who joined in time", got, err)
		}
	})
}
