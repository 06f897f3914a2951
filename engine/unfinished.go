package engine

import (
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
)

// An attempt whose worker dies during it (killed, out of memory) is never
// recorded: its delivery is claimed again once its lease ends, and each
// claim counts an attempt. An attempt cut short (a stop, a lease lost) is
// recorded, but never as the death of its delivery. When an event itself
// kills its workers, or its attempts are cut short every time, the
// delivery would go round the workers for ever, neither delivered nor
// dead. So a delivery claimed more than unfinishedMost times past the
// attempts of its schedule, each of those claims one whose attempt never
// ended (lapse.Delivery.Unfinished), is not attempted again: it dies, and
// its order goes to review, like any delivery that ran out of retries.
//
// A delivery past its schedule whose attempts did end is not one of them:
// its schedule was shortened under it (a reload or a restart with fewer
// attempts). It gets its next attempt, and dies of that attempt's failure,
// as having run out of retries, which is true, rather than of attempts
// that never ended, which never happened.

// unfinishedMost bounds the attempts past its schedule that a delivery may
// be claimed for while none of them ends: room for a few stops in a row (a
// rolling restart), not for a loop.
const unfinishedMost = 5

// overrun reports whether dl, claimed for this attempt, has been claimed
// more than unfinishedMost times past the attempts of s's schedule, and
// the attempts of those claims never ended. The claims past the schedule
// are counted off the claims, not by adding the bound to the schedule's
// attempts, which may be as many as an int holds ("retry for ever"):
// added, it would overflow into a bound every delivery has passed at its
// first claim.
func overrun(s *Subscription, dl *lapse.Delivery) bool {
	return min(neverEnded(dl), dl.Failures()-1-s.retries().Attempts()) >= unfinishedMost
}

// neverEnded returns how many claims of dl in a row, before the one that
// runs now, did not end through the subscriber.
func neverEnded(dl *lapse.Delivery) int { return max(0, dl.Unfinished-1) }

// abandon records, instead of an attempt of dl, its death for overrun.
func (d *Deliverer) abandon(s *Subscription, dl *lapse.Delivery, rec *lapse.DeliveryAttempt, wall time.Time,
	finish func(lapse.Store, *lapse.DeliveryFinishParams) error) {
	rec.Outcome = lapse.OutcomeError
	rec.Error = fmt.Sprintf("not attempted again: its last %d attempts never ended (their workers died, or stopped, during them), "+
		"claimed %d times for a schedule of %d attempts", neverEnded(dl), dl.Failures(), s.retries().Attempts())
	p := &lapse.DeliveryFinishParams{Status: lapse.DeliveryPending, Error: rec.Error}
	d.die(s, dl, p, false)
	d.settled(s, dl, finish(d.e.work, p), rec.Outcome, wall, rec.Error)
	d.e.log.Error("deliverer: delivery died of attempts that never ended; its order is in manual review", "delivery", dl.ID,
		"subscriber", s.Name, "order_no", dl.OrderNo, "event", dl.EventType, "attempts", dl.Attempts)
}
