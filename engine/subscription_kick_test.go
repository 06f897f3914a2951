package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// claimCounting counts the deliveries' claims of each subscriber.
type claimCounting struct {
	lapse.Store
	mu     sync.Mutex
	claims map[string]int
}

func (s *claimCounting) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	s.mu.Lock()
	for _, sub := range p.Subscribers {
		s.claims[sub]++
	}
	s.mu.Unlock()
	return s.Store.DeliveryClaim(ctx, p)
}

func (s *claimCounting) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[sub]
}

// TestEventsWakeOnlyTheirSubscribers pins that the events an order's change
// writes wake the delivery loops of the subscribers they name, and no
// other: a loop woken for nothing claims from the store and finds nothing,
// which in a flash sale was three claims a close batch (each planned anew,
// about a millisecond of the database's time).
func TestEventsWakeOnlyTheirSubscribers(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t, filepath.Join(t.TempDir(), "lapse.db"))
	counting := &claimCounting{Store: s, claims: map[string]int{}}
	clk := lapse.NewManualClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	closed := make(seenOrders, 10)
	e, err := New(s, flows.Builtin(), Config{Clock: clk, WorkStore: counting, Subscriptions: []Subscription{
		{Name: "closed", Handler: closed, Events: []string{flows.EventOrderClosed}},
		{Name: "paid", Handler: make(seenOrders, 10), Events: []string{flows.EventOrderPaid}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDeliverer(e, DelivererConfig{Poll: time.Hour}) // only a wake makes a loop claim again
	dctx, stop := context.WithCancel(ctx)
	defer d.Stop()
	defer stop()
	d.Start(dctx)

	c := NewClaimer(e, ClaimerConfig{})
	const n = 5
	for i := range n {
		orderNo := fmt.Sprintf("W-%d", i)
		lookCreate(t, e, orderNo, 10*time.Second)
		clk.Advance(time.Minute)
		if n, err := c.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("RunOnce = %d, %v; want %s closed", n, err, orderNo)
		}
		got(t, closed, orderNo)
	}
	// Each loop claims once as it starts; "closed" again for the closes;
	// "paid", woken by nothing, never again (woken by every close, it
	// claimed once a close and more).
	if got := counting.count("closed"); got < 2 {
		t.Fatalf("subscriber closed claimed %d times for %d closes; want its first look and more for the closes", got, n)
	}
	if got := counting.count("paid"); got > 1 {
		t.Fatalf("subscriber paid claimed %d times while only order.closed events were written; want at most 1, its first look", got)
	}
}
