package closes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// MaxItems bounds the orders one batch closes: a range or a user that
// matches more is narrowed first, so that a mistyped range does not close
// a season's orders.
const MaxItems = 100000

// Audit actions of a close.
const (
	ActionBatch = "close.batch" // a batch was started (Target "batch:<id>")
	ActionClose = "order.close" // one order of a batch was closed, or was not (Target "order:<no>")
)

// Start chooses the orders sel matches that are closable now, as Preview
// counts them, and freezes them as the items of a new batch, running, with
// its audit row, in one transaction: a confirmed close closes what was
// chosen, and a crash leaves either the batch and its row or neither. It
// does not close anything: Run does.
//
// The audit row has by's actor fields (kind, id, name, role, second factor,
// approver, address), Action "close.batch", Target "batch:<id>" and Batch
// the batch's id (the batch is inserted first, in the same transaction, so
// that its id is known), the selector as Params, reason and the approval's
// id. The batch's CreatedBy is by's kind and name ("operator:alice"; the id
// when there is no name). The selector is kept as JSON as given.
//
// approved is the approval request the close carries out, nil when it
// needs none. The batch and its row name it, and it closes no more than
// was approved: orders made after the request are left out (no one saw
// them), and so are orders changed since (their UpdatedAt later: no one
// saw them as they are, and one closable now may not have been then, so
// that it was not counted), and more than approved.Count closable orders
// left is ECONFLICT, with nothing started, however the selection grew
// since it was counted.
//
// previewed is the preview the close was confirmed from (its AsOf and
// Count), nil when there was none. It bounds the close the same way: orders
// made or changed after previewed.AsOf are left out, and more than
// previewed.Count closable orders left is ECONFLICT, so that a close
// confirmed from a preview closes no order the preview did not count. A
// previewed with a Selection must have been made for sel (the same
// Selection): a count read for one selection says nothing of another's.
//
// Errors: EINVALID for an invalid sel, an empty reason (field "reason"), a
// by without an actor (field "by") or a previewed with no AsOf or a
// negative Count, or a Selection that is not sel's (field "preview");
// ECONFLICT "nothing to close: …" when
// no order matched is closable, and ECONFLICT when more than MaxItems, or
// than approved or previewed, are. A Start that fails after its input was valid is
// itself recorded in the audit log (best effort), with the error as the
// row's Result.
func (c *Closer) Start(ctx context.Context, sel *Selector, reason string, by *lapse.AuditEntry, approved *lapse.Approval, previewed *Preview) (*lapse.CloseBatch, error) {
	switch {
	case strings.TrimSpace(reason) == "":
		return nil, lapse.FieldError("reason", "is required: say why these orders are closed by hand")
	case len(reason) > lapse.MaxReasonLen || lapse.CleanReason(reason) != reason:
		return nil, lapse.FieldError("reason", "must be one line of text of at most %d bytes, without control characters (line breaks, tabs) or bidirectional controls", lapse.MaxReasonLen)
	}
	if err := validActor(by); err != nil {
		return nil, err
	}
	if previewed != nil && (previewed.AsOf.IsZero() || previewed.Count < 0) {
		return nil, lapse.FieldError("preview", "needs the preview's as_of and count")
	}
	if err := c.check(sel); err != nil {
		return nil, err
	}
	if previewed != nil && previewed.Selection != "" && previewed.Selection != sel.Selection() {
		return nil, otherSelection()
	}
	raw, err := json.Marshal(sel)
	if err != nil {
		return nil, err
	}
	var approvalID int64
	if approved != nil {
		approvalID = approved.ID
	}
	entry := actorOf(by)
	entry.Action, entry.Target, entry.Params, entry.Reason, entry.ApprovalID = ActionBatch, "close", raw, reason, approvalID
	b, err := c.start(ctx, sel, raw, reason, by, approved, previewed, entry)
	if err != nil {
		entry.At, entry.Result = c.e.Clock().Now(), lapse.Reason(err)
		_ = lapse.AuditRecord(context.WithoutCancel(ctx), c.store, entry)
		return nil, err
	}
	return b, nil
}

