package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// testOrderCountOpen: the open orders by flow and state, with how many of
// them have a deadline and how many have items or a coupon; ended orders
// are left out.
func testOrderCountOpen(t *testing.T, s lapse.Store) {
	if got, err := s.OrderCountOpen(ctxT(t)); err != nil || len(got) != 0 {
		t.Fatalf("OrderCountOpen of no orders = %+v, %v", got, err)
	}
	var orders []*lapse.Order
	for i := range 5 {
		p := newOrder(orderNo("C", i), base.Add(time.Hour), base)
		switch i {
		case 3: // a coupon and no items
			p.Order.Items, p.Order.Coupon = nil, "CP-"+orderNo("C", i)
		case 4: // neither
			p.Order.Items = nil
		}
		o, _, err := s.OrderCreate(ctxT(t), p)
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, o)
	}
	g := newOrder("G-1", base.Add(time.Hour), base)
	g.Order.Flow, g.Order.State, g.Order.DeadlineAt, g.Order.Items = "groupbuy", flows.GroupOpen, nil, nil
	if _, _, err := s.OrderCreate(ctxT(t), g); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o  *lapse.Order
		ev lapse.Event
	}{{orders[0], flows.Cancel}, {orders[1], flows.Pay}} {
		if _, err := s.OrderTransition(ctxT(t), plan(t, c.o, c.ev, base)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.OrderCountOpen(ctxT(t))
	want := []lapse.OrderStateCount{
		{Flow: "checkout", State: flows.Paid, N: 1, Timed: 0, Holding: 1},
		{Flow: "checkout", State: flows.Unpaid, N: 3, Timed: 3, Holding: 2},
		{Flow: "groupbuy", State: flows.GroupOpen, N: 1, Timed: 0, Holding: 0},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("OrderCountOpen = %+v, %v; want %+v", got, err, want)
	}
}
