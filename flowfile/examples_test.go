package flowfile_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
	"github.com/lapsehq/lapse/sqlite"
)

// exampleEngine runs the example flows on a fresh SQLite store with a
// manual clock.
func exampleEngine(t *testing.T) (*engine.Engine, *engine.Claimer, *lapse.ManualClock) {
	t.Helper()
	fs, err := flowfile.LoadDir("../examples/flows")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Name != "auto_confirm" || fs[1].Name != "auto_refund" {
		t.Fatalf("examples: %v", fs)
	}
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clk := lapse.NewManualClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
	e, err := engine.New(s, fs, engine.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return e, engine.NewClaimer(e, engine.ClaimerConfig{}), clk
}

var shop = engine.Actor{FiredBy: lapse.FiredByAPI, Name: "shop"}

// exampleOrder creates an order of flow and fires events at it, as the
// shop's backend would through the API.
func exampleOrder(t *testing.T, e *engine.Engine, orderNo, flow string, events ...lapse.Event) {
	t.Helper()
	ctx := context.Background()
	req := &lapse.OrderCreate{OrderNo: orderNo, Flow: flow, UserID: "u1", Amount: 4900, Currency: "CNY"}
	if _, created, err := e.CreateOrder(ctx, req, shop); err != nil || !created {
		t.Fatalf("CreateOrder(%s) = %v, %v", orderNo, created, err)
	}
	for _, ev := range events {
		if _, err := e.Fire(ctx, orderNo, engine.Fire{Event: ev, By: shop, External: true}); err != nil {
			t.Fatalf("%s: firing %s: %v", orderNo, ev, err)
		}
	}
}

// wantOrder checks an order's state, who moved it last, that it entered
// its state exactly once, and how many outbox events of typ it has.
func wantOrder(t *testing.T, e *engine.Engine, orderNo string, state lapse.State, by lapse.FiredBy, typ string, n int) {
	t.Helper()
	ctx := context.Background()
	o, err := e.Order(ctx, orderNo)
	if err != nil {
		t.Fatal(err)
	}
	trs, err := e.Transitions(ctx, orderNo)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := e.Events(ctx, orderNo)
	if err != nil {
		t.Fatal(err)
	}
	into, emitted := 0, 0
	for _, tr := range trs {
		if tr.ToState == state {
			into++
		}
	}
	for _, ev := range evs {
		if ev.Type == typ {
			emitted++
		}
	}
	last := trs[len(trs)-1]
	if o.State != state || o.FiredBy != by || last.FiredBy != by || into != 1 || emitted != n {
		t.Errorf("%s: %s fired by %s (log: %s by %s), %d transitions into %s, %d %s events; want %s by %s, 1, %d",
			orderNo, o.State, o.FiredBy, last.ToState, last.FiredBy, into, state, emitted, typ, state, by, n)
	}
}

func TestExampleAutoConfirm(t *testing.T) {
	t.Parallel()
	e, c, clk := exampleEngine(t)
	ctx := context.Background()
	exampleOrder(t, e, "AC-lapsed", "auto_confirm", "SHIP")
	exampleOrder(t, e, "AC-confirmed", "auto_confirm", "SHIP", "CONFIRM")
	exampleOrder(t, e, "AC-returned", "auto_confirm", "SHIP", "RETURN")
	exampleOrder(t, e, "AC-unshipped", "auto_confirm")
	// The buyer may not confirm for the deadline engine.
	if _, err := e.Fire(ctx, "AC-lapsed", engine.Fire{Event: "AUTO_CONFIRM", By: shop, External: true}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("firing AUTO_CONFIRM through the API: %v", err)
	}

	clk.Advance(7*24*time.Hour - time.Second)
	if n, err := c.RunOnce(ctx); n != 0 || err != nil {
		t.Fatalf("RunOnce a second before 7 days fired %d, %v", n, err)
	}
	clk.Advance(2 * time.Second)
	if n, err := c.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("RunOnce after 7 days fired %d, %v; want 1", n, err)
	}
	if n, err := c.RunOnce(ctx); n != 0 || err != nil {
		t.Fatalf("second RunOnce fired %d, %v", n, err)
	}
	wantOrder(t, e, "AC-lapsed", "CONFIRMED", lapse.FiredByTimer, "order.confirmed", 1)
	wantOrder(t, e, "AC-confirmed", "CONFIRMED", lapse.FiredByAPI, "order.confirmed", 1)
	wantOrder(t, e, "AC-returned", "RETURNING", lapse.FiredByAPI, "order.confirmed", 0)
	wantOrder(t, e, "AC-unshipped", "PAID", lapse.FiredByAPI, "order.shipped", 0)
	if o, _ := e.Order(ctx, "AC-lapsed"); o.CloseReason != "AUTO_CONFIRM" || o.ClosedAt == nil || !o.ClosedAt.Equal(clk.Now()) {
		t.Errorf("auto-confirmed order: %+v", o)
	}
}

func TestExampleAutoRefund(t *testing.T) {
	t.Parallel()
	e, c, clk := exampleEngine(t)
	ctx := context.Background()
	exampleOrder(t, e, "AR-lapsed", "auto_refund")
	exampleOrder(t, e, "AR-cancelled", "auto_refund", "CANCEL")
	clk.Advance(47 * time.Hour)
	exampleOrder(t, e, "AR-shipped", "auto_refund", "SHIP")
	exampleOrder(t, e, "AR-late-order", "auto_refund") // due 48 h after its own creation

	clk.Advance(time.Hour + time.Second)
	if n, err := c.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("RunOnce after 48 hours fired %d, %v; want 1", n, err)
	}
	wantOrder(t, e, "AR-lapsed", "REFUNDED", lapse.FiredByTimer, "order.auto_refund", 1)
	wantOrder(t, e, "AR-cancelled", "REFUNDED", lapse.FiredByAPI, "order.auto_refund", 0)
	wantOrder(t, e, "AR-shipped", "SHIPPED", lapse.FiredByAPI, "order.auto_refund", 0)
	wantOrder(t, e, "AR-late-order", "PAID", lapse.FiredByAPI, "order.auto_refund", 0)
	// Shipping too late is refused: the order was refunded.
	if _, err := e.Fire(ctx, "AR-lapsed", engine.Fire{Event: "SHIP", By: shop, External: true}); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("shipping a refunded order: %v", err)
	}

	clk.Advance(47 * time.Hour)
	if n, err := c.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("RunOnce 48 hours after the late order fired %d, %v; want 1", n, err)
	}
	wantOrder(t, e, "AR-late-order", "REFUNDED", lapse.FiredByTimer, "order.auto_refund", 1)
	wantOrder(t, e, "AR-lapsed", "REFUNDED", lapse.FiredByTimer, "order.auto_refund", 1)
}
