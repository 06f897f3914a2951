package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lapsehq/lapse"
)

// A member's charge is answered three ways: by the provider port's answer to
// the charge, by its answer to a query about a charge whose answer was lost,
// and by the provider's callback (group_notice.go). Each is the provider
// saying what it charged under the member's key, and one rule,
// chargeAnswered, decides what that means for the member.
//
// A provider's transaction is counted once: as a member's charge, or as a
// payment (payment.go), never as both, nor as two members' charges.

// chargeAnswered records pay, which the provider reports paid under member
// m's charge key, on m (updated in place), from the status m is in: m is
// charged by it when it is the charge Lapse asked for: m's amount and
// currency, made to the merchant account configured for m's provider (as
// an order's payment must be). Otherwise the provider charged what Lapse
// did not ask for: m's charge fails, with the provider's transaction and
// what it took (money in review on the group, which reconcile counts), and
// an operator is told on the group, once however often the provider says
// so. Asked again under m's key, the provider answers with the same
// charge, so nothing is charged twice (S7), and m is charged only by a
// charge of its amount.
//
// A provider's transaction is counted once: one the books hold already,
// as another member's charge or as a payment, is counted there: m's charge
// fails with a review, and m does not take the transaction as its own. A
// transaction other than the one m holds (a charge that failed for what it
// took) is a second capture under m's key (secondAnswer).
//
// The answer is decided and recorded holding the lock of m's group
// (groupLocked), so that of the answers about its members at once (a
// settlement charges several together) each sees those before it: a
// provider that answers two members' charges with one transaction charges
// one of them by it, not both.
//
// A member charged already (the provider's callback about another capture
// under its key charged it while this answer was on its way) stays charged:
// its own transaction again changes nothing here (memberNoticed checks a
// callback's amount against it), and another is a second capture, as it is
// for a member whose charge failed.
//
// Errors: lapse.ErrStale when m is no longer as it was read (its status or
// its transaction), and the store's, with nothing written but a second
// capture (which was made, whatever became of m).
func (gb *groupBuys) chargeAnswered(ctx context.Context, m *lapse.GroupMember, pay *lapse.ProviderPayment) error {
	second := false
	err := gb.groupLocked(ctx, m, func(tx lapse.Store, m *lapse.GroupMember) error {
		second = false
		if groupAbandoned(m.Status) {
			// The group was abandoned: its charge, answered again, moves
			// nothing; another capture under its key is a second one.
			second = m.TxnID == "" || pay.TxnID != m.TxnID
			return nil
		}
		p := &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeFailed}
		held, err := gb.memberHolds(ctx, tx, m, pay.TxnID)
		switch {
		case err != nil:
			return err
		case m.Status == lapse.ChargeCharged && held == "" && pay.TxnID == m.TxnID:
			return nil
		case m.Status == lapse.ChargeCharged && held == "":
			second = true
			return nil
		case m.Status == lapse.ChargeCharged:
			// Counted as another member's charge: told, m unchanged.
			p.To, p.Error = m.Status, m.LastError
			return gb.updateMemberOn(ctx, tx, m, p, groupReview(m, memberReviewReason(m, pay.TxnID, held)))
		case held == "" && m.TxnID != "" && pay.TxnID != m.TxnID:
			second = true // recorded as a payment, which is not written under the lock
			return nil
		case held == "":
			held, err = gb.paymentHolds(ctx, tx, m, pay.TxnID)
			if err != nil {
				return err
			}
		}
		if held != "" {
			p.Error = held
			return gb.updateMemberOn(ctx, tx, m, p, groupReview(m, memberReviewReason(m, pay.TxnID, held)))
		}
		p.TxnID, p.CapturedAmount, p.CapturedCurrency = pay.TxnID, pay.Amount, pay.Currency
		if p.Error = gb.chargeMismatch(m, pay.Amount, pay.Currency, pay.Merchant); p.Error == "" {
			p.To = lapse.ChargeCharged
			return gb.updateMemberOn(ctx, tx, m, p, nil)
		}
		p.Error += ": an operator must look"
		return gb.updateMemberOn(ctx, tx, m, p, groupReview(m, memberReviewReason(m, pay.TxnID, p.Error)))
	})
	if err != nil || !second {
		return err
	}
	if m.Status == lapse.ChargeCharged || groupAbandoned(m.Status) {
		return gb.secondAnswer(ctx, m, pay, nil)
	}
	return gb.secondAnswer(ctx, m, pay, &lapse.GroupMemberUpdateParams{From: m.Status, To: lapse.ChargeFailed})
}

