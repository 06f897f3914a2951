package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// batcher coalesces the concurrent calls of one of the Store's methods into
// shared statements: a call waits in a queue while max statements are in
// flight, and the next statement to go takes what take picks of every call
// waiting. A call alone goes at once, as a statement of its own, unless
// calls come thousands a second: then a batch of fewer than gatherBatch
// waits up to Config.BatchGather for more (gatherFor). So a batch forms
// under load, of the calls that came while the statements before it ran,
// or while it gathered. The API's hot reads and the
// payment callbacks' write are batched: OrderGet (order_batch.go),
// APIKeyGet (apikey.go), the applied payments (payment_batch.go) and the
// creations, audited or holding stock too (order_create_batch.go). Each
// was one small statement of its own per request, and at thousands of
// requests a second the server spent most of its time starting, planning
// and committing statements rather than on their rows.
//
// A batch's statement runs on the context of the call that started its
// loop, cut off from that call's cancellation: a batch is everyone's; a
// call alone in its batch runs on its own context. write decides
// each call it can answer for (batchCall.decided); a call it leaves
// undecided (its statement failed, or the batch could not tell its answer)
// is decided alone by its method's own statement, so that one call's
// failure is never another's.
type batcher[P, R any] struct {
	max   int                                                             // statements in flight
	take  func(queue []*batchCall[P, R]) (batch, rest []*batchCall[P, R]) // the next batch, in the order it is written
	write func(ctx context.Context, batch []*batchCall[P, R])

	gather time.Duration // Config.BatchGather; see gatherFor

	mu      sync.Mutex
	queue   []*batchCall[P, R]
	running int // statements in flight
	writing int // the calls of those statements

	// What gatherFor goes by.
	last time.Time     // the latest call's arrival
	gap  time.Duration // a moving average of the time between arrivals
	peak int           // the most calls in flight at once since the last batch was taken
	want int           // the queue a gathering batch waits for
	wake chan struct{} // closed when the queue reaches want
}

// gatherBatch is the most calls a gathering batch waits for (gatherFor).
const gatherBatch = 4

// batchCall is one call waiting for its batch.
type batchCall[P, R any] struct {
	p       P
	ctx     context.Context // the caller's
	done    chan struct{}   // closed when its batch is over
	alone   bool            // alone in its batch (b.mu)
	arrived time.Time

	// Set by write before done is closed: the call's answer, when decided.
	decided bool
	r       R
	err     error
}

// do queues p and returns its call once its batch is over. When ctx ends
// first, a call still queued leaves it and is lapse.ErrStoreUnavailable,
// as a call that waited for a pool connection past its deadline is; a call
// alone in its batch is answered by its own statement, which ctx bounds; a
// call in a batch gets ctx's error, and its write may or may not commit,
// as when a statement's connection breaks.
func (b *batcher[P, R]) do(ctx context.Context, p P) (*batchCall[P, R], error) {
	now := time.Now()
	c := &batchCall[P, R]{p: p, ctx: ctx, done: make(chan struct{}), arrived: now}
	b.mu.Lock()
	if !b.last.IsZero() {
		b.gap += (min(now.Sub(b.last), time.Second) - b.gap) / 8
	}
	b.last = now
	b.queue = append(b.queue, c)
	b.peak = max(b.peak, len(b.queue)+b.writing)
	if b.wake != nil && len(b.queue) >= b.want {
		close(b.wake)
		b.wake = nil
	}
	start := b.running < b.max
	if start {
		b.running++
	}
	b.mu.Unlock()
	if start {
		go b.run(context.WithoutCancel(ctx))
	}
	select {
	case <-c.done:
		return c, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	i := slices.Index(b.queue, c)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	alone := c.alone
	b.mu.Unlock()
	switch {
	case i >= 0:
		return nil, fmt.Errorf("%w: waiting for a statement: %w", lapse.ErrStoreUnavailable, ctx.Err())
	case alone:
		<-c.done
		return c, nil
	}
	return nil, ctx.Err()
}

// run writes batches until the queue is empty.
func (b *batcher[P, R]) run(ctx context.Context) {
	for {
		b.mu.Lock()
		if wait := b.gatherFor(); wait > 0 {
			wake := make(chan struct{})
			b.wake, b.want = wake, min(gatherBatch, b.peak)
			b.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-wake:
			case <-t.C:
			}
			t.Stop()
			b.mu.Lock()
			b.wake = nil
		}
		var batch []*batchCall[P, R]
		if len(b.queue) > 0 {
			var rest []*batchCall[P, R]
			batch, rest = b.take(b.queue)
			b.queue = rest
		}
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		batch[0].alone = len(batch) == 1
		b.writing += len(batch)
		b.peak = len(b.queue) + b.writing
		b.mu.Unlock()
		b.write(ctx, batch)
		b.mu.Lock()
		b.writing -= len(batch)
		b.mu.Unlock()
		for _, c := range batch {
			close(c.done)
		}
	}
}

// gatherFor is how long the next batch waits for more calls (b.mu held).
//
// Without a wait, at thousands of calls a second but short of what fills
// the queue while a statement runs, each statement took one or two calls:
// the server spent its time starting and committing statements, and at
// 70 % of the rate a full queue reaches, its cores were as busy as at full
// speed, so that the latencies' tail grew (http BenchmarkCallback). So a
// batch smaller than the most calls that were in flight at once while the
// batch before it ran (b.peak, at most gatherBatch) waits until its first
// call is b.gather old or the queue is that large, but only while calls
// come at least two a b.gather (b.gap). Below that rate nothing waits;
// far above it the queue fills while the statement before runs, and the
// batch goes at once; a caller that calls again only once answered, or a
// few such callers, never waits for more calls than there are of them.
// One batch gathers at a time.
func (b *batcher[P, R]) gatherFor() time.Duration {
	if b.gather <= 0 || b.wake != nil || len(b.queue) == 0 || len(b.queue) >= min(gatherBatch, b.peak) ||
		b.gap <= 0 || b.gap > b.gather/2 {
		return 0
	}
	return b.gather - time.Since(b.queue[0].arrived)
}

// takeDistinct is a take: the calls in queue order, at most n, none with
// the key of one before it in the batch; those wait for the next, in their
// order.
func takeDistinct[P, R any, K comparable](queue []*batchCall[P, R], n int, key func(P) K) (batch, rest []*batchCall[P, R]) {
	seen := make(map[K]bool, min(len(queue), n))
	for _, c := range queue {
		if k := key(c.p); len(batch) < n && !seen[k] {
			seen[k] = true
			batch = append(batch, c)
			continue
		}
		rest = append(rest, c)
	}
	return batch, rest
}
