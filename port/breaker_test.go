package port_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/port"
	"github.com/lapsehq/lapse/port/porttest"
)

func TestBreakerOpensAndFailsFast(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{FailRate: 1})
	clock := lapse.NewManualClock(start)
	p := newPort(t, srv.URL, port.Config{Clock: clock, Breaker: port.BreakerConfig{Failures: 3, Window: 3, Cooldown: time.Minute}})
	ctx := context.Background()
	for i := range 3 {
		if p.State() != port.BreakerClosed {
			t.Fatalf("after %d failures the breaker is %s, want closed", i, p.State())
		}
		if err := p.Deliver(ctx, event("order.closed")); err == nil {
			t.Fatalf("Deliver #%d to a failing service succeeded", i+1)
		}
	}
	if p.State() != port.BreakerOpen {
		t.Fatalf("after 3 failures the breaker is %s, want open", p.State())
	}

	calls := srv.Stats().Calls
	d := event(lapse.EventOrderCreated, lapse.Item{SKU: "TEA", Qty: 1})
	err := p.Deliver(ctx, d)
	if !errors.Is(err, port.ErrBreakerOpen) || errors.Is(err, lapse.ErrUnknownOutcome) || errors.Is(err, lapse.ErrRefused) {
		t.Fatalf("Deliver through an open breaker: %v; want ErrBreakerOpen, retryable", err)
	}
	if _, err := p.Query(ctx, d); !errors.Is(err, port.ErrBreakerOpen) {
		t.Fatalf("Query through an open breaker: %v; want ErrBreakerOpen", err)
	}
	if got := srv.Stats().Calls; got != calls {
		t.Fatalf("an open breaker sent %d requests", got-calls)
	}

	clock.Advance(time.Minute - time.Second)
	if p.State() != port.BreakerOpen {
		t.Fatalf("before the cooldown ends the breaker is %s, want open", p.State())
	}
	clock.Advance(time.Second)
	if p.State() != port.BreakerHalfOpen {
		t.Fatalf("after the cooldown the breaker is %s, want half-open", p.State())
	}
	if err := p.Deliver(ctx, d); err == nil || errors.Is(err, port.ErrBreakerOpen) {
		t.Fatalf("the probe: %v; want the service's failure", err)
	}
	if got := srv.Stats().Calls; got != calls+1 {
		t.Fatalf("half-open sent %d requests, want 1 probe", got-calls)
	}
	if p.State() != port.BreakerOpen {
		t.Fatalf("after a failed probe the breaker is %s, want open again", p.State())
	}

	srv.SetFaults(porttest.Faults{})
	clock.Advance(time.Minute)
	if err := p.Deliver(ctx, d); err != nil {
		t.Fatalf("the second probe: %v", err)
	}
	if p.State() != port.BreakerClosed {
		t.Fatalf("after a healthy probe the breaker is %s, want closed", p.State())
	}
}

func TestBreakerHalfOpenLetsOneProbeThrough(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{Down: true})
	clock := lapse.NewManualClock(start)
	p := newPort(t, srv.URL, port.Config{Clock: clock, Breaker: port.BreakerConfig{Failures: 1, Window: 1, Cooldown: time.Minute}})
	ctx := context.Background()
	if err := p.Deliver(ctx, event("order.closed")); err == nil || p.State() != port.BreakerOpen {
		t.Fatalf("Deliver to a service that is down: %v, breaker %s; want an error, open", err, p.State())
	}
	srv.SetFaults(porttest.Faults{})
	clock.Advance(time.Minute)

	srv.Pause()
	probe := make(chan error, 1)
	go func() { probe <- p.Deliver(ctx, event("order.refunded")) }()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.WaitInFlight(waitCtx, 1); err != nil {
		t.Fatal(err)
	}
	calls := srv.Stats().Calls
	if err := p.Deliver(ctx, event("order.closed")); !errors.Is(err, port.ErrBreakerOpen) {
		t.Errorf("Deliver while the probe is out: %v; want ErrBreakerOpen", err)
	}
	if got := srv.Stats().Calls; got != calls {
		t.Errorf("a second call went out while half-open")
	}
	srv.Resume()
	if err := <-probe; err != nil {
		t.Fatalf("the probe: %v", err)
	}
	if p.State() != port.BreakerClosed {
		t.Errorf("after a healthy probe the breaker is %s, want closed", p.State())
	}
}

func TestBreakerIgnoresRefusalsAndResetsOnSuccess(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{Breaker: port.BreakerConfig{Failures: 2, Window: 2}})
	ctx := context.Background()
	for range 5 {
		if err := p.Deliver(ctx, event(lapse.EventOrderCreated, lapse.Item{SKU: "NONE", Qty: 1})); !errors.Is(err, lapse.ErrRefused) {
			t.Fatalf("Deliver of an unknown SKU: %v; want ErrRefused", err)
		}
	}
	// With Window equal to Failures the failures must be consecutive: a success
	// in between pushes the count below the limit.
	for range 3 {
		srv.SetFaults(porttest.Faults{FailRate: 1})
		if err := p.Deliver(ctx, event("order.closed")); err == nil {
			t.Fatal("Deliver to a failing service succeeded")
		}
		srv.SetFaults(porttest.Faults{})
		if err := p.Deliver(ctx, event("order.refunded")); err != nil {
			t.Fatal(err)
		}
	}
	if p.State() != port.BreakerClosed {
		t.Errorf("breaker %s, want closed", p.State())
	}
}

func TestBreakerIgnoresCallersThatGiveUp(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	p := newPort(t, srv.URL, port.Config{Breaker: port.BreakerConfig{Failures: 1, Window: 1}})
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.Deliver(ctx, event("order.closed")); !errors.Is(err, lapse.ErrUnknownOutcome) {
		t.Fatalf("Deliver abandoned by its caller: %v; want ErrUnknownOutcome", err)
	}
	if p.State() != port.BreakerClosed {
		t.Errorf("a caller giving up moved the breaker to %s", p.State())
	}
}

// TestBreakerDefaultsRideOutRandomFailures: with the default settings a
// service that fails 30 % of its calls at random keeps getting them, while
// one that is down opens the breaker within Failures calls.
func TestBreakerDefaultsRideOutRandomFailures(t *testing.T) {
	t.Parallel()
	srv := newStock(t)
	srv.SetFaults(porttest.Faults{FailRate: 0.3})
	p := newPort(t, srv.URL, port.Config{})
	ctx := context.Background()
	for i := range 600 {
		_ = p.Deliver(ctx, event("order.refunded"))
		if p.State() != port.BreakerClosed {
			t.Fatalf("the breaker opened after %d calls at a 30%% failure rate", i+1)
		}
	}
	srv.SetFaults(porttest.Faults{FailRate: 1})
	for range 30 {
		_ = p.Deliver(ctx, event("order.refunded"))
	}
	if p.State() != port.BreakerOpen {
		t.Errorf("after 30 failures in a row the breaker is %s, want open", p.State())
	}
}