// groupLocked runs fn in a transaction that holds the lock of member m's
// group, with a copy of m as it was read, and sets m to what fn left of
// the copy once the transaction committed (a transaction run again starts
// from m as it was). Every change of a member that reads the others, or
// writes a review on its group, takes that lock first: the group's row,
// then the member's, always in that order. fn decides on m as it was
// read, so m is read again under the lock: one whose status or
// transaction changed since is lapse.ErrStale, and fn does not run. A
// change guarded by the status alone would let a decision made on a
// transaction m no longer holds overwrite the one it holds.
func (gb *groupBuys) groupLocked(ctx context.Context, m *lapse.GroupMember, fn func(tx lapse.Store, m *lapse.GroupMember) error) error {
	var cur lapse.GroupMember
	err := gb.e.store.Tx(ctx, func(tx lapse.Store) error {
		cur = *m
		if _, err := tx.OrderLock(ctx, m.GroupID); err != nil {
			return err
		}
		now, err := tx.GroupMemberGet(ctx, m.Key)
		if err != nil {
			return err
		}
		if now.Status != m.Status || now.TxnID != m.TxnID {
			return lapse.ErrStale
		}
		return fn(tx, &cur)
	})
	if err == nil {
		*m = cur
	}
	return err
}

// memberHolds says which other member than m has txn, a transaction of m's
// provider, as its charge, or "", read through s.
func (gb *groupBuys) memberHolds(ctx context.Context, s lapse.Store, m *lapse.GroupMember, txn string) (string, error) {
	other, err := s.GroupMemberGetByTxn(ctx, m.Provider, txn)
	switch {
	case err == nil && other.ID != m.ID:
		return fmt.Sprintf("its transaction is member %s's charge (key %s) of group %s: it is counted there, not again",
			other.UserID, other.Key, other.GroupID), nil
	case err != nil && !errors.Is(err, lapse.ErrGroupMemberNotFound):
		return "", err
	}
	return "", nil
}

// paymentHolds says which payment txn, a transaction of member m's
// provider, is recorded as, or "", read through s.
func (gb *groupBuys) paymentHolds(ctx context.Context, s lapse.Store, m *lapse.GroupMember, txn string) (string, error) {
	rec, err := s.PaymentGet(ctx, m.Provider, txn)
	switch {
	case err == nil:
		return fmt.Sprintf("its transaction is recorded as a payment of order %s (%s): it is counted there, not again",
			rec.OrderNo, lapse.Money(rec.Amount, rec.Currency)), nil
	case !errors.Is(err, lapse.ErrPaymentNotFound):
		return "", err
	}
	return "", nil
}

// secondAnswer records pay, the provider's answer under member m's key
// with another transaction than the one m holds (what a charge that failed
// took, or the charge of a member charged), as a second capture beside it
// (secondCharge: a payment in review on the group, once however often it
// is answered), and fails m's charge by p, unless p is nil (m is charged,
// by the transaction it holds, and stays so).
func (gb *groupBuys) secondAnswer(ctx context.Context, m *lapse.GroupMember, pay *lapse.ProviderPayment, p *lapse.GroupMemberUpdateParams) error {
	o, err := gb.e.store.OrderGet(ctx, m.GroupID)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(pay)
	if _, err := gb.secondCharge(ctx, m, o, &lapse.PaymentNotice{Provider: m.Provider, Kind: lapse.NoticePaid, TxnID: pay.TxnID,
		OrderNo: m.Key, Amount: pay.Amount, Currency: pay.Currency, Merchant: pay.Merchant, PaidAt: pay.PaidAt, Raw: raw}); err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	p.Error = fmt.Sprintf("the provider answers with transaction %s, a second charge under the key, whose charge is %s: it is in review on the group",
		pay.TxnID, m.TxnID)
	return gb.updateMember(ctx, m, p)
}

