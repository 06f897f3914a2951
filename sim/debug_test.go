package sim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/sim"
	"github.com/lapsehq/lapse/sqlite"
)

func TestDebugOrder(t *testing.T) {
	seed, _ := strconv.ParseUint(os.Getenv("DBG_SEED"), 10, 64)
	no := os.Getenv("DBG_ORDER")
	if no == "" {
		t.Skip()
	}
	ctx := context.Background()
	s, _ := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"), sqlite.Config{})
	s.Migrate(ctx)
	_, err := sim.Run(ctx, sim.Config{Seed: seed, Steps: 150, Store: s})
	t.Log(err)
	o, _ := s.OrderGet(ctx, no)
	fmt.Printf("order %+v\n", o)
	trs, _ := s.TransitionList(ctx, o.ID)
	for _, tr := range trs {
		fmt.Printf("tr %s --%s--> %s v%d %s %s %s\n", tr.FromState, tr.Event, tr.ToState, tr.Version, tr.FiredBy, tr.Reason, tr.CreatedAt.Format("15:04:05"))
	}
	refs, _ := s.OrderRefundList(ctx, o.ID)
	for _, r := range refs {
		fmt.Printf("refund %+v\n", *r)
	}
	pays, _ := s.PaymentList(ctx, &lapse.PaymentListParams{OrderID: o.ID})
	for _, p := range pays {
		fmt.Printf("pay %s %s %d %s\n", p.TxnID, p.Status, p.Amount, p.Reason)
	}
	ds, _ := s.DeliveryList(ctx, o.ID)
	for _, d := range ds {
		fmt.Printf("delivery %d %s %s %s attempts=%d\n", d.ID, d.Subscriber, d.EventType, d.Status, d.Attempts)
	}
	as, _ := s.DeliveryAttemptList(ctx, o.ID)
	for _, a := range as {
		fmt.Printf("attempt d%d #%d %s %s %s\n", a.DeliveryID, a.Attempt, a.Outcome, a.Error, a.StartedAt.Format("15:04:05"))
	}
	evs, _ := s.OutboxList(ctx, o.ID)
	for _, e := range evs {
		fmt.Printf("event %s %s\n", e.Type, e.CreatedAt.Format("15:04:05"))
	}
}
