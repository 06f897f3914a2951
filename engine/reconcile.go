package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
)

// Reconciliation is what Reconcile found: per currency, what was captured and
// where it went, and every payment or order that does not add up. The
// totals count payments and what group buy members' charges took alike.
type Reconciliation struct {
	Payments     int
	Held         int                     // payments held without their order, counted apart from Payments
	GroupCharges int                     // members of group buys charged
	Totals       map[string]*MoneyTotals // by currency
	Issues       []ReconcileIssue
}

// MoneyTotals sum payments and group buy members' charges of one currency
// by where they stand, in minor units. Captured = Applied + Refunded +
// Review + Open. Review is payments an operator has: in review, or late (or
// refunding) with their refund's delivery dead and its review open; and
// members' charges of a failed group, or charges that failed because the
// provider took what Lapse did not ask for. Open is money not yet settled
// either way (late or refunding otherwise; members' charges of a group
// still settling; a payment applied to an order that is not in the
// database, which only damage to it does). What merchant refunds gave back of an applied payment
// counts as refunded, and what merchant refunds in review (disputed, or
// made at the provider without Lapse) may have given back as in review.
// What merchant refunds asked and not answered yet may have given back is
// not settled, or in review while the review of their dead delivery is
// open (as a late payment's refund).
// Applied counts members' charges of settled groups. Payments held without
// their order (lapse.HeldPayment) count as in review while they wait for
// it, are in review, or are being refunded by an operator, and once
// dismissed by one (as a payment in review stays in review when its review
// is resolved: the books cannot say where the money went, only that an
// operator took it off the desk); refunded once refunded. One applied
// through the payment path, or whose transaction is recorded as a payment
// anyway, is counted as that payment, not twice.
type MoneyTotals struct {
	Captured, Applied, Refunded, Review, Open int64
	// Overflow is set when a sum did not fit in an int64: the totals are
	// then wrong, and the reconciliation has an issue saying so.
	Overflow bool
}

// totals returns the totals of currency cur, new ones when r has none yet.
func (r *Reconciliation) totals(cur string) *MoneyTotals {
	t := r.Totals[cur]
	if t == nil {
		t = &MoneyTotals{}
		r.Totals[cur] = t
	}
	return t
}

// add adds v to *sum, one of t's totals, marking t when it overflows.
func (t *MoneyTotals) add(sum *int64, v int64) {
	s, ok := lapse.AddInt64(*sum, v)
	if !ok {
		t.Overflow = true
	}
	*sum = s
}

// ReconcileIssue is one payment or order that does not reconcile.
type ReconcileIssue struct {
	OrderNo  string
	Provider string // empty for an order without its payment
	TxnID    string
	Status   lapse.PaymentStatus
	Problem  string
}

// reconcilePage is how many payments or orders Reconcile reads at a time.
const reconcilePage = 1000

// Reconcile checks payments against orders (S3): every captured payment is
// applied to exactly one paid order, refunded, or in review; every paid
// order has exactly one applied payment. Payments still late or refunding
// are reported too, their money not settled yet, unless their refund died
// into a review that is still open.
func (e *Engine) Reconcile(ctx context.Context) (*Reconciliation, error) {
	return e.feat.payments.reconcile(ctx)
}

func (ps *payments) reconcile(ctx context.Context) (*Reconciliation, error) {
	e := ps.e
	rec := &Reconciliation{Totals: map[string]*MoneyTotals{}}
	applied := map[string]int{} // order_no → applied payments
	var after int64
	for {
		page, err := e.store.PaymentList(ctx, &lapse.PaymentListParams{AfterID: after, Limit: reconcilePage})
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			if err := ps.reconcilePayment(ctx, rec, applied, p); err != nil {
				return nil, err
			}
			after = p.ID
		}
		if len(page) < reconcilePage {
			break
		}
	}
	if err := ps.reconcileHeld(ctx, rec); err != nil {
		return nil, err
	}
	for _, f := range e.Flows() {
		for _, ft := range e.feat.all {
			if r, ok := ft.(reconciler); ok && ft.serves(f) {
				if err := r.reconcile(ctx, rec, f); err != nil {
					return nil, err
				}
			}
		}
		for _, st := range f.PaidStates() {
			if err := ps.reconcileOrders(ctx, rec, applied, f.Name, st); err != nil {
				return nil, err
			}
		}
	}
	for _, cur := range slices.Sorted(maps.Keys(rec.Totals)) {
		if rec.Totals[cur].Overflow {
			rec.Issues = append(rec.Issues, ReconcileIssue{Problem: fmt.Sprintf("the %s totals do not fit in 64 bits: some amounts are beyond any real order", cur)})
		}
	}
	return rec, nil
}

