package closes

import (
	"context"
	"errors"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// item closes the order of one item and settles the item. It returns an
// error only when the item could not be settled (ctx ended, the store
// failed): a close that fails is the item's outcome, not the Run's.
func (r *run) item(ctx context.Context, no string) error {
	done, err := closedByBatch(ctx, r.c.access, r.id, no)
	if err != nil {
		return err
	}
	if done {
		// Closed by an earlier Run that died before it said so.
		return r.closed(ctx, no)
	}
	entry := *r.entry
	entry.Target = target(no)
	actx := engine.WithAudit(ctx, &entry)
	// Closable checked again as the order is closed: it may have been paid,
	// or moved to a state whose deadline does not end it, since the batch
	// chose it.
	_, err = r.c.e.CloseOrderIf(actx, no, r.reason, engine.Actor{FiredBy: lapse.FiredByOperator, Name: r.actor}, (*lapse.Flow).ClosableByHand)
	switch {
	case engine.AuditWritten(actx):
		// The close and its row committed: say so even when ctx ended
		// meanwhile, so that a stopped Run leaves what it did recorded.
		return r.closed(context.WithoutCancel(ctx), no)
	case ctx.Err() != nil:
		return ctx.Err() // what became of the close is for the next Run to find
	case err == nil:
		// Closed, yet its row did not commit with it: the engine broke its
		// promise (WithAudit). Record the row now, so that no Run fires the
		// order again.
		return r.settle(ctx, no, lapse.CloseItemClosed, "", nil)
	case errors.Is(err, engine.ErrNotClosable), errors.Is(err, lapse.ErrOrderNotFound):
		return r.settle(ctx, no, lapse.CloseItemSkipped, lapse.Reason(err), err)
	default:
		return r.settle(ctx, no, lapse.CloseItemFailed, lapse.Reason(err), err)
	}
}

// closed marks the item of no closed. Its audit row is there, so nothing
// can make the item anything else: it needs no lock.
func (r *run) closed(ctx context.Context, no string) error {
	err := r.c.access.CloseItemUpdate(ctx, &lapse.CloseItem{BatchID: r.id, OrderNo: no, Status: lapse.CloseItemClosed})
	if err != nil {
		return err
	}
	return r.settledOne(ctx)
}

// settle writes the outcome of an item whose close did not commit its
// audit row (cause is the close's error, nil when it did close): in one
// transaction under the batch's exclusive lock (CloseBatchLock), which
// every close's row of the batch takes shared until it commits
// (lapse.AuditAppend), it looks for this batch's row of the order once
// more, and when it is there (another Run closed it meanwhile) marks the
// item closed; otherwise it appends the row of this attempt, with cause as
// its Result ("ok" when nil), and writes st and detail. A close that
// commits after the lock is let go has its Run mark the item closed after
// this write, so an item never ends skipped or failed when its order was
// closed by the batch.
func (r *run) settle(ctx context.Context, no string, st lapse.CloseItemStatus, detail string, cause error) error {
	err := r.c.store.Tx(ctx, func(tx lapse.Store) error {
		as, err := accessOf(tx)
		if err != nil {
			return err
		}
		if err := as.CloseBatchLock(ctx, r.id, false); err != nil {
			return err
		}
		it := &lapse.CloseItem{BatchID: r.id, OrderNo: no, Status: st, Detail: detail}
		done, err := closedByBatch(ctx, as, r.id, no)
		if err != nil {
			return err
		}
		if done {
			it.Status, it.Detail = lapse.CloseItemClosed, ""
		} else {
			row := *r.entry
			row.Target, row.At, row.Result = target(no), r.c.e.Clock().Now(), "ok"
			if cause != nil {
				row.Result = lapse.Reason(cause)
			}
			if err := lapse.AuditAppend(ctx, as, &row); err != nil {
				return err
			}
		}
		return as.CloseItemUpdate(ctx, it)
	})
	if err != nil {
		return err
	}
	return r.settledOne(ctx)
}

// closedByBatch reports whether the audit log has the row of batch's close
// of the order no that ended "ok": the row commits with the close, so the
// order was closed by the batch.
func closedByBatch(ctx context.Context, s lapse.AccessStore, batch int64, no string) (bool, error) {
	rows, err := s.AuditList(ctx, &lapse.AuditListParams{Action: ActionClose, Target: target(no), Batch: batch})
	if err != nil {
		return false, err
	}
	for _, e := range rows {
		if e.Result == "ok" {
			return true, nil
		}
	}
	return false, nil
}

func target(no string) string { return "order:" + no }
