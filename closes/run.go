package closes

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
)

// workers is how many items a Run closes at once.
const workers = 4

// refreshEvery is how many items a Run settles between refreshes of the
// batch's counts.
const refreshEvery = 100

// itemPage is how many items a Run lists at a time.
const itemPage = 100

// Run closes the items of batch batchID still to close: first those that
// failed in an earlier Run (each failed item is tried once more per Run),
// then the pending ones. Each is closed by engine.CloseOrderIf, only while
// its state is one a manual close ends ((*lapse.Flow).ClosableByHand), fired by
// lapse.FiredByOperator as by's name, with the batch's reason, under an
// audit row (by's actor fields, Action "order.close", Target "order:<no>",
// Batch batchID, the batch's reason and approval) that commits in the
// transaction of the close. An item ends:
//
//   - closed: the close committed (or had committed, see below);
//   - skipped: the order is no longer closable (engine.ErrNotClosable:
//     paid, closed by its deadline or someone else, moved to a state whose
//     deadline does not end it) or not found;
//   - failed: any other error (a provider that did not answer, a store that
//     refused); Detail says why, and the next Run tries it again.
//
// A skipped or failed item gets an audit row too, with the error as its
// Result. Every refreshEvery items and at the end Run writes the batch's
// counts, and calls progress (when not nil) with the batch as written, from
// one goroutine at a time. When no item is left to close the batch is done,
// with its FinishedAt; a Run of a done batch with no failed items returns it
// as it is.
//
// Run is resumable: the process may die at any point, and a Run of the
// batch later (another process, another Closer) carries on. An order's
// audit row commits with its close, so before closing an item, and before
// marking one skipped or failed, Run looks for the row of this batch with
// Result "ok": when it is there, the order was closed by this batch and the
// item is closed without firing again. No order is closed twice by a batch,
// and what its close releases (stock, coupons, through the flow's events)
// is released once. When ctx ends, Run stops taking items, leaves the ones
// under way as the store has them, and returns the batch with ctx's error.
//
// Runs of one batch through one Closer take turns. Runs through different
// Closers (processes) may overlap, and each order is still closed by only
// one of them: a close ends the order (the deadline it fires leads to a
// terminal state), so the other's close finds it in a state without a
// deadline, and the batch's row of it.
//
// Errors: an error wrapping lapse.ErrAccessNotFound for an unknown batch;
// EINVALID (field "by") for a by without an actor; ctx's error; the store's
// errors, which stop the Run with the batch as last written.
func (c *Closer) Run(ctx context.Context, batchID int64, by *lapse.AuditEntry, progress func(*lapse.CloseBatch)) (*lapse.CloseBatch, error) {
	if err := validActor(by); err != nil {
		return nil, err
	}
	unlock, err := c.lock(ctx, batchID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b, err := c.access.CloseBatchGet(ctx, batchID)
	if err != nil {
		return nil, err
	}
	n, err := c.access.CloseItemCount(ctx, batchID)
	if err != nil {
		return nil, err
	}
	left := n[lapse.CloseItemPending] + n[lapse.CloseItemFailed]
	if left == 0 && b.Status == lapse.CloseBatchDone {
		return b, nil
	}
	entry := actorOf(by)
	entry.Action, entry.Batch, entry.Reason, entry.ApprovalID = ActionClose, b.ID, b.Reason, b.ApprovalID
	r := &run{c: c, id: b.ID, reason: b.Reason, b: b, entry: entry, progress: progress,
		actor: cmp.Or(by.ActorName, by.ActorID)}
	if left > 0 && b.Status != lapse.CloseBatchRunning {
		// Failed items tried again: running until they are settled, so
		// that a crash meanwhile leaves the batch among the Unfinished.
		if _, err := r.refresh(ctx, false); err != nil {
			return b, err
		}
	}
	for _, st := range []lapse.CloseItemStatus{lapse.CloseItemFailed, lapse.CloseItemPending} {
		if err := r.pass(ctx, st); err != nil {
			if got, rerr := r.refresh(context.WithoutCancel(ctx), false); rerr == nil {
				b = got
			}
			return b, err
		}
	}
	return r.refresh(ctx, true)
}

// run is one Run of a batch.
type run struct {
	c        *Closer
	id       int64             // the batch's
	reason   string            // the batch's
	entry    *lapse.AuditEntry // the audit row of an item, but its Target, At and Result
	actor    string            // engine.Actor.Name of the closes
	progress func(*lapse.CloseBatch)
	settled  atomic.Int64 // items settled, for the refreshes

	mu sync.Mutex        // held by a refresh
	b  *lapse.CloseBatch // as last written, under mu
}

// pass settles the items in status st, with workers goroutines, in order
// of their numbers. It ends at the first error: ctx's, or a store's in
// settling an item.
func (r *run) pass(ctx context.Context, st lapse.CloseItemStatus) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	nos := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for no := range nos {
				if ctx.Err() != nil {
					continue // drained: left as it is for the next Run
				}
				if err := r.item(ctx, no); err != nil {
					cancel(err)
				}
			}
		})
	}
	var listErr error
	after := ""
list:
	for {
		page, err := r.c.access.CloseItemList(ctx, r.id, st, after, itemPage)
		if err != nil {
			listErr = err
			break
		}
		for _, it := range page {
			select {
			case nos <- it.OrderNo:
			case <-ctx.Done():
				break list
			}
		}
		if len(page) < itemPage {
			break
		}
		after = page[len(page)-1].OrderNo
	}
	close(nos)
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return listErr
}

// refresh writes the batch's counts as the store has them, and, when final
// and no item is pending, its end; then it calls progress. It counts and
// writes under the batch's exclusive lock, as items are settled (see
// settle), so that the last refresh of overlapping Runs counts every item
// settled before it.
func (r *run) refresh(ctx context.Context, final bool) (*lapse.CloseBatch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := *r.b
	err := r.c.store.Tx(ctx, func(tx lapse.Store) error {
		as, err := accessOf(tx)
		if err != nil {
			return err
		}
		if err := as.CloseBatchLock(ctx, b.ID, false); err != nil {
			return err
		}
		n, err := as.CloseItemCount(ctx, b.ID)
		if err != nil {
			return err
		}
		b.Total = 0
		for _, k := range n {
			b.Total += k
		}
		b.Closed, b.Skipped, b.Failed = n[lapse.CloseItemClosed], n[lapse.CloseItemSkipped], n[lapse.CloseItemFailed]
		b.Status, b.FinishedAt = lapse.CloseBatchRunning, time.Time{}
		if final && n[lapse.CloseItemPending] == 0 {
			b.Status, b.FinishedAt = lapse.CloseBatchDone, r.c.e.Clock().Now()
		}
		return as.CloseBatchUpdate(ctx, &b)
	})
	if err != nil {
		return r.b, err
	}
	r.b = &b
	if r.progress != nil {
		shown := b
		r.progress(&shown)
	}
	return &b, nil
}

// settledOne counts an item settled and refreshes the batch every
// refreshEvery items.
func (r *run) settledOne(ctx context.Context) error {
	if r.settled.Add(1)%refreshEvery != 0 {
		return nil
	}
	_, err := r.refresh(ctx, false)
	return err
}