func (ps *payments) reconcilePayment(ctx context.Context, rec *Reconciliation, applied map[string]int, p *lapse.Payment) error {
	e := ps.e
	rec.Payments++
	t := rec.totals(p.Currency)
	t.add(&t.Captured, p.Amount)
	issue := func(format string, args ...any) {
		rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: p.OrderNo, Provider: p.Provider, TxnID: p.TxnID, Status: p.Status,
			Problem: fmt.Sprintf(format, args...)})
	}
	switch p.Status {
	case lapse.PaymentApplied:
		applied[p.OrderNo]++
		o, err := e.store.OrderGet(ctx, p.OrderNo)
		if errors.Is(err, lapse.ErrOrderNotFound) {
			// Only damage to the database parts a payment from its
			// order: the report names it rather than end without it.
			t.add(&t.Open, p.Amount)
			issue("applied, but its order %s is not in the database", p.OrderNo)
			return nil
		}
		if err != nil {
			return err
		}
		// What merchant refunds gave back of it is refunded, not applied;
		// what those in review may have given back is an operator's.
		refunds, err := e.store.OrderRefundList(ctx, o.ID)
		if err != nil {
			return err
		}
		var back, held, asked int64
		var waiting []string // keys of refunds asked and not answered
		for _, r := range refunds {
			sum := &back
			switch {
			case r.PaymentID != p.ID:
				continue
			case r.Status == lapse.OrderRefundReview:
				sum = &held
			case r.Status == lapse.OrderRefundRequested:
				// Asked, and the provider's answer not in (lost, or
				// refused by a 5xx): it may have given the money back.
				sum = &asked
				waiting = append(waiting, r.Key)
			case r.Status != lapse.OrderRefundSucceeded:
				continue
			}
			var ok bool
			if *sum, ok = lapse.AddInt64(*sum, r.Amount); !ok {
				t.Overflow = true
			}
		}
		if out, ok := lapse.AddInt64(back, held); !ok || out > p.Amount {
			inReview := ""
			if held > 0 {
				inReview = fmt.Sprintf(" (%s of them in review)", lapse.Money(held, p.Currency))
			}
			issue("merchant refunds of %s%s exceed the %s it captured", lapse.Money(out, p.Currency), inReview, lapse.Money(p.Amount, p.Currency))
		}
		t.add(&t.Applied, p.Amount-back-held-asked)
		t.add(&t.Refunded, back)
		t.add(&t.Review, held)
		if asked > 0 {
			// As a late payment's refund: an operator has it while the
			// review of its dead delivery is open; otherwise not settled.
			died, err := ps.orderRefundInReview(ctx, o)
			if err != nil {
				return err
			}
			if died {
				t.add(&t.Review, asked)
			} else {
				t.add(&t.Open, asked)
				issue("merchant refunds %s of %s asked of the provider and not answered: neither refunded nor in review",
					strings.Join(waiting, ", "), lapse.Money(asked, p.Currency))
			}
		}
		f := e.flows.get(o.Flow)
		if f == nil || !slices.Contains(f.PaidStates(), o.State) {
			issue("applied, but order %s is %s, which is not a paid state", o.OrderNo, o.State)
		}
	case lapse.PaymentRefunded:
		t.add(&t.Refunded, p.Amount)
	case lapse.PaymentReview:
		t.add(&t.Review, p.Amount)
	default:
		// A late payment whose refund's delivery died is waiting in manual
		// review as much as one the provider refused: an operator has it
		// (retrying the delivery refunds it). Once the review is resolved
		// without a refund, it is open again.
		held, err := ps.refundInReview(ctx, p)
		if err != nil {
			return err
		}
		if held {
			t.add(&t.Review, p.Amount)
			return nil
		}
		t.add(&t.Open, p.Amount)
		issue("%s since %s: neither applied, refunded nor in review (%s)", p.Status, p.UpdatedAt.Format("2006-01-02 15:04:05Z07:00"), p.Reason)
	}
	return nil
}

