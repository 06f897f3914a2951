package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestBackground(t *testing.T) {
	var b background
	var passes, running atomic.Int32
	run := func(ctx context.Context) {
		running.Add(1)
		defer running.Add(-1)
		every(ctx, time.Millisecond, func(context.Context) { passes.Add(1) })
	}
	b.stop() // stopping what never started does nothing
	b.start(context.Background(), run)
	b.start(context.Background(), run) // a second start while running does nothing
	deadline := time.Now().Add(10 * time.Second)
	for passes.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if passes.Load() < 3 {
		t.Fatalf("every ran %d passes in 10s, want at least 3", passes.Load())
	}
	if n := running.Load(); n != 1 {
		t.Fatalf("%d loops running after two starts, want 1", n)
	}
	b.stop()
	if n := running.Load(); n != 0 {
		t.Fatalf("%d loops running after stop returned, want 0", n)
	}
	after := passes.Load()
	time.Sleep(20 * time.Millisecond)
	if passes.Load() != after {
		t.Fatalf("passes went on after stop: %d, then %d", after, passes.Load())
	}

	// It starts again after a stop, and ends with the context it was given.
	ctx, cancel := context.WithCancel(context.Background())
	b.start(ctx, run)
	cancel()
	b.stop()
	if n := running.Load(); n != 0 {
		t.Fatalf("%d loops running after the context ended and stop returned, want 0", n)
	}
}
