package engine

import (
	"context"
	"fmt"

	"github.com/lapsehq/lapse"
)

// A member's charge is answered three ways: by the provider port's answer to
// the charge, by its answer to a query about a charge whose answer was lost,
// and by the provider's callback (group_notice.go). Each is the provider
// saying what it charged under the member's key, and one rule,
// chargeAnswered, decides what that means for the member.

// chargeAnswered records pay, which the provider reports paid under member
// m's charge key, on m (updated in place), from the status m is in: m is
// charged by it when it took m's amount and currency. Otherwise the provider
// charged what Lapse did not ask for: m's charge failed, with the provider's
// transaction, and an operator is told on the group, once however often the
// provider says so. Asked again under m's key, the provider answers with the
// same charge, so nothing is charged twice (S7), and m is charged only by a
// charge of its amount.
//
// Errors, with nothing written: lapse.ErrStale when m is no longer in the
// status it was read in; the store's.
func (gb *groupBuys) chargeAnswered(ctx context.Context, m *lapse.GroupMember, pay *lapse.ProviderPayment) error {
	if pay.Amount == m.Amount && pay.Currency == m.Currency {
		return gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeCharged, TxnID: pay.TxnID}, "")
	}
	why := fmt.Sprintf("the provider charged %s, not %s: an operator must look",
		lapse.Money(pay.Amount, pay.Currency), lapse.Money(m.Amount, m.Currency))
	return gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeFailed, TxnID: pay.TxnID, Error: why},
		memberReviewReason(m, pay.TxnID, why))
}

// updateMember applies the guarded change p to member m (its ID and At
// filled in, and ChargedAt when it charges m) and updates m in place. With
// a review reason, an operator is told on m's group in the same
// transaction, unless an open review of the group says so already (the
// same answer, or notice, came again).
func (gb *groupBuys) updateMember(ctx context.Context, m *lapse.GroupMember, p *lapse.GroupMemberUpdateParams, review string) error {
	e := gb.e
	p.ID, p.At = m.ID, e.clock.Now()
	if p.To == lapse.ChargeCharged {
		p.ChargedAt = &p.At
	}
	if review != "" {
		open, err := e.store.ReviewList(ctx, &lapse.ReviewListParams{OrderID: m.OrderID, Open: true})
		if err != nil {
			return err
		}
		if !hasReason(open, review) {
			p.Review = &lapse.Review{OrderID: m.OrderID, OrderNo: m.GroupID, Reason: review, CreatedAt: p.At}
		}
	}
	got, err := e.store.GroupMemberUpdate(ctx, p)
	if err != nil {
		return err
	}
	*m = *got
	if p.Review != nil {
		e.log.Error("group member's charge put in review", "group", m.GroupID, "user_id", m.UserID, "key", m.Key,
			"status", m.Status, "reason", review)
	}
	return nil
}

// reviewMember tells an operator on member m's group why (a review
// reason), the member unchanged: a guarded touch of m in the status it was
// read in (its fields as they are), so that the review goes with the member
// as the store has it. An open review with the same reason stands for it
// already (the provider said it again), and nothing is written.
// lapse.ErrStale: m moved meanwhile, and nothing was written.
func (gb *groupBuys) reviewMember(ctx context.Context, m *lapse.GroupMember, why string) error {
	open, err := gb.e.store.ReviewList(ctx, &lapse.ReviewListParams{OrderID: m.OrderID, Open: true})
	if err != nil || hasReason(open, why) {
		return err
	}
	return gb.updateMember(ctx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: m.Status, Error: m.LastError}, why)
}

// memberReviewReason is the reason of a review about member m's charge,
// reported by the provider's transaction txn: why.
func memberReviewReason(m *lapse.GroupMember, txn, why string) string {
	return lapse.CleanReason(fmt.Sprintf("member %s's charge (key %s, transaction %s of %s) is in review: %s",
		m.UserID, m.Key, txn, m.Provider, why))
}

func hasReason(rs []*lapse.Review, reason string) bool {
	for _, r := range rs {
		if r.Reason == reason {
			return true
		}
	}
	return false
}
