package sim

import (
	"fmt"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

// drainRounds bounds the end of a run: each round moves the clock on by
// drainStep and lets every component do its work, faults off.
const (
	drainRounds = 150
	drainStep   = 5 * time.Minute
)

// drain ends a run: a last crash, then faults off, and the clock moves on
// until every callback was sent, every deadline fired and every delivery
// finished.
func (w *world) drain() error {
	w.f.setOn(false)
	w.trig.up()
	w.logf("drain: a new process, faults off, redis up")
	if err := w.boot(); err != nil {
		return err
	}
	for round := range drainRounds {
		for _, n := range w.prov.refundsDone() {
			w.callbacks = append(w.callbacks, &callback{at: w.clock.Now(), n: n})
		}
		for _, c := range w.callbacks {
			c.at = w.clock.Now()
		}
		w.sendCallbacks()
		if _, err := w.cl.RunTriggerOnce(w.ctx); err != nil {
			return err
		}
		if _, err := w.cl.RunOnce(w.ctx); err != nil {
			return err
		}
		for {
			n, err := w.dl.RunOnce(w.ctx)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		idle, err := w.idle()
		if err != nil {
			return err
		}
		if idle {
			w.logf("drain: idle after %d rounds", round)
			return nil
		}
		w.clock.Advance(drainStep)
	}
	return w.violation("S8", "still busy after %d rounds of %v with faults off: %s", drainRounds, drainStep, w.busy())
}

// idle reports whether nothing is left to do: no callback queued, no
// deadline, no pending delivery, no refund processing.
func (w *world) idle() (bool, error) {
	if len(w.callbacks) > 0 {
		return false, nil
	}
	st := w.cfg.Store
	names := make([]string, len(w.flows))
	for i, f := range w.flows {
		names[i] = f.Name
	}
	if _, ok, err := st.OrderNextDeadline(w.ctx, names, time.Time{}); err != nil || ok {
		return false, err
	}
	dc, err := st.DeliveryCount(w.ctx)
	if err != nil || dc.Pending > 0 {
		return false, err
	}
	w.prov.mu.Lock()
	defer w.prov.mu.Unlock()
	return len(w.prov.notices) == 0, nil
}

func (w *world) busy() string {
	st := w.cfg.Store
	names := make([]string, len(w.flows))
	for i, f := range w.flows {
		names[i] = f.Name
	}
	next, ok, _ := st.OrderNextDeadline(w.ctx, names, time.Time{})
	dc, _ := st.DeliveryCount(w.ctx)
	return fmt.Sprintf("%d callbacks queued; next deadline %v (%v); %d deliveries pending", len(w.callbacks), next, ok, dc.Pending)
}

// final checks what must hold once everything settled: the audit of every
// order, then S3 money by money, S4 nothing held, S5 every delivery done or
// dead and visible, each done one to the outside subscriber received by it,
// the cards where the orders say, and the engine's own reconciliation
// clean.
func (w *world) final() error {
	if err := w.audit(true); err != nil {
		return err
	}
	if err := w.finalAudit(); err != nil {
		return err
	}
	st := w.cfg.Store
	orders, err := st.OrderList(w.ctx, &lapse.OrderListParams{})
	if err != nil {
		return err
	}
	for _, o := range orders {
		if err := w.finalOrder(o); err != nil {
			return err
		}
	}
	// S3: every customer payment the provider captured is on the books,
	// and settled.
	w.prov.mu.Lock()
	pays := make(map[string]*lapse.ProviderPayment, len(w.prov.pays))
	for k, v := range w.prov.pays {
		pays[k] = v
	}
	refunded := make(map[string]int64, len(w.prov.refunded))
	for k, v := range w.prov.refunded {
		refunded[k] = v
	}
	w.prov.mu.Unlock()
	for _, pp := range pays {
		w.check()
		p, err := st.PaymentGet(w.ctx, providerName, pp.TxnID)
		if err != nil {
			return w.violation("S3", "the provider captured %s for %s, which Lapse has no record of: %v", pp.TxnID, pp.OrderNo, err)
		}
		switch p.Status {
		case lapse.PaymentApplied:
			o, err := st.OrderGet(w.ctx, p.OrderNo)
			if err != nil {
				return err
			}
			refs, err := st.OrderRefundList(w.ctx, o.ID)
			if err != nil {
				return err
			}
			var back int64
			for _, r := range refs {
				if r.Status == lapse.OrderRefundSucceeded {
					back += r.Amount
				}
				if r.Status == lapse.OrderRefundRequested {
					return w.violation("S3", "refund %s of %s still requested after the drain", r.Key, o.OrderNo)
				}
			}
			if back != refunded[p.TxnID] {
				return w.violation("S3", "%s: Lapse's refunds of %s total %d; the provider refunded %d", o.OrderNo, p.TxnID, back, refunded[p.TxnID])
			}
		case lapse.PaymentRefunded:
			if refunded[p.TxnID] != p.Amount {
				return w.violation("S3", "late payment %s of %s: refunded, and the provider refunded %s of %s", p.TxnID, p.OrderNo,
					lapse.Money(refunded[p.TxnID], p.Currency), lapse.Money(p.Amount, p.Currency))
			}
		case lapse.PaymentReview:
			if refunded[p.TxnID] != 0 {
				return w.violation("S3", "payment %s of %s is in review, and the provider refunded %d", p.TxnID, p.OrderNo, refunded[p.TxnID])
			}
		default:
			return w.violation("S3", "payment %s of %s is still %s after the drain", p.TxnID, p.OrderNo, p.Status)
		}
	}
	dc, err := st.DeliveryCount(w.ctx)
	if err != nil {
		return err
	}
	w.check()
	if dc.Pending > 0 {
		return w.violation("S5", "%d deliveries still pending after the drain", dc.Pending)
	}
	w.check()
	rec, err := w.eng.Reconcile(w.ctx)
	if err != nil {
		return err
	}
	if len(rec.Issues) > 0 {
		is := rec.Issues[0]
		return w.violation("S3", "reconcile: %d issues, the first: %s %s %s: %s", len(rec.Issues), is.OrderNo, is.TxnID, is.Status, is.Problem)
	}
	return nil
}

// finalOrder checks one settled order: it holds no stock or coupon, its
// cards are as its state says, its dead deliveries are in review, and a
// group's members were charged as its state says.
func (w *world) finalOrder(o *lapse.Order) error {
	st := w.cfg.Store
	flow := w.flow(o.Flow)
	w.check()
	if flow.Holds {
		moves, err := st.StockMoveList(w.ctx, o.ID)
		if err != nil {
			return err
		}
		var held int64
		for _, m := range moves {
			switch m.Kind {
			case lapse.StockReserve:
				held += m.Qty
			default:
				held -= m.Qty
			}
		}
		if held != 0 {
			return w.violation("S4", "%s (%s) still holds %d of stock after the drain", o.OrderNo, o.State, held)
		}
		if o.Coupon != "" {
			c, err := st.CouponGet(w.ctx, o.Coupon)
			if err != nil {
				return err
			}
			if c.Status == lapse.CouponLocked && c.OrderNo == o.OrderNo {
				return w.violation("S4", "%s (%s) still holds coupon %s after the drain", o.OrderNo, o.State, o.Coupon)
			}
		}
	}
	if o.Flow == "membership" {
		keys, active := w.cards.grants(o.OrderNo)
		switch {
		case o.State == flows.Issued && !active:
			return w.violation("S5", "%s is ISSUED without active cards", o.OrderNo)
		case o.State == flows.MembershipRefunded && active:
			return w.violation("S5", "%s is REFUNDED with active cards", o.OrderNo)
		case o.State == flows.Cancelled && keys > 0:
			return w.violation("S5", "%s is CANCELLED and was granted cards", o.OrderNo)
		}
	}
	ds, err := st.DeliveryList(w.ctx, o.ID)
	if err != nil {
		return err
	}
	var dead []int64
	for _, d := range ds {
		if d.Status == lapse.DeliveryDead {
			dead = append(dead, d.ID)
		}
		w.check()
		if d.Subscriber == notifySubscriber && d.Status == lapse.DeliveryDone && !w.notify.has(d.EventID) {
			return w.violation("S5", "%s: delivery %d of %s to %s is done, and the subscriber never got it", o.OrderNo, d.ID, d.EventType, d.Subscriber)
		}
	}
	if len(dead) > 0 {
		w.check()
		rs, err := st.ReviewList(w.ctx, &lapse.ReviewListParams{OrderID: o.ID})
		if err != nil {
			return err
		}
		for _, id := range dead {
			found := false
			for _, r := range rs {
				found = found || r.DeliveryID == id
			}
			if !found {
				return w.violation("S5", "%s: delivery %d is dead and in no review", o.OrderNo, id)
			}
		}
	}
	if o.Flow == "groupbuy" {
		return w.finalGroup(o)
	}
	return nil
}

// finalGroup checks S7 on a settled group: a SETTLED group's members were
// each charged, once, with the provider's transaction on the books.
func (w *world) finalGroup(o *lapse.Order) error {
	ms, err := w.cfg.Store.GroupMemberList(w.ctx, o.ID)
	if err != nil {
		return err
	}
	w.check()
	w.prov.mu.Lock()
	defer w.prov.mu.Unlock()
	for _, m := range ms {
		pp := w.prov.charges[m.Key]
		switch {
		case m.Status == lapse.ChargeCharged && (pp == nil || pp.TxnID != m.TxnID):
			return w.violation("S7", "%s: member %s is charged (%s) and the provider has no such charge", o.OrderNo, m.UserID, m.TxnID)
		case o.State == flows.GroupSettled && m.Status != lapse.ChargeCharged:
			return w.violation("S7", "%s is SETTLED and member %s is %s", o.OrderNo, m.UserID, m.Status)
		case pp != nil && m.Status != lapse.ChargeCharged && o.State != flows.GroupFailed:
			return w.violation("S7", "%s (%s): the provider charged member %s (%s), who is %s", o.OrderNo, o.State, m.UserID, pp.TxnID, m.Status)
		}
	}
	return nil
}
