package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/faultproxy"
)

// flaky fails every event's first few deliveries.
type flaky struct {
	failures int
	mu       sync.Mutex
	seen     map[string]int
}

func (f *flaky) Deliver(_ context.Context, d *lapse.Delivery) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[d.Event.ID]++
	if f.seen[d.Event.ID] <= f.failures {
		return errors.New("not yet")
	}
	return nil
}

func TestRedelivererRetriesUntilDelivered(t *testing.T) {
	t.Parallel()
	h := &flaky{failures: 3, seen: map[string]int{}}
	r := faultproxy.NewRedeliverer(h, 4, time.Millisecond, 4*time.Millisecond)
	defer r.Stop()
	const n = 50
	for i := range n {
		r.Submit(&lapse.Delivery{Event: &lapse.OutboxEvent{ID: fmt.Sprint(i)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	if err := r.WaitDelivered(ctx, n); err != nil {
		t.Fatalf("WaitDelivered: %v", err)
	}
	attempts := r.Attempts()
	if len(attempts) != n*(h.failures+1) {
		t.Fatalf("%d attempts, want %d", len(attempts), n*(h.failures+1))
	}
	for id, count := range h.seen {
		if count != h.failures+1 {
			t.Fatalf("event %s delivered %d times, want %d", id, count, h.failures+1)
		}
	}
}
