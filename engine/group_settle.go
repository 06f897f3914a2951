package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/lapsehq/lapse"
)

// groupCharges bounds the charges of one group in flight at once.
const groupCharges = 8

// settler charges every member of a closed group, then settles it; when
// charges still fail on the last attempt of its schedule, it fails the
// group. A group that closed with fewer members than it needs
// (GroupMinMembers: none, by default) fails at once, no one charged. Each
// round reads the group and its members again, so a settlement
// interrupted anywhere (a crash, a lost lease) resumes where it stopped:
// members charged are never charged again, and a member whose charge was
// under way is asked about at the provider before it is charged.
type settler struct{ gb *groupBuys }

func (s settler) Deliver(ctx context.Context, d *lapse.Delivery) error {
	e := s.gb.e
	g, err := s.gb.group(ctx, d.OrderNo)
	if err != nil {
		return err
	}
	flow := e.flows.get(g.Order.Flow)
	if flow.Transition(g.Order.State, flow.Group.Settled) == nil {
		return nil // settled, failed or retried meanwhile: this round has nothing to do
	}
	by := Actor{FiredBy: lapse.FiredByEffect, Name: "engine " + e.node}
	need, err := GroupMinMembers(g.Order)
	if err != nil || len(g.Members) < need {
		why := fmt.Sprintf("%d members joined, fewer than the %d the group needs: no one was charged", len(g.Members), need)
		if err != nil {
			// Checked at creation; a group stored before its keys were
			// read exactly ({"Min_Members": 5}) is not charged on a guess.
			why = fmt.Sprintf("its metadata does not say how many members it needs (%s): no one was charged", lapse.ErrorMessage(err))
		}
		_, err := e.Fire(ctx, g.Order.OrderNo, Fire{Event: flow.Group.Failed, By: by, Reason: why})
		if err != nil && lapse.ErrorCode(err) != lapse.ECONFLICT {
			return err
		}
		e.log.Warn("group buy failed: too few members", "group", g.Order.OrderNo, "members", len(g.Members), "min_members", need)
		return nil
	}
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
		slots  = make(chan struct{}, groupCharges)
	)
	for _, m := range g.Members {
		if m.Status == lapse.ChargeCharged {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := s.charge(ctx, m); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", m.UserID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) == 0 {
		_, err := e.Fire(ctx, g.Order.OrderNo, Fire{Event: flow.Group.Settled, By: by,
			Reason: fmt.Sprintf("all %d members charged", len(g.Members))})
		if lapse.ErrorCode(err) == lapse.ECONFLICT {
			return nil // another round settled it first
		}
		return err
	}
	slices.Sort(failed)
	why := fmt.Sprintf("%d of %d charges failed: %s", len(failed), len(g.Members), failed[0])
	if len(failed) > 1 {
		why += fmt.Sprintf(" (and %d more)", len(failed)-1)
	}
	if d.Final {
		_, err := e.Fire(ctx, g.Order.OrderNo, Fire{Event: flow.Group.Failed, By: by, Reason: why + "; retries exhausted"})
		if err != nil && lapse.ErrorCode(err) != lapse.ECONFLICT {
			return err
		}
		e.log.Error("group buy failed: charges failed through the whole retry schedule", "group", g.Order.OrderNo, "err", why)
		// Failing is this settlement's end, not an error: an operator's
		// RETRY starts another.
		return nil
	}
	return errors.New(why)
}

