package engine

import (
	"context"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// unservedCheckTimeout bounds the count warnUnserved reads when a Deliverer
// starts, and so how long a Stop right after the start waits for it.
const unservedCheckTimeout = 5 * time.Second

// Unserved returns the pending deliveries of subscribers that this engine
// does not have (a webhook, a broker or a port taken out of the
// configuration while events were on their way to it), by subscriber:
// nothing delivers them, and nothing ends them, until the subscriber is
// configured again. They are counted by the deliveries-by-subscriber metric
// and age the oldest pending one.
func (e *Engine) Unserved(ctx context.Context) ([]*lapse.DeliveryStatusCount, error) {
	counts, err := e.store.DeliveryCountBySubscriber(ctx)
	if err != nil {
		return nil, err
	}
	var out []*lapse.DeliveryStatusCount
	for _, c := range counts {
		if c.Status != lapse.DeliveryPending || c.N == 0 {
			continue
		}
		if !slices.ContainsFunc(e.subs, func(s *Subscription) bool { return s.Name == c.Subscriber }) {
			out = append(out, c)
		}
	}
	return out, nil
}

// warnUnserved logs, once, each subscriber that is not configured here and
// has deliveries pending (Unserved): for the merchant's stock or coupon
// port, say, what the merchant holds for those orders is not given back
// until it is configured again. A Stop does not cut it short: it is one
// count, bounded by unservedCheckTimeout.
func (d *Deliverer) warnUnserved(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unservedCheckTimeout)
	defer cancel()
	subs, err := d.e.Unserved(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.e.log.Warn("deliverer: the deliveries pending for subscribers not configured here could not be counted", "err", err)
		}
		return
	}
	for _, c := range subs {
		d.e.log.Warn("deliverer: deliveries are pending for a subscriber that is not configured here: nothing delivers them until it is configured again",
			"subscriber", c.Subscriber, "pending", c.N)
	}
}
