package access

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

// TestHashTurnsAreBounded: with every hashing slot taken, hashWaiting
// password checks wait for a turn, and the next one is refused at once with
// errHashBusy, rather than queue for as long as its request lasts.
func TestHashTurnsAreBounded(t *testing.T) {
	t.Parallel()
	s := &Service{hashing: make(chan struct{}, 2), waiting: make(chan struct{}, hashWaiting)}
	for range cap(s.hashing) {
		if err := s.takeTurn(context.Background()); err != nil {
			t.Fatalf("a free slot: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, hashWaiting)
	for range hashWaiting {
		wg.Go(func() { errs <- s.takeTurn(ctx) })
	}
	for len(s.waiting) < hashWaiting {
		// The waiters take their places; none can get a slot.
		runtime.Gosched()
		select {
		case err := <-errs:
			t.Fatalf("a waiter returned before the slots were free: %v", err)
		default:
		}
	}
	err := s.takeTurn(context.Background()) // would wait for ever without the bound
	if !errors.Is(err, errHashBusy) {
		t.Fatalf("a check past the waiting room: %v, want errHashBusy", err)
	}
	cancel()
	wg.Wait()
	if len(s.waiting) != 0 {
		t.Fatalf("%d places of the waiting room are still taken after its waiters left", len(s.waiting))
	}
	for range cap(s.hashing) {
		<-s.hashing
	}
	if err := s.takeTurn(context.Background()); err != nil {
		t.Fatalf("a free slot again: %v", err)
	}
}