// chargeMismatch says how a charge the provider reports under member m's
// key (amount, currency, and the merchant account it was made to) differs
// from the charge Lapse asked for, or "".
func (gb *groupBuys) chargeMismatch(m *lapse.GroupMember, amount int64, currency, merchant string) string {
	if amount != m.Amount || currency != m.Currency {
		return fmt.Sprintf("the provider charged %s, not %s", lapse.Money(amount, currency), lapse.Money(m.Amount, m.Currency))
	}
	if why := gb.e.feat.payments.merchantMismatch(m.Provider, merchant); why != "" {
		return "the charge was " + why
	}
	return ""
}

// updateMember applies the guarded change p, which writes no review, to
// member m (its ID and At filled in, and ChargedAt when it charges m) and
// updates m in place.
func (gb *groupBuys) updateMember(ctx context.Context, m *lapse.GroupMember, p *lapse.GroupMemberUpdateParams) error {
	return gb.updateMemberOn(ctx, gb.e.store, m, p, nil)
}

// updateMemberOn is updateMember through s, with review rv (nil: none) on
// the order it names, in the same transaction, its CreatedAt filled in; it
// is not written when an open review of that order says so already (the
// same answer, or notice, came again; the store keeps it to one however
// many come at once). A change with a review is made holding the lock of
// m's group (groupLocked), through that transaction.
func (gb *groupBuys) updateMemberOn(ctx context.Context, s lapse.Store, m *lapse.GroupMember, p *lapse.GroupMemberUpdateParams, rv *lapse.Review) error {
	e := gb.e
	p.ID, p.At = m.ID, e.clock.Now()
	if p.To == lapse.ChargeCharged && p.From != lapse.ChargeCharged {
		// Only the change that charges m says when it was charged; a
		// touch of a charged member (a review) keeps it.
		p.ChargedAt = &p.At
	}
	if rv != nil {
		open, err := s.ReviewList(ctx, &lapse.ReviewListParams{OrderID: rv.OrderID, Open: true})
		if err != nil {
			return err
		}
		if !hasReason(open, rv.Reason) {
			rv.CreatedAt = p.At
			p.Review = rv
		}
	}
	got, err := s.GroupMemberUpdate(ctx, p)
	if err != nil {
		return err
	}
	*m = *got
	if p.Review != nil {
		e.log.Error("group member's charge put in review", "group", m.GroupID, "user_id", m.UserID, "key", m.Key,
			"status", m.Status, "order_no", p.Review.OrderNo, "reason", p.Review.Reason)
	}
	return nil
}

// reviewMember tells an operator on order on (nil: member m's group) why (a
// review reason), the member unchanged: a guarded touch of m in the status
// it was read in (its fields as they are), so that the review goes with
// the member as the store has it. An open review with the same reason
// stands for it already (the provider said it again), and nothing is
// written. lapse.ErrStale: m moved meanwhile, and nothing was written.
func (gb *groupBuys) reviewMember(ctx context.Context, m *lapse.GroupMember, on *lapse.Order, why string) error {
	rv := groupReview(m, why)
	if on != nil {
		rv.OrderID, rv.OrderNo = on.ID, on.OrderNo
	}
	open, err := gb.e.store.ReviewList(ctx, &lapse.ReviewListParams{OrderID: rv.OrderID, Open: true})
	if err != nil || hasReason(open, why) {
		return err
	}
	return gb.groupLocked(ctx, m, func(tx lapse.Store, m *lapse.GroupMember) error {
		return gb.updateMemberOn(ctx, tx, m, &lapse.GroupMemberUpdateParams{From: m.Status, To: m.Status, Error: m.LastError}, rv)
	})
}

// groupReview is a review, with reason, on member m's group.
func groupReview(m *lapse.GroupMember, reason string) *lapse.Review {
	return &lapse.Review{OrderID: m.OrderID, OrderNo: m.GroupID, Reason: reason}
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

// groupAbandoned reports whether a member's charge status is one the
// abandoning of its group gave it (refunding, refunded, released): no
// answer about its charge moves it.
func groupAbandoned(s lapse.ChargeStatus) bool {
	return s == lapse.ChargeRefunding || s == lapse.ChargeRefunded || s == lapse.ChargeReleased
}
