package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// blockNext is a memTrigger whose next Next, once armed, says it was
// entered and waits to be released: the shared trigger's loop is then
// held in a step past its hand-over of the deadlines.
type blockNext struct {
	*memTrigger
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (b *blockNext) Next(ctx context.Context) (time.Time, bool, error) {
	if b.armed.CompareAndSwap(true, false) {
		close(b.entered)
		<-b.release
	}
	return b.memTrigger.Next(ctx)
}

// TestSharedTriggerStopHandsOver: a server shutting down ends the
// claimer's context first and lets its requests finish; a deadline such a
// request sets reaches the shared trigger by the time Stop returns, rather
// than staying in this process's queue while the other processes, their
// precise paths standing back, wait for their sweep.
func TestSharedTriggerStopHandsOver(t *testing.T) {
	t.Parallel()
	mem := newMemTrigger()
	mem.seeded = true
	tr := &blockNext{memTrigger: mem, entered: make(chan struct{}), release: make(chan struct{})}
	e, _ := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	t.Cleanup(c.Stop)
	before := create(t, e, checkout("SO-before", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return mem.has(before.ID) })

	tr.armed.Store(true)
	<-tr.entered // the loop is past its hand-over
	cancel()     // SIGTERM
	late := create(t, e, checkout("SO-late", time.Hour))
	close(tr.release)
	c.Stop()
	if !mem.has(late.ID) {
		t.Errorf("a deadline set while the server shut down did not reach the shared trigger")
	}
}

// TestSharedTriggerFeed: a process that fires no deadlines (StartFeed)
// still hands the deadlines it sets to the shared trigger, and after a
// failure of the trigger seeds it again from the database; it fires
// nothing itself.
func TestSharedTriggerFeed(t *testing.T) {
	t.Parallel()
	tr := newMemTrigger()
	tr.seeded = true
	e, _ := triggerEngine(t, tr)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Minute, SweepInterval: time.Hour})
	c.StartFeed(context.Background())
	t.Cleanup(c.Stop)

	o := create(t, e, checkout("FE-1", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return tr.has(o.ID) })

	tr.fail(errors.New("redis: i/o timeout"))
	down := create(t, e, checkout("FE-down", time.Hour))
	waitUntil(t, 30*time.Second, func() bool { return e.TriggerStatus().Degraded })
	tr.fail(nil)
	waitUntil(t, 30*time.Second, func() bool { return !e.TriggerStatus().Degraded && tr.has(down.ID) })

	// Due at once: handed over, not fired here.
	due := create(t, e, checkout("FE-due", time.Millisecond))
	waitUntil(t, 30*time.Second, func() bool { _, ok := tr.dueAt(due.ID); return ok })
	c.Stop()
	if got, err := e.Order(context.Background(), due.OrderNo); err != nil || got.State != flows.Unpaid {
		t.Errorf("a feeding process fired an order: %+v, %v", got, err)
	}
}
