// Package closes closes orders by hand, in batches (seed 004's manual close:
// by order number, user or time range, with a batch marker): the one path
// that the command line (lapse close) and the HTTP API (POST /v1/closes)
// both take.
//
// A close is previewed (Preview), then started (Start), which freezes the
// closable orders as the batch's items with its audit row, then run (Run),
// which closes each item through its flow (engine.CloseOrder), each with an
// audit row of its own in the transaction of its close. Run is resumable: a
// process killed at any point is run again and carries on (Unfinished,
// FindRunning), and no order is closed twice by one batch.
package closes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// Closer previews, starts and runs close batches. It is safe for concurrent
// use; Runs of one batch through one Closer take turns, so a process makes
// one Closer and shares it.
type Closer struct {
	e      *engine.Engine
	store  lapse.Store // the raw store, for its transactions
	access lapse.AccessStore

	mu      sync.Mutex
	running map[int64]chan struct{} // batches being run, each closed when its Run ends
}

// New returns a Closer that closes orders through e. store is the store e
// was built over (not e.Store(), which is wrapped), and must be a
// lapse.AccessStore, as the built-in stores are, on their transactions too.
func New(e *engine.Engine, store lapse.Store) (*Closer, error) {
	if e == nil || store == nil {
		return nil, fmt.Errorf("closes: nil engine or store")
	}
	as, ok := store.(lapse.AccessStore)
	if !ok {
		return nil, fmt.Errorf("closes: the store %T keeps no close batches (it is not a lapse.AccessStore)", store)
	}
	return &Closer{e: e, store: store, access: as, running: map[int64]chan struct{}{}}, nil
}

// Batch returns the batch with id, or an error wrapping
// lapse.ErrAccessNotFound.
func (c *Closer) Batch(ctx context.Context, id int64) (*lapse.CloseBatch, error) {
	return c.access.CloseBatchGet(ctx, id)
}

// Batches lists batches, newest first, as lapse.AccessStore.CloseBatchList
// does; a nil p lists them all.
func (c *Closer) Batches(ctx context.Context, p *lapse.CloseBatchListParams) ([]*lapse.CloseBatch, error) {
	if p == nil {
		p = &lapse.CloseBatchListParams{}
	}
	return c.access.CloseBatchList(ctx, p)
}

// Unfinished returns the batches still running, newest first: those a
// restarted process runs again to finish them.
func (c *Closer) Unfinished(ctx context.Context) ([]*lapse.CloseBatch, error) {
	return c.access.CloseBatchList(ctx, &lapse.CloseBatchListParams{Status: lapse.CloseBatchRunning})
}

// FindRunning returns the newest running batch whose selector chooses what
// sel chooses (the same canonical form: order numbers in any order, times
// in any zone), or nil when there is none: how a close asked again after a
// crash carries on with its batch instead of starting a second one. The
// reason is not compared. sel must be valid.
func (c *Closer) FindRunning(ctx context.Context, sel *Selector) (*lapse.CloseBatch, error) {
	if err := sel.Validate(); err != nil {
		return nil, err
	}
	want := sel.canonical()
	bs, err := c.Unfinished(ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		var got Selector
		if json.Unmarshal(b.Selector, &got) != nil {
			continue // not written by Start
		}
		if bytes.Equal(got.canonical(), want) {
			return b, nil
		}
	}
	return nil, nil
}

// lock makes the Runs of one batch through c take turns, and returns the
// unlock.
func (c *Closer) lock(ctx context.Context, id int64) (func(), error) {
	for {
		c.mu.Lock()
		busy, ok := c.running[id]
		if !ok {
			done := make(chan struct{})
			c.running[id] = done
			c.mu.Unlock()
			return func() {
				c.mu.Lock()
				delete(c.running, id)
				c.mu.Unlock()
				close(done)
			}, nil
		}
		c.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
