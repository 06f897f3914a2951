package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/lapsehq/lapse"
)

// GroupRefundSubscriber names the built-in subscription that refunds the
// members of an abandoned group buy (AbandonGroup).
const GroupRefundSubscriber = "group-refund"

// AbandonGroup has an operator give up on a failed group buy: the group
// moves to its flow's terminal state for it (groupbuy: ABANDONED) by the
// event Group.Abandon, and the outbox event Group.Refund it emits has the
// GroupRefundSubscriber refund every member charged, once, under a refund
// key derived from the member's charge key (lapse.GroupRefundKey); a
// member whose charge is under way is asked about first, and refunded if
// it was charged; the others are released. Errors, with nothing changed:
// ErrRetryNotGroup (refined) for an order that is not a group buy;
// EINVALID for a group of a flow that cannot be abandoned, or a reason
// that is not one line of at most lapse.MaxReasonLen bytes; ECONFLICT when
// the group has not failed, or when a member to refund has no provider
// port configured; ENOTFOUND.
func (e *Engine) AbandonGroup(ctx context.Context, groupID, reason string, by Actor) (*lapse.Order, error) {
	if err := lapse.CheckReason("reason", reason); err != nil {
		return nil, err
	}
	o, flow, err := e.abandonPlan(ctx, groupID)
	if err != nil {
		return nil, err
	}
	gb := e.feat.groups
	ms, err := e.store.GroupMemberList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if (m.Status == lapse.ChargeCharged || m.Status == lapse.ChargeCharging) && gb.providers[m.Provider] == nil {
			return nil, lapse.Errorf(lapse.ECONFLICT, "member %s of group %s was charged through %s, and no payment provider port %q is configured to refund it",
				m.UserID, o.OrderNo, m.Provider, m.Provider)
		}
	}
	if reason == "" {
		reason = "abandoned by an operator"
	}
	moved, err := e.fire(ctx, groupID, Fire{Event: flow.Group.Abandon, Reason: reason, By: by}, nil)
	if lapse.ErrorCode(err) == lapse.ECONFLICT {
		st := o.State
		if cur, gerr := e.store.OrderGet(ctx, groupID); gerr == nil {
			st = cur.State
		}
		return nil, lapse.Errorf(lapse.ECONFLICT, "group %s is %s: only a failed group can be abandoned", o.OrderNo, st)
	}
	return moved, err
}

// AbandonGroupStake is what AbandonGroup of the group may refund, in minor
// units of its currency: what each member charged, or whose charge is
// under way, paid. Errors: those AbandonGroup returns before it tries the
// group's state.
func (e *Engine) AbandonGroupStake(ctx context.Context, groupID string) (amount int64, currency string, err error) {
	o, _, err := e.abandonPlan(ctx, groupID)
	if err != nil {
		return 0, "", err
	}
	ms, err := e.store.GroupMemberList(ctx, o.ID)
	if err != nil {
		return 0, "", err
	}
	for _, m := range ms {
		if m.Status != lapse.ChargeCharged && m.Status != lapse.ChargeCharging {
			continue
		}
		var ok bool
		if amount, ok = lapse.AddInt64(amount, m.Amount); !ok {
			amount = math.MaxInt64
		}
	}
	return amount, o.Currency, nil
}

func (e *Engine) abandonPlan(ctx context.Context, groupID string) (*lapse.Order, *lapse.Flow, error) {
	o, err := e.store.OrderGet(ctx, groupID)
	if err != nil {
		return nil, nil, err
	}
	flow, err := e.flows.of(o)
	if err != nil {
		return nil, nil, err
	}
	if !e.feat.groups.serves(flow) {
		return nil, nil, lapse.Refine(ErrRetryNotGroup, "order %s follows flow %s, which is not a group buy", o.OrderNo, flow.Name)
	}
	if flow.Group.Abandon == "" {
		return nil, nil, lapse.Errorf(lapse.EINVALID, "group %s follows flow %s, which names no abandon event", o.OrderNo, flow.Name)
	}
	return o, flow, nil
}

// refundSubscriptions returns the subscription that refunds the members of
// abandoned groups.
func (gb *groupBuys) refundSubscriptions(flows []*lapse.Flow) []Subscription {
	var events []string
	for _, f := range flows {
		if f.Group.Refund != "" {
			addNew(&events, f.Group.Refund)
		}
	}
	if len(events) == 0 {
		return nil
	}
	return []Subscription{{
		Name:    GroupRefundSubscriber,
		Events:  events,
		Flows:   flowNames(flows),
		Handler: groupRefunder{gb},
		// Money going back: the refund subscriber's schedule.
		Schedule: lapse.Schedule{Steps: []time.Duration{
			time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
			2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 8 * time.Hour}, Jitter: 0.1},
		Concurrency: 4,
	}}
}

// groupRefunder refunds the members of an abandoned group. Each round
// reads the members again, so one interrupted anywhere resumes where it
// stopped: a member refunded is never refunded again, and one refunding
// is asked for its refund again under the same key, which the provider
// answers with the same refund (never a second). A round that leaves a
// member to do fails, and is retried on the schedule; one that runs out
// dies into review, as every delivery does.
type groupRefunder struct{ gb *groupBuys }