// charge charges one member at most once: the member is claimed (pending or
// failed → charging, one more attempt) before the provider is called, and a
// member found charging (a call whose answer was lost, or a worker that
// died) is asked about first. A paid answer, to either, is recorded by
// chargeAnswered, as the provider's callback about the charge is. Only a
// failure that took nothing for certain fails the charge (a refusal for
// good, a call never sent: chargeFailed) or an answer that took nothing
// (closed, refunded); any other failure leaves the member charging.
func (s settler) charge(ctx context.Context, m *lapse.GroupMember) error {
	gb := s.gb
	prov := gb.providers[m.Provider]
	if prov == nil {
		return fmt.Errorf("no payment provider port %q is configured", m.Provider)
	}
	if m.Status == lapse.ChargeCharging {
		pay, err := prov.Query(ctx, m.Key)
		if err == nil {
			err = answerAbout(m.Provider, m.Key, pay)
		}
		switch {
		case err == nil && pay.Status == lapse.ProviderPaid:
			return s.answered(ctx, m, pay)
		case err != nil && !errors.Is(err, lapse.ErrProviderNotFound):
			return fmt.Errorf("asking %s about the charge under way: %w", m.Provider, err)
		}
		// Not made: charge under the same key, which is safe to send again.
	} else if err := gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeCharging, Attempt: true}); err != nil {
		if errors.Is(err, lapse.ErrStale) {
			return fmt.Errorf("another worker has the charge")
		}
		return err
	}
	pay, err := prov.Charge(ctx, &lapse.ChargeRequest{IdempotencyKey: m.Key, OrderNo: m.Key, Amount: m.Amount,
		Currency: m.Currency, Method: m.Method})
	if err == nil {
		err = answerAbout(m.Provider, m.Key, pay)
	}
	switch {
	case err == nil && pay.Status == lapse.ProviderPaid:
		return s.answered(ctx, m, pay)
	case err == nil && pay.Status == lapse.ProviderPending:
		// Started, not paid yet: left charging, asked about next round.
		return fmt.Errorf("the provider answered the charge with status %s", pay.Status)
	case err == nil:
		// Closed (or refunded): the provider's last word on the charge
		// under this key, which took nothing from the member. Left
		// charging, the member would read as a call whose answer was lost
		// for good, with no error on it.
		err = fmt.Errorf("the provider answered the charge with status %s: the member was not charged", pay.Status)
	case !chargeFailed(err):
		// Neither a decline nor a call that was never sent: a timeout, a
		// 5xx (a gateway's 502 or 504 may come after the capture), a
		// connection lost, an answer that cannot be read. The provider
		// may have charged the member, so the member stays charging, its
		// outcome unknown: the next round asks under the same key before
		// charging again (or the provider's callback answers), and the
		// group settles only once it is known. Failed on a guess, the
		// member would read as not charged while the money may be taken.
		return fmt.Errorf("the charge's outcome is unknown, asked about next round: %w", err)
	}
	p := &lapse.GroupMemberUpdateParams{From: lapse.ChargeCharging, To: lapse.ChargeFailed, Error: lapse.Reason(err)}
	if uerr := gb.updateMember(ctx, m, p); uerr != nil {
		return uerr
	}
	return err
}

// chargeFailed reports whether err, a provider port's failure to charge,
// says for certain that nothing was charged: a refusal for good (a
// decline), or a call that never reached the provider. Anything else may
// have been captured.
func chargeFailed(err error) bool {
	if errors.Is(err, lapse.ErrUnknownOutcome) {
		return false
	}
	return errors.Is(err, lapse.ErrRefused) || errors.Is(err, lapse.ErrNotSent)
}

// answered records pay, the provider's paid answer about member m's charge
// (charging), and returns an error unless m is charged: the round does not
// count m charged by a charge of another amount. A callback that recorded
// the same charge first is not an error. A member that moved while the
// provider answered (a callback charged it, or failed it, by another
// transaction) is read again and the answer decided on it as it is, as a
// callback's is: the answer is a capture the provider made, which the
// books must hold whatever the member became.
func (s settler) answered(ctx context.Context, m *lapse.GroupMember, pay *lapse.ProviderPayment) error {
	err := s.gb.chargeAnswered(ctx, m, pay)
	for range maxStaleRetries {
		if !errors.Is(err, lapse.ErrStale) {
			break
		}
		got, gerr := s.gb.e.store.GroupMemberGet(ctx, m.Key)
		if gerr != nil {
			return gerr
		}
		*m = *got
		err = s.gb.chargeAnswered(ctx, m, pay)
	}
	if errors.Is(err, lapse.ErrStale) {
		return fmt.Errorf("the member's charge kept moving while the provider answered: it is %s", m.Status)
	}
	if err != nil {
		return err
	}
	if m.Status != lapse.ChargeCharged {
		return errors.New(m.LastError)
	}
	return nil
}

