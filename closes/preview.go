package closes

import (
	"context"
	"errors"
	"time"

	"github.com/lapsehq/lapse"
)

// pageSize is how many orders a selection reads from the store at a time.
const pageSize = 500

// sampleSize is how many orders a Preview shows.
const sampleSize = 10

// Preview is what a close would close now.
type Preview struct {
	// Count is the orders matched that a manual close ends
	// ((*lapse.Flow).ClosableByHand: waiting for payment, with a deadline
	// that ends the order): those a close would close.
	Count int64 `json:"count"`
	// Sample is the first of them (at most 10): in the order given for
	// order numbers, newest first otherwise.
	Sample []*lapse.Order `json:"sample"`
	// Skipped is the orders matched that would not be closed: paid, closed,
	// in a state whose deadline does not end a wait for payment (an open
	// group buy), of a flow the engine does not run,
	// and, for order numbers, those not found or of another flow than
	// Selector.Flow, so that Count and Skipped add up to the numbers given.
	Skipped int64 `json:"skipped"`
	// AsOf is when the preview began to read: a Start given the preview
	// leaves out the orders made or changed after it (see Start).
	AsOf time.Time `json:"as_of"`
	// Selection is the selector's Selection: a Start given the preview
	// with a Selection refuses another selector's.
	Selection string `json:"selection"`
}

// Preview counts the orders that sel chooses and a close would close now,
// and changes nothing. Errors: an invalid sel (Selector.Validate, or a Flow
// the engine does not run) is EINVALID; the store's errors as they are.
func (c *Closer) Preview(ctx context.Context, sel *Selector) (*Preview, error) {
	return c.preview(ctx, sel, time.Time{})
}

// PreviewSince is the preview, as of now, of the close of sel confirmed
// from previewed (nil: none): Count is the orders Start given previewed
// would close now, those closable that were not made or changed after
// previewed.AsOf, which may be more than previewed.Count (Start then
// closes nothing); the rest are Skipped. It is what such a close is judged
// by before it starts (four eyes), and, given to Start, bounds what it
// closes: nothing made or changed after it, and no more than its Count.
// It changes nothing. Errors: those of Preview, and EINVALID (field
// "preview") for a previewed of another selection, as Start refuses it.
func (c *Closer) PreviewSince(ctx context.Context, sel *Selector, previewed *Preview) (*Preview, error) {
	if err := c.check(sel); err != nil {
		return nil, err
	}
	if previewed != nil && previewed.Selection != "" && previewed.Selection != sel.Selection() {
		return nil, otherSelection()
	}
	var seen time.Time
	if previewed != nil {
		seen = previewed.AsOf
	}
	return c.preview(ctx, sel, seen)
}

// preview counts, as of now, the orders sel chooses that a close would
// close, leaving out (as Skipped) those made or changed after seen (zero:
// none is).
func (c *Closer) preview(ctx context.Context, sel *Selector, seen time.Time) (*Preview, error) {
	p := &Preview{Sample: []*lapse.Order{}, AsOf: c.e.Clock().Now()}
	if sel != nil {
		p.Selection = sel.Selection()
	}
	err := c.each(ctx, sel, func(o *lapse.Order, closable bool) error {
		if !closable || movedSince(o, seen) != unchanged {
			p.Skipped++
			return nil
		}
		p.Count++
		if len(p.Sample) < sampleSize {
			p.Sample = append(p.Sample, o)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// otherSelection refuses a close confirmed from another selection's
// preview.
func otherSelection() error {
	return lapse.FieldError("preview", "was made for another selection: preview this one, and confirm what it shows")
}

// check validates sel against the engine's flows.
func (c *Closer) check(sel *Selector) error {
	if err := sel.Validate(); err != nil {
		return err
	}
	if sel.Flow != "" && c.e.Flow(sel.Flow) == nil {
		return lapse.FieldError("flow", "no flow is called %q", sel.Flow)
	}
	return nil
}

// each validates sel and calls visit with every order it matches and
// whether it is closable now; an order number not found (or of another
// flow) is visited as a nil order, not closable. Order numbers are read one
// by one, in the order given; users and ranges page through OrderList,
// newest first, pageSize orders at a time.
func (c *Closer) each(ctx context.Context, sel *Selector, visit func(o *lapse.Order, closable bool) error) error {
	if err := c.check(sel); err != nil {
		return err
	}
	if len(sel.OrderNos) > 0 {
		for _, no := range sel.OrderNos {
			o, err := c.e.Order(ctx, no)
			switch {
			case errors.Is(err, lapse.ErrOrderNotFound):
				o = nil
			case err != nil:
				return err
			case sel.Flow != "" && o.Flow != sel.Flow:
				o = nil
			}
			if err := visit(o, o != nil && c.closable(o)); err != nil {
				return err
			}
		}
		return nil
	}
	p := &lapse.OrderListParams{UserID: sel.UserID, Flow: sel.Flow, CreatedFrom: sel.From, CreatedTo: sel.To, Limit: pageSize}
	for {
		page, err := c.e.Orders(ctx, p)
		if err != nil {
			return err
		}
		for _, o := range page {
			if err := visit(o, c.closable(o)); err != nil {
				return err
			}
		}
		if len(page) < pageSize {
			return nil
		}
		last := page[len(page)-1]
		p.Before = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// closable reports whether a manual close may close o now
// ((*lapse.Flow).ClosableByHand): a wait for payment whose deadline ends
// the order. Run checks it again as it closes each order.
func (c *Closer) closable(o *lapse.Order) bool {
	f := c.e.Flow(o.Flow)
	return f != nil && f.ClosableByHand(o.State)
}
