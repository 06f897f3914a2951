package access

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/lapsehq/lapse"
)

// NeedsApproval reports whether an operator's risky action on amount (money
// in minor units) or count (orders: a manual close, the members of a group
// buy cancelled while open, an order ended by an event or whose deadline is
// brought earlier) needs a second operator: amount above
// Config.ApprovalAmount, or count, added to the orders the operator put at
// stake on their own word within the last ApprovalWindow (Admit), above
// ApprovalCount, where each threshold is not zero. Keys and the command line
// never need one: they act within their scopes. It only reads; Admit
// decides and records.
func (s *Service) NeedsApproval(ctx context.Context, p *Principal, amount, count int64) (bool, error) {
	return s.needsApproval(ctx, s.access, p, amount, count)
}

// Admit decides whether the operator p's risky action (its audit action
// and target) on amount and count needs a second operator, as
// NeedsApproval does, and when it does not, records its count as put at
// stake by p now (a lapse.Stake), so that it adds up with p's next actions.
// The decision and the record are one transaction that holds p's row, so
// that of p's concurrent actions each is judged with those admitted before
// it. An action held for approval records nothing: a second operator
// judges it. The count is recorded when the action is admitted, before it
// is carried out; one that then fails still counts, erring toward a second
// operator.
func (s *Service) Admit(ctx context.Context, p *Principal, action, target string, amount, count int64) (bool, error) {
	if p == nil || p.Kind != KindOperator || count <= 0 || s.cfg.ApprovalCount <= 0 {
		return s.needsApproval(ctx, s.access, p, amount, count)
	}
	var need bool
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		if _, err := lockOperator(ctx, as, p.Name); err != nil {
			return err
		}
		var err error
		if need, err = s.needsApproval(ctx, as, p, amount, count); err != nil || need {
			return err
		}
		return as.StakeCreate(ctx, &lapse.Stake{OperatorID: p.OperatorID, Action: action, Target: target, Count: count, At: s.clock.Now()})
	})
	return need, err
}

// needsApproval is NeedsApproval, reading the stakes from as.
func (s *Service) needsApproval(ctx context.Context, as lapse.AccessStore, p *Principal, amount, count int64) (bool, error) {
	switch {
	case p == nil || p.Kind != KindOperator:
		return false, nil
	case s.cfg.ApprovalAmount > 0 && amount > s.cfg.ApprovalAmount:
		return true, nil
	case s.cfg.ApprovalCount <= 0 || count <= 0:
		return false, nil
	}
	before, err := as.StakeSum(ctx, p.OperatorID, s.clock.Now().Add(-s.cfg.ApprovalWindow))
	if err != nil {
		return false, err
	}
	total, ok := lapse.AddInt64(before, count)
	return !ok || total > s.cfg.ApprovalCount, nil
}

// RequestApproval holds the action a (its Action, Target, Amount,
// Currency, Count, Request and Reason) for a second operator: it records a
// pending request made by the operator p, expiring ApprovalTTL from now,
// with its audit row "approval.request", in one transaction, and returns
// it. secondFactor is the one p gave for the action (RequireSecondFactor's
// answer), which the row keeps: the request is p's action (S9). Only an
// operator's actions wait for approval (else EINVALID); Action is required.
func (s *Service) RequestApproval(ctx context.Context, p *Principal, a *lapse.Approval, secondFactor string) (*lapse.Approval, error) {
	if p == nil || p.Kind != KindOperator {
		return nil, lapse.Errorf(lapse.EINVALID, "only operators' actions wait for approval")
	}
	if a == nil || a.Action == "" {
		return nil, lapse.FieldError("action", "is required")
	}
	r := &lapse.Approval{
		Action: a.Action, Target: a.Target, Amount: a.Amount, Currency: a.Currency,
		Count: a.Count, Request: a.Request, Reason: lapse.CleanReason(a.Reason),
		MakerID: p.OperatorID, MakerName: p.Name, Status: lapse.ApprovalPending,
	}
	var made *lapse.Approval
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		now := s.clock.Now()
		// Under the maker's lock, which a disable or a reset takes to
		// cancel their pending requests: one made by a session that
		// ended meanwhile would escape that.
		if _, err := actorInForce(ctx, as, p, now); err != nil {
			return err
		}
		r.CreatedAt, r.ExpiresAt = now, now.Add(s.cfg.ApprovalTTL)
		var err error
		if made, err = as.ApprovalCreate(ctx, r); err != nil {
			return err
		}
		e := p.Entry("approval.request", approvalTarget(made), map[string]any{
			"action": made.Action, "target": made.Target, "amount": made.Amount,
			"currency": made.Currency, "count": made.Count,
		})
		e.At, e.Result, e.Reason, e.ApprovalID, e.SecondFactor = now, "ok", made.Reason, made.ID, secondFactor
		return lapse.AuditAppend(ctx, as, e)
	})
	if err != nil {
		return nil, err
	}
	return made, nil
}