// reconcile counts what the members of f's group buys were charged:
// applied once the group settled, in review (an operator holds it) when it
// failed, refunded once its group was abandoned and its refund made (not
// settled while the refund is under way: reconcileRefund); charges of a group still settling are not settled yet, and a
// charge of a group that never closed is an issue. What a provider took
// from a member whose charge failed because it was not what Lapse asked
// for is in review (reconcileUncharged).
func (gb *groupBuys) reconcile(ctx context.Context, rec *Reconciliation, f *lapse.Flow) error {
	e := gb.e
	p := &lapse.OrderListParams{Flow: f.Name, Limit: reconcilePage}
	for {
		gs, err := e.store.OrderList(ctx, p)
		if err != nil {
			return err
		}
		for _, g := range gs {
			ms, err := e.store.GroupMemberList(ctx, g.ID)
			if err != nil {
				return err
			}
			for _, m := range ms {
				if m.Status == lapse.ChargeRefunding || m.Status == lapse.ChargeRefunded {
					gb.reconcileRefund(rec, g, m)
					continue
				}
				if m.Status != lapse.ChargeCharged {
					gb.reconcileUncharged(rec, f, g, m)
					continue
				}
				rec.GroupCharges++
				t := rec.totals(m.Currency)
				t.add(&t.Captured, m.Amount)
				issue := func(problem string) {
					rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: g.OrderNo, Provider: m.Provider, TxnID: m.TxnID, Problem: problem})
				}
				switch {
				case f.State(g.State).Terminal && f.Transition(g.State, f.Group.Retry) == nil && g.CloseReason == string(f.Group.Settled):
					t.add(&t.Applied, m.Amount)
				case f.Transition(g.State, f.Group.Retry) != nil:
					t.add(&t.Review, m.Amount)
				case f.Transition(g.State, f.Group.Settled) != nil:
					t.add(&t.Open, m.Amount)
					issue(fmt.Sprintf("member %s was charged; the group is %s, still settling", m.UserID, g.State))
				default:
					t.add(&t.Open, m.Amount)
					issue(fmt.Sprintf("member %s was charged, but the group is %s, which does not settle", m.UserID, g.State))
				}
			}
		}
		if len(gs) < reconcilePage {
			return nil
		}
		last := gs[len(gs)-1]
		p.Before = &lapse.OrderCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// reconcileUncharged counts what the provider took by the transaction of
// m, a member of group g (of flow f) not charged: what Lapse did not ask
// for, in review (an operator was told on the group). A transaction whose
// amount the books do not hold (an earlier Lapse kept only its id) is money
// that cannot be placed, an issue. So is a member left charging by a group
// that no longer settles (the provider's answer to its charge lost, and no
// round left to ask again): the provider may have captured it, and only
// the provider can say; counted nowhere, as no one knows it was taken. One
// charging in a group still settling is not settled either, as a charged
// one is not (reconcile), and named, should that settlement never end.
func (gb *groupBuys) reconcileUncharged(rec *Reconciliation, f *lapse.Flow, g *lapse.Order, m *lapse.GroupMember) {
	switch {
	case m.Status == lapse.ChargeCharging && f.Transition(g.State, f.Group.Settled) != nil:
		// As a charged member's of a group still settling: not settled.
		rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: g.OrderNo, Provider: m.Provider, TxnID: m.TxnID,
			Problem: fmt.Sprintf("member %s's charge of %s is under way at %s (idempotency key %s); the group is %s, still settling: its next round asks the provider",
				m.UserID, lapse.Money(m.Amount, m.Currency), m.Provider, m.Key, g.State)})
	case m.Status == lapse.ChargeCharging:
		todo := "ask the provider under that key, and refund what it took"
		if f.Transition(g.State, f.Group.Retry) != nil {
			todo = "retry the group (its settlement asks the provider first, and charges no one twice)"
		}
		rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: g.OrderNo, Provider: m.Provider, TxnID: m.TxnID,
			Problem: fmt.Sprintf("member %s's charge of %s is still charging at %s (idempotency key %s), but the group is %s, which does not settle: the provider may have captured it; %s",
				m.UserID, lapse.Money(m.Amount, m.Currency), m.Provider, m.Key, g.State, todo)})
	case m.TxnID == "":
	case m.CapturedCurrency == "":
		rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: g.OrderNo, Provider: m.Provider, TxnID: m.TxnID,
			Problem: fmt.Sprintf("member %s's charge is %s with a transaction the provider made, of an amount not on the books (%s)", m.UserID, m.Status, m.LastError)})
	default:
		t := rec.totals(m.CapturedCurrency)
		t.add(&t.Captured, m.CapturedAmount)
		t.add(&t.Review, m.CapturedAmount)
	}
}

// reconcileRefund counts member m's charge, of group g abandoned, as
// refunded once its refund was made, and as not settled while it is under
// way (an issue naming its refund key, should it never end).
func (gb *groupBuys) reconcileRefund(rec *Reconciliation, g *lapse.Order, m *lapse.GroupMember) {
	rec.GroupCharges++
	t := rec.totals(m.Currency)
	t.add(&t.Captured, m.Amount)
	if m.Status == lapse.ChargeRefunded {
		t.add(&t.Refunded, m.Amount)
		return
	}
	t.add(&t.Open, m.Amount)
	rec.Issues = append(rec.Issues, ReconcileIssue{OrderNo: g.OrderNo, Provider: m.Provider, TxnID: m.TxnID,
		Problem: fmt.Sprintf("member %s's charge of %s is being refunded at %s (refund key %s); the group is %s",
			m.UserID, lapse.Money(m.Amount, m.Currency), m.Provider, lapse.GroupRefundKey(m.Key), g.State)})
}
