package closes_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// shop is a user's flow (README, Custom flows): checkout, but a paid order
// gives its merchant 48 hours to ship before it is refunded
// (examples/flows/auto_refund.yaml), and an order under a fraud check
// (CHECK) goes to a person an hour later, who closes it. Only UNPAID's deadline is a lapse
// of payment that ends the order.
func shop() *lapse.Flow {
	return &lapse.Flow{
		Name:    "shop",
		Initial: "UNPAID",
		States: []lapse.StateSpec{
			{Name: "UNPAID", Deadline: &lapse.Deadline{After: 15 * time.Minute, Event: "TIMEOUT"}},
			{Name: "PAID", Deadline: &lapse.Deadline{After: 48 * time.Hour, Event: "AUTO_REFUND"}},
			{Name: "CHECKING", Deadline: &lapse.Deadline{After: time.Hour, Event: "ESCALATE"}},
			{Name: "REVIEW"},
			{Name: "SHIPPED", Terminal: true},
			{Name: "CLOSED", Terminal: true},
			{Name: "REFUNDED", Terminal: true},
		},
		Events: []lapse.EventSpec{
			{Name: "PAY", Internal: true}, {Name: "TIMEOUT", Internal: true}, {Name: "AUTO_REFUND", Internal: true},
			{Name: "CHECK"}, {Name: "ESCALATE", Internal: true}, {Name: "SHIP"}, {Name: "RESOLVE"},
		},
		Transitions: []lapse.Transition{
			{From: "UNPAID", Event: "PAY", To: "PAID", Guard: lapse.BeforeDeadline, Emits: []string{"order.paid"}},
			{From: "UNPAID", Event: "TIMEOUT", To: "CLOSED", Emits: []string{"order.closed"}},
			{From: "UNPAID", Event: "CHECK", To: "CHECKING", Emits: []string{"order.checking"}},
			{From: "CHECKING", Event: "ESCALATE", To: "REVIEW", Emits: []string{"order.review"}},
			{From: "REVIEW", Event: "RESOLVE", To: "CLOSED", Emits: []string{"order.closed"}},
			{From: "PAID", Event: "SHIP", To: "SHIPPED", Emits: []string{"order.shipped"}},
			{From: "PAID", Event: "AUTO_REFUND", To: "REFUNDED", Emits: []string{"order.auto_refund"}},
		},
		Pays: "PAY",
	}
}

// newShopEnv is newEnv with the shop flow beside the built-in ones.
func newShopEnv(t *testing.T) *env {
	t.Helper()
	return newFlowEnv(t, shop())
}

// newFlowEnv is newEnv with f beside the built-in flows.
func newFlowEnv(t *testing.T, f *lapse.Flow) *env {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk := lapse.NewManualClock(t0)
	e, err := engine.New(s, append(flows.Builtin(), f), engine.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	c, err := closes.New(e, s)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, clk: clk, s: s, e: e, c: c}
}

// shopOrder creates an unpaid shop order of user.
func (v *env) shopOrder(no, user string) {
	v.t.Helper()
	if _, _, err := v.e.CreateOrder(ctxT(v.t), &lapse.OrderCreate{OrderNo: no, Flow: "shop", UserID: user,
		Amount: 1000, Currency: "CNY"}, app); err != nil {
		v.t.Fatal(err)
	}
}

func (v *env) state(no string) lapse.State {
	v.t.Helper()
	o, err := v.e.Order(ctxT(v.t), no)
	if err != nil {
		v.t.Fatal(err)
	}
	return o.State
}

// TestCloseLeavesWhatPaymentOrAPersonAwaits: a manual close ends only
// orders whose payment window it cuts short. A paid order whose state has
// a deadline of its own (a merchant's time to ship) is not chosen, and an
// order chosen unpaid that was paid, or moved to a state whose deadline
// does not end it, before the batch came to it is skipped, not moved on by
// that state's deadline.
func TestCloseLeavesWhatPaymentOrAPersonAwaits(t *testing.T) {
	t.Parallel()
	v := newShopEnv(t)
	ctx := ctxT(t)
	for _, no := range []string{"S-1", "S-2", "S-3", "S-4"} {
		v.shopOrder(no, "u1")
	}
	v.pay("S-4")
	pv, err := v.c.Preview(ctx, &closes.Selector{UserID: "u1"})
	if err != nil || pv.Count != 3 || pv.Skipped != 1 {
		t.Fatalf("Preview = %+v, %v; want the 3 unpaid orders, the paid one left", pv, err)
	}

	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "outage", alice, nil, nil)
	if err != nil || b.Total != 3 {
		t.Fatalf("Start = %+v, %v", b, err)
	}
	v.pay("S-2")
	if _, err := v.e.Fire(ctx, "S-3", engine.Fire{Event: "CHECK", By: app}); err != nil {
		t.Fatal(err)
	}
	done, err := v.c.Run(ctx, b.ID, alice, nil)
	if err != nil || done.Closed != 1 || done.Skipped != 2 {
		t.Errorf("Run = %+v, %v; want S-1 closed, S-2 and S-3 skipped", done, err)
	}
	for no, want := range map[string]lapse.State{"S-1": "CLOSED", "S-2": "PAID", "S-3": "CHECKING", "S-4": "PAID"} {
		if got := v.state(no); got != want {
			t.Errorf("%s is %s after the close, want %s", no, got, want)
		}
	}
	items := v.items(b.ID)
	for _, no := range []string{"S-2", "S-3"} {
		if it := items[no]; it == nil || it.Status != lapse.CloseItemSkipped || it.Detail == "" {
			t.Errorf("item %s = %+v, want skipped with a reason", no, it)
		}
	}
}

