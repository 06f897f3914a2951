package lapse

import "time"

// OutboxPruneParams is one step of a pass of Store.OutboxPrune over the
// outbox.
type OutboxPruneParams struct {
	// Before: only events created before it are deleted.
	Before time.Time
	// Now is when the step runs, not before Before. A store that lays the
	// outbox out by time makes room ahead of it for the events to come.
	Now time.Time
	// From is where the step reads on: 0 at the start of a pass, then the
	// Next of the step before.
	From int64
	// Limit is about how many events the step reads. A store that reads
	// the outbox by page reads as many pages as hold about that many.
	Limit int
}

// OutboxPruned is what a step of OutboxPrune did.
type OutboxPruned struct {
	Deleted int   // events deleted, each with its deliveries, attempts and effects
	Next    int64 // where the next step reads on; 0 at the end of the pass
}

// Validate reports a step that no store may be given, as an EINVALID error
// naming the field: no Before, no Now or one before Before, a negative
// From, a Limit below 1.
func (p *OutboxPruneParams) Validate() error {
	switch {
	case p.Before.IsZero():
		return FieldError("before", "a prune names the time before which events may go")
	case p.Now.IsZero():
		return FieldError("now", "a prune names the time it runs at")
	case p.Now.Before(p.Before):
		return FieldError("now", "a prune runs at %s, before the time %s it prunes up to", p.Now.Format(time.RFC3339Nano), p.Before.Format(time.RFC3339Nano))
	case p.From < 0:
		return FieldError("from", "a position is 0 or one a prune returned, not %d", p.From)
	case p.Limit < 1:
		return FieldError("limit", "a prune reads at least one event")
	}
	return nil
}
