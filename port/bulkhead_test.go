package port_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/port"
)

func TestBulkheadBoundsCallsInFlight(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{MaxConcurrent: 2})
	ctx := context.Background()
	srv.Pause()

	const callers = 6
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { errs[i] = p.Deliver(ctx, event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 1})) })
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.WaitInFlight(waitCtx, 2); err != nil {
		t.Fatal(err)
	}

	// A caller whose context ends while every slot is busy fails unsent.
	calls := srv.Stats().Calls
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	err := p.Deliver(short, event("order.closed"))
	if !errors.Is(err, port.ErrBulkheadFull) || errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Errorf("Deliver with every slot busy: %v; want ErrBulkheadFull, not sent", err)
	}
	if got := srv.Stats().Calls; got != calls {
		t.Errorf("a caller without a slot sent a request")
	}

	srv.Resume()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if _, peak := srv.InFlight(); peak != 2 {
		t.Errorf("at most %d requests were in flight, want 2", peak)
	}
	if got := srv.Stock("TEA").Reserved; got != callers {
		t.Errorf("TEA reserved %d, want %d", got, callers)
	}
	if p.State() != port.BreakerClosed {
		t.Errorf("waiting for a slot moved the breaker to %s", p.State())
	}
}