// refundInReview reports whether the refund of p, a payment late or
// refunding, died into an open review: a delivery of its payment.late event
// to the refund subscriber is dead, and a review of that delivery is open.
// An order that went to review keeps its events and deliveries (OutboxPrune).
func (ps *payments) refundInReview(ctx context.Context, p *lapse.Payment) (bool, error) {
	st := ps.e.store
	if p.Status != lapse.PaymentLate && p.Status != lapse.PaymentRefunding {
		return false, nil
	}
	o, err := st.OrderGet(ctx, p.OrderNo)
	if errors.Is(err, lapse.ErrOrderNotFound) {
		return false, nil // not settled, and so reported
	}
	if err != nil {
		return false, err
	}
	rs, err := st.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || len(rs) == 0 {
		return false, err
	}
	ds, err := st.DeliveryList(ctx, o.ID)
	if err != nil {
		return false, err
	}
	dead := map[string][]int64{} // event id → dead refund deliveries
	for _, d := range ds {
		if d.Subscriber == RefundSubscriber && d.EventType == lapse.EventPaymentLate && d.Status == lapse.DeliveryDead {
			dead[d.EventID] = append(dead[d.EventID], d.ID)
		}
	}
	if len(dead) == 0 {
		return false, nil
	}
	evs, err := st.OutboxList(ctx, o.ID)
	if err != nil {
		return false, err
	}
	for _, ev := range evs {
		if ev.Type != lapse.EventPaymentLate || dead[ev.ID] == nil {
			continue
		}
		if late, err := lapse.EventPayment(ev); err != nil || late.Provider != p.Provider || late.TxnID != p.TxnID {
			continue
		}
		for _, r := range rs {
			if slices.Contains(dead[ev.ID], r.DeliveryID) {
				return true, nil
			}
		}
	}
	return false, nil
}

// orderRefundInReview reports whether the merchant refunds of order o died
// into an open review: a delivery to the refund subscriber of an event
// other than payment.late (whose refunds are the late payment's,
// refundInReview) is dead, and a review of that delivery is open.
func (ps *payments) orderRefundInReview(ctx context.Context, o *lapse.Order) (bool, error) {
	st := ps.e.store
	rs, err := st.ReviewList(ctx, &lapse.ReviewListParams{OrderID: o.ID, Open: true})
	if err != nil || len(rs) == 0 {
		return false, err
	}
	ds, err := st.DeliveryList(ctx, o.ID)
	if err != nil {
		return false, err
	}
	for _, d := range ds {
		if d.Subscriber != RefundSubscriber || d.EventType == lapse.EventPaymentLate || d.Status != lapse.DeliveryDead {
			continue
		}
		for _, r := range rs {
			if r.DeliveryID == d.ID {
				return true, nil
			}
		}
	}
	return false, nil
}

// reconcileOrders checks that every order of flow in state has exactly one
// applied payment.
func (ps *payments) reconcileOrders(ctx context.Context, rec *Reconciliation, applied map[string]int, flow string, state lapse.State) error {
	e := ps.e
	p := &lapse.OrderListParams{Flow: flow, State: state, Limit: reconcilePage}
	for {
		os, err := e.store.OrderList(ctx, p)
		if err != nil {
			return err
		}
		for _, o := range os {
			if n := applied[o.OrderNo]; n != 1 {
				rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: o.OrderNo,
					Problem: fmt.Sprintf("order is %s with %d applied payments, want exactly 1", o.State, n)})
			}
		}
		if len(os) < reconcilePage {
			return nil
		}
		last := os[len(os)-1]
		p.Before = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// reconcileHeld adds the payments held without their order to rec's totals
// (MoneyTotals).
func (ps *payments) reconcileHeld(ctx context.Context, rec *Reconciliation) error {
	st := ps.e.store
	var after int64
	for {
		page, err := st.HeldPaymentList(ctx, &lapse.HeldPaymentListParams{AfterID: after, Limit: reconcilePage})
		if err != nil {
			return err
		}
		for _, h := range page {
			after = h.ID
			if h.Status == lapse.HeldApplied {
				continue // counted as its payment
			}
			pay, err := st.PaymentGet(ctx, h.Provider, h.TxnID)
			switch {
			case err == nil:
				if h.OrderNo != pay.OrderNo || h.Amount != pay.Amount || h.Currency != pay.Currency {
					rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: h.OrderNo, Provider: h.Provider, TxnID: h.TxnID,
						Problem: fmt.Sprintf("held without its order as %s (held payment %d, %s), and recorded as %s of order %s: counted once, as the payment",
							lapse.Money(h.Amount, h.Currency), h.ID, h.Status, lapse.Money(pay.Amount, pay.Currency), pay.OrderNo)})
				} else if h.Status != lapse.HeldWaiting {
					// Not the matcher's next step: an operator settled, or
					// is settling, money that also paid the order (such
					// as a refunded one, applied by its callback again
					// before the payment path knew better).
					rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: h.OrderNo, Provider: h.Provider, TxnID: h.TxnID,
						Problem: fmt.Sprintf("held without its order (held payment %d) and %s, and also applied to order %s as payment %d: counted once, as the payment",
							h.ID, h.Status, pay.OrderNo, pay.ID)})
				}
				continue
			case !errors.Is(err, lapse.ErrPaymentNotFound):
				return err
			}
			rec.Held++
			t := rec.totals(h.Currency)
			t.add(&t.Captured, h.Amount)
			if h.Status == lapse.HeldRefunded {
				t.add(&t.Refunded, h.Amount)
			} else {
				t.add(&t.Review, h.Amount)
			}
		}
		if len(page) < reconcilePage {
			return nil
		}
	}
}