func (c *Closer) start(ctx context.Context, sel *Selector, raw []byte, reason string, by *lapse.AuditEntry, approved *lapse.Approval, previewed *Preview, entry *lapse.AuditEntry) (*lapse.CloseBatch, error) {
	var nos []string
	var skipped, newer, changed int64
	// seen is when what the close may take was counted: the approval
	// request, or the preview, whichever was first.
	var seen time.Time
	var since string
	if approved != nil {
		seen, since = approved.CreatedAt, fmt.Sprintf("approval %d was requested", approved.ID)
	}
	if previewed != nil && (seen.IsZero() || previewed.AsOf.Before(seen)) {
		seen, since = previewed.AsOf, "the preview"
	}
	err := c.each(ctx, sel, func(o *lapse.Order, closable bool) error {
		if closable {
			switch movedSince(o, seen) {
			case madeSince:
				closable = false
				newer++
			case changedSince:
				closable = false
				changed++
			}
		}
		if !closable {
			skipped++
			return nil
		}
		if approved != nil && int64(len(nos)) == approved.Count {
			return lapse.Errorf(lapse.ECONFLICT, "approval %d was for %d orders; the selection now has more; nothing was closed: request the close again", approved.ID, approved.Count)
		}
		if previewed != nil && int64(len(nos)) == previewed.Count {
			return lapse.Errorf(lapse.ECONFLICT, "the preview showed %d orders to close; the selection now has more; nothing was closed: preview again", previewed.Count)
		}
		if len(nos) == MaxItems {
			return lapse.Errorf(lapse.ECONFLICT, "too much to close at once: the selection has more than %d closable orders; narrow it", MaxItems)
		}
		nos = append(nos, o.OrderNo)
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(nos) == 0 && skipped == 0:
		return nil, lapse.Errorf(lapse.ECONFLICT, "nothing to close: no order matches")
	case len(nos) == 0 && changed > 0:
		return nil, lapse.Errorf(lapse.ECONFLICT, "nothing to close: the %d orders closable now were made or changed since %s (%d made, %d changed), which did not count them as they are", newer+changed, since, newer, changed)
	case len(nos) == 0 && newer > 0:
		return nil, lapse.Errorf(lapse.ECONFLICT, "nothing to close: the %d orders closable now were made after %s", newer, since)
	case len(nos) == 0:
		return nil, lapse.Errorf(lapse.ECONFLICT, "nothing to close: none of the %d orders chosen is waiting for payment in a state a close ends (or found)", skipped)
	}
	now := c.e.Clock().Now()
	in := &lapse.CloseBatch{Selector: raw, Reason: reason, CreatedBy: createdBy(by), ApprovalID: entry.ApprovalID,
		CreatedAt: now, Status: lapse.CloseBatchRunning, Total: int64(len(nos))}
	var b *lapse.CloseBatch
	err = c.store.Tx(ctx, func(tx lapse.Store) error {
		as, err := accessOf(tx)
		if err != nil {
			return err
		}
		if b, err = as.CloseBatchCreate(ctx, in, nos); err != nil {
			return err
		}
		row := *entry
		row.At, row.Target, row.Batch, row.Result = now, fmt.Sprintf("batch:%d", b.ID), b.ID, "ok"
		return lapse.AuditAppend(ctx, as, &row)
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Whether an order was made or changed since a close's orders were counted.
const (
	unchanged = iota
	madeSince
	changedSince
)

// movedSince says whether o was made or changed after seen (zero: nothing was
// counted, so nothing is since). One changed since is left out as one made
// since is: closable now, it may not have been then (let into a wait for
// payment since), so that what was counted is not what would be closed.
func movedSince(o *lapse.Order, seen time.Time) int {
	switch {
	case seen.IsZero():
		return unchanged
	case o.CreatedAt.After(seen):
		return madeSince
	case o.UpdatedAt.After(seen):
		return changedSince
	}
	return unchanged
}

// validActor refuses a by that names no one.
func validActor(by *lapse.AuditEntry) error {
	if by == nil || by.ActorKind == "" || (by.ActorName == "" && by.ActorID == "") {
		return lapse.FieldError("by", "names no actor: an audit row needs its kind and name or id")
	}
	return nil
}

// actorOf returns a row with the actor fields of by.
func actorOf(by *lapse.AuditEntry) *lapse.AuditEntry {
	return &lapse.AuditEntry{ActorKind: by.ActorKind, ActorID: by.ActorID, ActorName: by.ActorName, Role: by.Role,
		SecondFactor: by.SecondFactor, Approver: by.Approver, ClientAddr: by.ClientAddr}
}

// createdBy names by as a batch's CreatedBy: "operator:alice".
func createdBy(by *lapse.AuditEntry) string {
	if by.ActorName != "" {
		return by.ActorKind + ":" + by.ActorName
	}
	return by.ActorKind + ":" + by.ActorID
}

// accessOf returns tx, a transaction of the Closer's store, as the
// AccessStore it is.
func accessOf(tx lapse.Store) (lapse.AccessStore, error) {
	as, ok := tx.(lapse.AccessStore)
	if !ok {
		return nil, lapse.Errorf(lapse.EINTERNAL, "closes: the store's transaction %T keeps no audit log", tx)
	}
	return as, nil
}