func (r groupRefunder) Deliver(ctx context.Context, d *lapse.Delivery) error {
	g, err := r.gb.group(ctx, d.OrderNo)
	if err != nil {
		return err
	}
	var left []string
	for _, m := range g.Members {
		if err := r.member(ctx, m); err != nil {
			left = append(left, fmt.Sprintf("%s: %v", m.UserID, err))
		}
	}
	if len(left) == 0 {
		return nil
	}
	slices.Sort(left)
	why := fmt.Sprintf("%d of %d members not refunded or released yet: %s", len(left), len(g.Members), left[0])
	if len(left) > 1 {
		why += fmt.Sprintf(" (and %d more)", len(left)-1)
	}
	return errors.New(why)
}

// member refunds member m of an abandoned group, or releases it: charged
// (or refunding) is refunded; charging is asked about first; pending, or
// failed having taken nothing, is released. A failed charge that holds
// what the provider took is in review on the group already, for an
// operator: it is left as it is.
func (r groupRefunder) member(ctx context.Context, m *lapse.GroupMember) error {
	gb := r.gb
	switch m.Status {
	case lapse.ChargeRefunded, lapse.ChargeReleased:
		return nil
	case lapse.ChargeFailed, lapse.ChargePending:
		if m.TxnID != "" {
			return nil
		}
		return gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeReleased, Error: m.LastError})
	case lapse.ChargeCharging:
		prov := gb.providers[m.Provider]
		if prov == nil {
			return fmt.Errorf("no payment provider port %q is configured", m.Provider)
		}
		pay, err := prov.Query(ctx, m.Key)
		if err == nil {
			err = answerAbout(m.Provider, m.Key, pay)
		}
		switch {
		case errors.Is(err, lapse.ErrProviderNotFound) || err == nil && pay.Status != lapse.ProviderPaid && pay.Status != lapse.ProviderPending:
			// Not made, or closed: nothing was taken.
			return gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeReleased,
				Error: "the group was abandoned; the provider has no charge under the key"})
		case err != nil:
			return fmt.Errorf("asking %s about the charge under way: %w", m.Provider, err)
		case pay.Status == lapse.ProviderPending:
			return fmt.Errorf("the provider answers the charge under way with status %s", pay.Status)
		}
		if err := (settler{gb}).answered(ctx, m, pay); err != nil {
			if m.Status == lapse.ChargeFailed {
				return r.member(ctx, m)
			}
			return err
		}
	}
	return r.refund(ctx, m)
}

// refund refunds member m, charged or refunding, under its refund key.
func (r groupRefunder) refund(ctx context.Context, m *lapse.GroupMember) error {
	gb := r.gb
	prov := gb.providers[m.Provider]
	if prov == nil {
		return fmt.Errorf("no payment provider port %q is configured", m.Provider)
	}
	if m.Status == lapse.ChargeCharged {
		if err := gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeRefunding}); err != nil {
			return err
		}
	}
	if m.Status != lapse.ChargeRefunding {
		return fmt.Errorf("the member's charge is %s, not refunding", m.Status)
	}
	key := lapse.GroupRefundKey(m.Key)
	ref, err := prov.Refund(ctx, &lapse.RefundRequest{IdempotencyKey: key, TxnID: m.TxnID, OrderNo: m.Key,
		Amount: m.Amount, Currency: m.Currency, Reason: "group " + m.GroupID + " abandoned"})
	if err == nil {
		err = reportDisagrees(m.Provider, key, ref, m.TxnID, m.Amount, m.Currency)
	}
	var dis *refundDisagreement
	switch {
	case errors.As(err, &dis):
		return gb.reviewMember(ctx, m, nil, memberReviewReason(m, m.TxnID, "its refund: "+dis.why))
	case errors.Is(err, lapse.ErrRefused) && !errors.Is(err, lapse.ErrUnknownOutcome):
		return gb.reviewMember(ctx, m, nil, memberReviewReason(m, m.TxnID, "its refund was refused: "+lapse.Reason(err)))
	case err != nil:
		return fmt.Errorf("refund under key %s, asked again under it: %w", key, err)
	case ref.Status == lapse.RefundProcessing:
		return fmt.Errorf("refund %s is still processing at %s", ref.RefundID, m.Provider)
	case ref.Status != lapse.RefundSucceeded:
		return gb.reviewMember(ctx, m, nil, memberReviewReason(m, m.TxnID, fmt.Sprintf("its refund %s is %q", ref.RefundID, ref.Status)))
	}
	return gb.refunded(ctx, m)
}

// refunded records member m, refunding, refunded. One moved meanwhile to
// refunded (a callback) is not an error.
func (gb *groupBuys) refunded(ctx context.Context, m *lapse.GroupMember) error {
	err := gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: lapse.ChargeRefunding, To: lapse.ChargeRefunded})
	if errors.Is(err, lapse.ErrStale) {
		cur, gerr := gb.e.store.GroupMemberGet(ctx, m.Key)
		if gerr == nil && cur.Status == lapse.ChargeRefunded {
			*m = *cur
			return nil
		}
	}
	return err
}