// approvalTarget is what an approval's audit rows are about: the action's
// target, so that a search by it finds the request too.
func approvalTarget(a *lapse.Approval) string {
	if a.Target != "" {
		return a.Target
	}
	return "approval:" + strconv.FormatInt(a.ID, 10)
}

// Approval returns the approval request with id (ENOTFOUND when there is
// none). A pending request past its ExpiresAt is moved to expired, with an
// audit row "approval.expire", and a stranded one (approved, its carrying
// out cut short) is settled (settleStranded), before it is returned.
func (s *Service) Approval(ctx context.Context, id int64) (*lapse.Approval, error) {
	a, err := s.access.ApprovalGet(ctx, id)
	if errors.Is(err, lapse.ErrAccessNotFound) {
		return nil, lapse.Refine(lapse.ErrAccessNotFound, "no approval request has the id %d", id)
	}
	if err != nil || !s.stale(a) {
		return a, err
	}
	err = s.tx(ctx, func(as lapse.AccessStore) error {
		a, err = s.refresh(ctx, as, a)
		return err
	})
	return a, err
}

// stale reports whether a is to be moved on before it is shown: pending
// past its ExpiresAt (due), or stranded.
func (s *Service) stale(a *lapse.Approval) bool { return s.due(a) || s.stranded(a) }

// refresh moves a, in the transaction as, as stale says it is to be moved,
// and returns it as it is then.
func (s *Service) refresh(ctx context.Context, as lapse.AccessStore, a *lapse.Approval) (*lapse.Approval, error) {
	if s.due(a) {
		return s.expire(ctx, as, a.ID)
	}
	return s.settleStranded(ctx, as, a.ID)
}

