package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// The auditor checks S1–S9 (SPEC §5) from what the store holds and what the
// fakes at its edges recorded. It reads the store directly, past the
// faults. After every step it checks each order that changed since it last
// looked, and the payments, ledgers and fakes as a whole; every 20 steps and
// at the end, every order.

func (w *world) violation(inv, format string, args ...any) error {
	return &Violation{Seed: w.cfg.Seed, Step: w.step, Invariant: inv, Detail: fmt.Sprintf(format, args...)}
}

func (w *world) check() { w.checks++ }

func (w *world) flow(name string) *lapse.Flow {
	for _, f := range w.flows {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// audit checks the store after a step; full checks every order.
func (w *world) audit(full bool) error {
	if w.failed != nil {
		return w.failed
	}
	st := w.cfg.Store
	orders, err := st.OrderList(w.ctx, &lapse.OrderListParams{})
	if err != nil {
		return err
	}
	// The audit log before the orders: a row commits with its order's
	// change, so every change read below has its row in what was read.
	if w.rows, err = w.auditRows(); err != nil {
		return err
	}
	reserved := map[string]int64{} // sku → what live orders hold
	for _, o := range orders {
		w.states[o.OrderNo] = o.State
		if !full && w.seen[o.OrderNo] == o.Version {
			continue
		}
		if err := w.auditOrder(o, reserved); err != nil {
			return err
		}
		w.seen[o.OrderNo] = o.Version
	}
	if err := w.auditOperators(w.rows); err != nil {
		return err
	}
	if err := w.auditPayments(); err != nil {
		return err
	}
	if err := w.auditLedgers(full, reserved); err != nil {
		return err
	}
	return w.auditFakes()
}

// auditOrder checks one order's history: S1 (its transitions), S6 (their
// events), S2 (its payment windows and what paid it), S4 and S5 (its stock
// journal), adding what it still holds to reserved.
func (w *world) auditOrder(o *lapse.Order, reserved map[string]int64) error {
	st := w.cfg.Store
	flow := w.flow(o.Flow)
	trs, err := st.TransitionList(w.ctx, o.ID)
	if err != nil {
		return err
	}
	evs, err := st.OutboxList(w.ctx, o.ID)
	if err != nil {
		return err
	}
	// S1: every state change is a transition of the flow, from the state the
	// order was in; nothing follows a terminal state.
	w.check()
	if len(trs) == 0 || trs[0].FromState != "" || trs[0].ToState != flow.Initial {
		return w.violation("S1", "%s: its log does not start with its creation into %s", o.OrderNo, flow.Initial)
	}
	for i, tr := range trs[1:] {
		prev := trs[i]
		if s := flow.State(prev.ToState); s != nil && s.Terminal {
			return w.violation("S1", "%s: %s --%s--> %s after the terminal state %s", o.OrderNo, tr.FromState, tr.Event, tr.ToState, prev.ToState)
		}
		t := flow.Transition(tr.FromState, tr.Event)
		if tr.FromState != prev.ToState || t == nil || t.To != tr.ToState || tr.Version <= prev.Version {
			return w.violation("S1", "%s: %s --%s--> %s (v%d) does not follow %s (v%d) in flow %s",
				o.OrderNo, tr.FromState, tr.Event, tr.ToState, tr.Version, prev.ToState, prev.Version, flow.Name)
		}
	}
	if last := trs[len(trs)-1]; last.ToState != o.State {
		return w.violation("S1", "%s is %s, but its log ends in %s", o.OrderNo, o.State, last.ToState)
	}
	// S6: every transition committed with the events its flow emits.
	w.check()
	have := map[string]bool{}
	for _, ev := range evs {
		if eo, err := lapse.EventOrder(ev); err == nil {
			have[fmt.Sprintf("%s@%d", ev.Type, eo.Version)] = true
		}
	}
	for _, tr := range trs {
		emits := []string{lapse.EventOrderCreated}
		if tr.FromState != "" {
			emits = flow.Transition(tr.FromState, tr.Event).Emits
		}
		for _, typ := range emits {
			if !have[fmt.Sprintf("%s@%d", typ, tr.Version)] {
				return w.violation("S6", "%s: the transition %s --%s--> %s (v%d) has no %s event", o.OrderNo, tr.FromState, tr.Event, tr.ToState, tr.Version, typ)
			}
		}
	}
	if err := w.auditTransitionRows(o, trs, w.rows); err != nil {
		return err
	}
	if err := w.auditWindows(o, flow, trs, evs); err != nil {
		return err
	}
	return w.auditStock(o, flow, reserved)
}

// window is the end of an order's payment window from at on: its deadline,
// or its PayBy once its customer started paying.
type window struct {
	at     time.Time
	cutoff time.Time
}

// auditWindows checks S2 on one order: a window that had passed was never
// moved by a caller, no order was paid after it closed, and each payment
// that paid it was made before the window then in force.
func (w *world) auditWindows(o *lapse.Order, flow *lapse.Flow, trs []*lapse.TransitionRecord, evs []*lapse.OutboxEvent) error {
	if flow.Pays == "" {
		return nil
	}
	w.check()
	var ws []window
	var version int64
	for _, ev := range evs {
		eo, err := lapse.EventOrder(ev)
		if err != nil || eo.Version <= version {
			continue
		}
		version = eo.Version
		if eo.DeadlineAt == nil || flow.Transition(eo.State, flow.Pays) == nil {
			continue
		}
		cut := *eo.DeadlineAt
		if eo.PayBy != nil {
			cut = *eo.PayBy
		}
		if ev.Type == lapse.EventOrderDeadlineChanged && len(ws) > 0 {
			var p struct{ Deadline *lapse.DeadlineMove }
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				return err
			}
			prev := ws[len(ws)-1].cutoff
			// The closer's own moves (asking the provider again) leave PayBy
			// where it was; every other move is a caller's.
			if p.Deadline != nil && p.Deadline.FiredBy != lapse.FiredByPayment && !ev.CreatedAt.Before(prev) {
				return w.violation("S2", "%s: its payment window was moved at %s to %s, after the one in force had passed at %s",
					o.OrderNo, stamp(ev.CreatedAt), stamp(cut), stamp(prev))
			}
		}
		ws = append(ws, window{at: ev.CreatedAt, cutoff: cut})
	}
	closed := slices.ContainsFunc(trs, func(tr *lapse.TransitionRecord) bool {
		return tr.FromState != "" && flow.State(tr.ToState).Terminal && tr.Event != flow.Refunds.Done
	})
	paid := slices.ContainsFunc(trs, func(tr *lapse.TransitionRecord) bool { return tr.Event == flow.Pays })
	if closed && paid {
		return w.violation("S2", "%s was both paid and closed unpaid", o.OrderNo)
	}
	if !paid || len(ws) == 0 {
		return nil
	}
	pays, err := w.cfg.Store.PaymentList(w.ctx, &lapse.PaymentListParams{OrderID: o.ID, Status: lapse.PaymentApplied})
	if err != nil {
		return err
	}
	// A merchant refund leaves its payment applied; the payment that paid
	// the order is the one applied.
	if len(pays) != 1 {
		return w.violation("S3", "%s was paid, and has %d applied payments", o.OrderNo, len(pays))
	}
	p := pays[0]
	i := slices.IndexFunc(ws, func(x window) bool { return x.at.After(p.PaidAt) })
	if i < 0 {
		i = len(ws)
	}
	if in := ws[max(i-1, 0)].cutoff; !p.PaidAt.Before(in) {
		return w.violation("S2", "%s was paid by %s, made at %s, after the window then in force closed at %s",
			o.OrderNo, p.TxnID, stamp(p.PaidAt), stamp(in))
	}
	return nil
}

func stamp(t time.Time) string { return t.Format("15:04:05.000000") }

// auditStock checks S4 and S5 on one order's stock journal: each kind of
// move at most once per SKU, never more given back or used than reserved,
// not both; what a live order holds is added to reserved.
func (w *world) auditStock(o *lapse.Order, flow *lapse.Flow, reserved map[string]int64) error {
	if !flow.Holds {
		return nil
	}
	w.check()
	moves, err := w.cfg.Store.StockMoveList(w.ctx, o.ID)
	if err != nil {
		return err
	}
	by := map[string]map[lapse.StockMoveKind]int64{}
	count := map[string]int{}
	for _, m := range moves {
		if by[m.SKU] == nil {
			by[m.SKU] = map[lapse.StockMoveKind]int64{}
		}
		by[m.SKU][m.Kind] += m.Qty
		count[m.SKU+"/"+string(m.Kind)]++
		if count[m.SKU+"/"+string(m.Kind)] > 1 {
			return w.violation("S5", "%s: stock of %s was %sd twice", o.OrderNo, m.SKU, m.Kind)
		}
	}
	for sku, k := range by {
		back := k[lapse.StockRelease] + k[lapse.StockConsume]
		if k[lapse.StockRelease] > 0 && k[lapse.StockConsume] > 0 {
			return w.violation("S4", "%s: stock of %s was both released and consumed", o.OrderNo, sku)
		}
		if back > k[lapse.StockReserve] {
			return w.violation("S4", "%s: %d of %s given back or used, %d reserved", o.OrderNo, back, sku, k[lapse.StockReserve])
		}
		reserved[sku] += k[lapse.StockReserve] - back
	}
	return nil
}

// auditPayments checks S3 as far as it holds at every moment: every payment
// the store has is one the provider captured, for that amount, and nothing
// was refunded that was not captured, or twice.
func (w *world) auditPayments() error {
	w.check()
	pays, err := w.cfg.Store.PaymentList(w.ctx, &lapse.PaymentListParams{})
	if err != nil {
		return err
	}
	w.prov.mu.Lock()
	defer w.prov.mu.Unlock()
	for _, p := range pays {
		captured, ok := w.prov.captured[p.TxnID]
		if !ok || captured != p.Amount {
			return w.violation("S3", "payment %s of %s (%s) is not what the provider captured (%s)", p.TxnID, p.OrderNo,
				lapse.Money(p.Amount, p.Currency), lapse.Money(captured, p.Currency))
		}
		if p.Status == lapse.PaymentRefunded && w.prov.refunded[p.TxnID] < p.Amount {
			return w.violation("S3", "payment %s of %s is refunded; the provider refunded %s of %s", p.TxnID, p.OrderNo,
				lapse.Money(w.prov.refunded[p.TxnID], p.Currency), lapse.Money(p.Amount, p.Currency))
		}
	}
	for txn, r := range w.prov.refunded {
		if r > w.prov.captured[txn] {
			return w.violation("S3", "the provider refunded %d of %s, which captured %d", r, txn, w.prov.captured[txn])
		}
	}
	// S7: a group member is charged at most once (each member has a
	// payment method of its own).
	w.check()
	for m, n := range w.prov.byMethod {
		if n > 1 {
			return w.violation("S7", "the member paying with %s was charged %d times", m, n)
		}
	}
	return nil
}

// auditLedgers checks S4 on the ledgers: no stock line below zero, what
// lines hold is what live orders hold (full audits only), and each coupon's
// journal locks, then frees or uses, one order at a time.
func (w *world) auditLedgers(full bool, reserved map[string]int64) error {
	st := w.cfg.Store
	w.check()
	for _, sku := range w.skus {
		s, err := st.StockGet(w.ctx, sku)
		if err != nil {
			return err
		}
		if s.Reserved < 0 || s.OnHand < s.Reserved {
			return w.violation("S4", "stock of %s: on hand %d, reserved %d", sku, s.OnHand, s.Reserved)
		}
		if full && s.Reserved != reserved[sku] {
			return w.violation("S4", "stock of %s: %d reserved, but the orders' journals hold %d", sku, s.Reserved, reserved[sku])
		}
	}
	for _, code := range w.coupons {
		c, err := st.CouponGet(w.ctx, code)
		if err != nil {
			return err
		}
		moves, err := st.CouponMoveList(w.ctx, code)
		if err != nil {
			return err
		}
		w.check()
		holder, status := "", lapse.CouponAvailable
		for _, m := range moves {
			switch {
			case m.Kind == lapse.CouponLock && status == lapse.CouponAvailable:
				holder, status = m.OrderNo, lapse.CouponLocked
			case m.Kind == lapse.CouponUnlock && status == lapse.CouponLocked && holder == m.OrderNo:
				holder, status = "", lapse.CouponAvailable
			case m.Kind == lapse.CouponConsume && status == lapse.CouponLocked && holder == m.OrderNo:
				status = lapse.CouponUsed
			default:
				return w.violation("S4", "coupon %s: %s by %s while %s (held by %q)", code, m.Kind, m.OrderNo, status, holder)
			}
		}
		if c.Status != status || (status == lapse.CouponLocked && c.OrderNo != holder) {
			return w.violation("S4", "coupon %s is %s (%s), its journal says %s (%s)", code, c.Status, c.OrderNo, status, holder)
		}
	}
	return nil
}

// auditFakes checks S5 on the card port: an order's cards were granted
// under one key.
func (w *world) auditFakes() error {
	w.check()
	for _, o := range w.orders {
		if n, _ := w.cards.grants(o.no); n > 1 {
			return w.violation("S5", "%s: cards were granted under %d keys", o.no, n)
		}
	}
	return nil
}

// checkFired checks S8 after a claimer pass that reported no error: no
// order is left due.
func (w *world) checkFired() error {
	w.check()
	now := w.clock.Now()
	names := make([]string, len(w.flows))
	for i, f := range w.flows {
		names[i] = f.Name
	}
	due, err := w.cfg.Store.OrderClaimDue(w.ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: names, Limit: 5})
	if err != nil {
		return err
	}
	if len(due) > 0 {
		return w.violation("S8", "%s (%s, due %s) is still due after a claimer pass that reported no error", due[0].OrderNo, due[0].State, stamp(*due[0].DeadlineAt))
	}
	return nil
}

// checkTriggered checks S8 on the shared trigger after a pass of it that
// reported no error, in charge: no order is left due that the trigger owes
// a claim (it was told the order is due at its deadline, no process holds
// it under a lease, and it does not wait for a retry). Orders it was never told of (a deadline set by a
// process that crashed before handing it on, a commit whose answer was
// lost) are the sweep's, checked after the claimer runs.
func (w *world) checkTriggered() error {
	w.check()
	names := make([]string, len(w.flows))
	for i, f := range w.flows {
		names[i] = f.Name
	}
	now := w.clock.Now()
	due, err := w.cfg.Store.OrderClaimDue(w.ctx, &lapse.OrderClaimDueParams{DueBy: now, Flows: names, Limit: 1000})
	if err != nil {
		return err
	}
	for _, o := range due {
		if w.trig.owes(o.ID, *o.DeadlineAt, now) {
			return w.violation("S8", "%s (%s, due %s) is still due after a pass of the shared trigger that reported no error, which was told of it",
				o.OrderNo, o.State, stamp(*o.DeadlineAt))
		}
	}
	return nil
}