// gate is a user's flow whose orders wait at a gate (WAITING, no deadline:
// no manual close ends them) until OPEN lets them wait for payment
// (UNPAID, which one does), and which an order waiting for payment may
// leave for ON_HOLD, where no close ends it either.
func gate() *lapse.Flow {
	return &lapse.Flow{
		Name:    "gate",
		Initial: "WAITING",
		States: []lapse.StateSpec{
			{Name: "WAITING"},
			{Name: "UNPAID", Deadline: &lapse.Deadline{After: 15 * time.Minute, Event: "TIMEOUT"}},
			{Name: "ON_HOLD"},
			{Name: "PAID", Terminal: true},
			{Name: "CLOSED", Terminal: true},
		},
		Events: []lapse.EventSpec{
			{Name: "OPEN"}, {Name: "HOLD"}, {Name: "DROP"}, {Name: "PAY", Internal: true}, {Name: "TIMEOUT", Internal: true},
		},
		Transitions: []lapse.Transition{
			{From: "WAITING", Event: "OPEN", To: "UNPAID", Emits: []string{"order.opened"}},
			{From: "UNPAID", Event: "HOLD", To: "ON_HOLD", Emits: []string{"order.held"}},
			{From: "UNPAID", Event: "PAY", To: "PAID", Guard: lapse.BeforeDeadline, Emits: []string{"order.paid"}},
			{From: "UNPAID", Event: "TIMEOUT", To: "CLOSED", Emits: []string{"order.closed"}},
			{From: "WAITING", Event: "DROP", To: "CLOSED", Emits: []string{"order.closed"}},
			{From: "ON_HOLD", Event: "DROP", To: "CLOSED", Emits: []string{"order.closed"}},
		},
		Pays: "PAY",
	}
}

// TestStartClosesOnlyWhatThePreviewShowed: a close confirmed from a
// preview closes none of the orders the preview did not show, also when
// it is within the preview's count: an order made before the preview that
// became closable only after it (let through a gate) is left alone, as is
// one that moved at all since, and, with no order left that the preview
// showed, nothing is closed. So is a close carried out for an approval.
func TestStartClosesOnlyWhatThePreviewShowed(t *testing.T) {
	t.Parallel()
	v := newFlowEnv(t, gate())
	ctx := ctxT(t)
	for _, no := range []string{"G-1", "G-2"} {
		if _, _, err := v.e.CreateOrder(ctx, &lapse.OrderCreate{OrderNo: no, Flow: "gate", UserID: "u9", Amount: 1000, Currency: "CNY"}, app); err != nil {
			t.Fatal(err)
		}
	}
	fire := func(no string, ev lapse.Event) {
		t.Helper()
		if _, err := v.e.Fire(ctx, no, engine.Fire{Event: ev, By: app}); err != nil {
			t.Fatal(err)
		}
	}
	fire("G-1", "OPEN")
	sel := &closes.Selector{UserID: "u9"}
	pv, err := v.c.Preview(ctx, sel)
	if err != nil || pv.Count != 1 || pv.Skipped != 1 || pv.Sample[0].OrderNo != "G-1" {
		t.Fatalf("Preview = %+v, %v; want G-1 to close, G-2 not", pv, err)
	}
	approved := &lapse.Approval{ID: 9, Count: 1, CreatedAt: v.clk.Now()}
	v.clk.Advance(time.Second)
	fire("G-1", "HOLD") // what the preview showed is closable no more
	fire("G-2", "OPEN") // what it did not show is closable now

	for _, c := range []struct {
		name     string
		approved *lapse.Approval
		pv       *closes.Preview
	}{{"previewed", nil, pv}, {"approved", approved, nil}} {
		b, err := v.c.Start(ctx, sel, "outage", alice, c.approved, c.pv)
		if err == nil {
			t.Errorf("%s: Start made batch %+v of %v; want nothing closed", c.name, b, v.items(b.ID))
			continue
		}
		if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(lapse.ErrorMessage(err), "changed since") {
			t.Errorf("%s: Start = %v, want a conflict saying the orders changed since", c.name, err)
		}
	}
	if st := v.state("G-2"); st != "UNPAID" {
		t.Errorf("G-2 is %s, want UNPAID: no close showed it", st)
	}
}