// Approvals returns the approval requests p asks for (see
// lapse.AccessStore.ApprovalList; nil asks for all), having moved the
// pending ones past their ExpiresAt to expired, and settled the stranded
// ones, as Approval does. A request that thereby leaves the status p asks
// for (pending, approved) is left out, and the list is read again, so that
// the requests behind it take its place: a list of p.Limit pending
// requests is short only when there are no more. A list of the expired
// ones first expires every pending request past its ExpiresAt, which is
// expired whether it was read since or not; a list of the executed or
// failed ones first settles every stranded request (SettleStranded).
func (s *Service) Approvals(ctx context.Context, p *lapse.ApprovalListParams) ([]*lapse.Approval, error) {
	if p == nil {
		p = &lapse.ApprovalListParams{}
	}
	switch p.Status {
	case lapse.ApprovalExpired:
		if err := s.expireDue(ctx); err != nil {
			return nil, err
		}
	case lapse.ApprovalExecuted, lapse.ApprovalFailed:
		if _, err := s.SettleStranded(ctx); err != nil {
			return nil, err
		}
	}
	for {
		list, err := s.access.ApprovalList(ctx, p)
		if err != nil || !slices.ContainsFunc(list, s.stale) {
			return list, err
		}
		err = s.tx(ctx, func(as lapse.AccessStore) error {
			for i, a := range list {
				if s.stale(a) {
					if list[i], err = s.refresh(ctx, as, a); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if p.Status == "" {
			return list, nil
		}
		// Those expired or settled left the list of their status: read it
		// again. Each turn moves one at least, so the turns end.
	}
}

// expireDue expires every pending request past its ExpiresAt. Pending
// requests are few (each waits for a person, for ApprovalTTL at most), so
// they are all read.
func (s *Service) expireDue(ctx context.Context) error {
	const page = 500
	p := &lapse.ApprovalListParams{Status: lapse.ApprovalPending, Limit: page}
	for {
		list, err := s.access.ApprovalList(ctx, p)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(list, s.due) {
			err = s.tx(ctx, func(as lapse.AccessStore) error {
				for _, a := range list {
					if s.due(a) {
						if _, err := s.expire(ctx, as, a.ID); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if len(list) < page {
			return nil
		}
		p.Before = list[len(list)-1].ID
	}
}

// due reports whether a is pending past its ExpiresAt.
func (s *Service) due(a *lapse.Approval) bool {
	return a.Status == lapse.ApprovalPending && !s.clock.Now().Before(a.ExpiresAt)
}

// expire moves request id, in the transaction as, to expired if it is
// pending past its ExpiresAt, with its audit row, and returns it as it is.
// One that another transaction moved since it was read is returned as that
// one left it.
func (s *Service) expire(ctx context.Context, as lapse.AccessStore, id int64) (*lapse.Approval, error) {
	a, err := as.ApprovalGet(ctx, id)
	if err != nil || !s.due(a) {
		return a, err
	}
	now := s.clock.Now()
	a, err = as.ApprovalDecide(ctx, &lapse.ApprovalDecideParams{
		ID: id, From: lapse.ApprovalPending, To: lapse.ApprovalExpired, DecidedAt: now,
	})
	if errors.Is(err, lapse.ErrStale) {
		// Another process (a look on another node) expired it, or an
		// approver decided it, since it was read: returned as it is now,
		// with that one's audit row, not as an error of this look.
		return as.ApprovalGet(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	e := system().Entry("approval.expire", approvalTarget(a), nil)
	e.At, e.Result, e.ApprovalID = now, "ok", a.ID
	return a, lapse.AuditAppend(ctx, as, e)
}

// canDecide refuses, with EFORBIDDEN, a principal who may not approve or
// reject others' requests: anyone but an operator whose role may carry out
// any risky action (operator or admin).
func canDecide(by *Principal, what string) error {
	if by == nil || by.Kind != KindOperator {
		return lapse.Errorf(lapse.EFORBIDDEN, "only an operator can %s a request", what)
	}
	if by.Role != RoleOperator && by.Role != RoleAdmin {
		return lapse.Errorf(lapse.EFORBIDDEN, "an operator with the role %s cannot %s others' requests", lapse.CleanReason(by.Role), what)
	}
	return nil
}

func errNotPending(a *lapse.Approval) error {
	return lapse.Errorf(lapse.ECONFLICT, "the request is %s, not pending", a.Status)
}

// decide moves request id from pending to to as by, in one transaction
// with by's audit row action (second factor sf, reason), and returns it as
// it is now. A request no longer pending is ECONFLICT, "decided by someone
// else"; one past its ExpiresAt is ECONFLICT and is not moved.
func (s *Service) decide(ctx context.Context, by *Principal, id int64, to lapse.ApprovalStatus, action, sf, reason string) (*lapse.Approval, error) {
	var a *lapse.Approval
	err := s.tx(ctx, func(as lapse.AccessStore) error {
		now := s.clock.Now()
		// The decider is checked again under their lock: one disabled,
		// reset or logged out since their request was let in decides
		// nothing.
		if _, err := actorInForce(ctx, as, by, now); err != nil {
			return err
		}
		var err error
		a, err = as.ApprovalDecide(ctx, &lapse.ApprovalDecideParams{
			ID: id, From: lapse.ApprovalPending, To: to,
			ApproverID: by.OperatorID, ApproverName: by.Name, DecidedAt: now, Result: reason,
		})
		if errors.Is(err, lapse.ErrStale) {
			return lapse.Errorf(lapse.ECONFLICT, "the request was decided by someone else")
		}
		if err != nil {
			return err
		}
		if !now.Before(a.ExpiresAt) {
			// It expired between the look and the move: undo the move.
			return lapse.Errorf(lapse.ECONFLICT, "the request is expired, not pending")
		}
		e := by.Entry(action, approvalTarget(a), nil)
		e.At, e.Result, e.Reason, e.SecondFactor = now, "ok", reason, sf
		e.Approver, e.ApprovalID = by.Name, a.ID
		return lapse.AuditAppend(ctx, as, e)
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// cancelMade cancels, in the transaction as, every pending approval
// request the operator o made, because by did what (disabled, reset) to
// them: each moves to cancelled, its Result naming what and by whom, with
// an audit row "approval.cancel" of by's (the maker and what), and
// returns how many. A request decided meanwhile is left as it was
// decided. The caller holds o's row locked, which RequestApproval takes
// too, so no request of o's is made while they are cancelled.
func cancelMade(ctx context.Context, as lapse.AccessStore, by *Principal, o *lapse.Operator, what string, now time.Time) (int, error) {
	const page = 500 // pending requests are few: each waits for a person
	var ids []int64
	p := &lapse.ApprovalListParams{Status: lapse.ApprovalPending, Limit: page}
	for {
		list, err := as.ApprovalList(ctx, p)
		if err != nil {
			return 0, err
		}
		for _, a := range list {
			if a.MakerID == o.ID {
				ids = append(ids, a.ID)
			}
		}
		if len(list) < page {
			break
		}
		p.Before = list[len(list)-1].ID
	}
	n := 0
	for _, id := range ids {
		a, err := as.ApprovalDecide(ctx, &lapse.ApprovalDecideParams{
			ID: id, From: lapse.ApprovalPending, To: lapse.ApprovalCancelled, DecidedAt: now,
			Result: lapse.CleanReason(fmt.Sprintf("cancelled: its maker %s was %s by %s", o.Name, what, by.Actor())),
		})
		if errors.Is(err, lapse.ErrStale) {
			continue
		}
		if err != nil {
			return 0, err
		}
		e := by.Entry("approval.cancel", approvalTarget(a), map[string]any{"maker": o.Name, "because": what})
		e.At, e.Result, e.ApprovalID = now, "ok", a.ID
		if err := lapse.AuditAppend(ctx, as, e); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// Approve has the operator by approve request id and carries it out. by
// must be an operator with the role operator or admin (else EFORBIDDEN),
// not the request's maker (EFORBIDDEN, "the operator who made a request
// cannot approve it"), and give a second factor: code, or one fresh in the
// session (RequireSecondFactor). The request must be pending and not
// expired (else ECONFLICT naming its status).
//
// Of approvers racing, one moves the request from pending to approved
// (with its audit row "approval.approve"); the others get ECONFLICT,
// "decided by someone else". Only that one calls execute, once, which
// carries out the action and records the action's own audit row (with
// Approver and ApprovalID set). The request then ends executed, with the
// result execute returns, or failed, with its error's text; when execute
// fails, Approve returns the failed request and execute's error. A store
// failing at that last step leaves the request approved and returns the
// store's error.
func (s *Service) Approve(ctx context.Context, by *Principal, id int64, code string, execute func(ctx context.Context, a *lapse.Approval) (result string, err error)) (*lapse.Approval, error) {
	if err := canDecide(by, "approve"); err != nil {
		return nil, err
	}
	a, err := s.Approval(ctx, id)
	switch {
	case err != nil:
		return nil, err
	case a.MakerID == by.OperatorID:
		return nil, lapse.Errorf(lapse.EFORBIDDEN, "the operator who made a request cannot approve it")
	case a.Status != lapse.ApprovalPending:
		return nil, errNotPending(a)
	}
	sf, err := s.RequireSecondFactor(ctx, by, code)
	if err != nil {
		return nil, err
	}
	if a, err = s.decide(ctx, by, id, lapse.ApprovalApproved, "approval.approve", sf, ""); err != nil {
		return nil, err
	}
	return s.execute(ctx, a, execute)
}

// execute carries out the approved request a and records how it ended. The
// request must not stay approved when execute panics or ctx ends, so the
// last move does not heed ctx's end and happens on the way out of a panic.
func (s *Service) execute(ctx context.Context, a *lapse.Approval, execute func(context.Context, *lapse.Approval) (string, error)) (*lapse.Approval, error) {
	finish := func(to lapse.ApprovalStatus, result string) (*lapse.Approval, error) {
		return s.access.ApprovalDecide(context.WithoutCancel(ctx), &lapse.ApprovalDecideParams{
			ID: a.ID, From: lapse.ApprovalApproved, To: to,
			ApproverID: a.ApproverID, ApproverName: a.ApproverName, DecidedAt: a.DecidedAt,
			Result: lapse.CleanReason(result),
		})
	}
	returned := false
	defer func() {
		if !returned {
			_, _ = finish(lapse.ApprovalFailed, "the action panicked")
		}
	}()
	result, err := execute(ctx, a)
	returned = true
	if err != nil {
		f, ferr := finish(lapse.ApprovalFailed, lapse.Reason(err))
		if ferr != nil {
			return a, ferr
		}
		return f, err
	}
	done, err := finish(lapse.ApprovalExecuted, result)
	if err != nil {
		return a, err
	}
	return done, nil
}

// Reject has the operator by reject (or, when by made it, withdraw) the
// pending request id, with reason, in one transaction with its audit row
// "approval.reject". Anyone but an operator is EFORBIDDEN, and so is an
// operator who may not approve rejecting another's request. A request that
// is not pending, or expired, is ECONFLICT.
func (s *Service) Reject(ctx context.Context, by *Principal, id int64, reason string) (*lapse.Approval, error) {
	if by == nil || by.Kind != KindOperator {
		return nil, lapse.Errorf(lapse.EFORBIDDEN, "only an operator can reject a request")
	}
	if err := lapse.CheckReason("reason", reason); err != nil {
		return nil, err
	}
	a, err := s.Approval(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.MakerID != by.OperatorID {
		if err := canDecide(by, "reject"); err != nil {
			return nil, err
		}
	}
	if a.Status != lapse.ApprovalPending {
		return nil, errNotPending(a)
	}
	return s.decide(ctx, by, id, lapse.ApprovalRejected, "approval.reject", "", reason)
}
