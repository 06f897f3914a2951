package engine

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/lapsehq/lapse"
)

// A handler that panics on an event would take its worker down, and then
// each worker that takes the delivery over when its lease ends: the attempt
// is never recorded, so the delivery never dies, and it goes round the
// nodes for ever. The deliverer calls its handlers through these, which
// turn a panic into the failure of that attempt, logged with its stack:
// retried on schedule and, when it panics every time, dead and in review.

// callHandler runs call, a call of s's handler named what, and returns the
// panic it ends with as an error. A panic of an outside call leaves its
// outcome unknown: the event may have gone out before it.
func (d *Deliverer) callHandler(s *Subscription, what string, call func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		d.e.log.Error("deliverer: a handler panicked; the attempt fails", "subscriber", s.Name, "call", what,
			"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		err = fmt.Errorf("engine: subscriber %s panicked: %v", s.Name, r)
		if s.Local == nil && what != "Query" {
			err = fmt.Errorf("%w: %w", err, lapse.ErrUnknownOutcome)
		}
	}()
	return call()
}

// deliverMany is h.DeliverMany(ctx, ds) through callHandler: a panic fails each
// of ds.
func (d *Deliverer) deliverMany(ctx context.Context, s *Subscription, h lapse.BatchHandler, ds []*lapse.Delivery) []error {
	var errs []error
	if err := d.callHandler(s, "DeliverMany", func() error { errs = h.DeliverMany(ctx, ds); return nil }); err != nil {
		errs = make([]error, len(ds))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}
