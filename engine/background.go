package engine

import (
	"context"
	"sync"
	"time"
)

// background is the goroutine of a component that works on its own from
// Start to Stop (the outbox pruner, the held payments' matcher): start on a
// running one does nothing; stop cancels its context and waits for it.
type background struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs run in a goroutine of its own, on a context that stop
// cancels, unless one is running.
func (b *background) start(ctx context.Context, run func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		return
	}
	ctx, b.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	b.done = done
	go func() {
		defer close(done)
		run(ctx)
	}()
}

// stop cancels the running goroutine's context and waits for it to return.
func (b *background) stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel = nil
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// every runs pass at once, and then interval after the last pass ended,
// until ctx ends.
func every(ctx context.Context, interval time.Duration, pass func(ctx context.Context)) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		pass(ctx)
		timer.Reset(interval)
	}
}
