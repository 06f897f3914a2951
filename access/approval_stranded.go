package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// StrandedAfter is how long an approved request may stay approved before
// it is taken as stranded (settleStranded): its carrying out (execute)
// ends within seconds, each of its statements within the store's
// statement timeout, and its last move, to executed or failed, follows
// at once. One still approved this long after its approval was left so by
// a process that stopped, or lost its database, between the two.
const StrandedAfter = 10 * time.Minute

// strandedSlack is how far before the approval an action's audit row may
// be dated: rows are dated by the clock of the process that wrote them,
// and the nodes' clocks may differ (engine.MaxClockSkew).
const strandedSlack = time.Minute

// stranded reports whether a is approved and has been since StrandedAfter.
func (s *Service) stranded(a *lapse.Approval) bool {
	return a.Status == lapse.ApprovalApproved && !s.clock.Now().Before(a.DecidedAt.Add(StrandedAfter))
}

// settleStranded ends request id, in the transaction as, if it is
// stranded, by what its audit rows say happened, and returns it as it is.
//
// The action a request carries out writes its audit row, naming the
// request (ApprovalID), in the transaction of its effect (S9): a change
// that committed committed its row, and an action that changed nothing
// committed nothing. So a row of the request's action naming it, with
// a result "ok…", means the action was carried out, and the request
// becomes executed; a row with another result means it failed, and it
// becomes failed with that result; no row means the action changed
// nothing, and it becomes failed, to be asked again. Each move has its
// audit row "approval.settle", Lapse's. A request another transaction
// moved since it was read is returned as that one left it.
func (s *Service) settleStranded(ctx context.Context, as lapse.AccessStore, id int64) (*lapse.Approval, error) {
	a, err := as.ApprovalGet(ctx, id)
	if err != nil || !s.stranded(a) {
		return a, err
	}
	row, err := s.actionRow(ctx, as, a)
	if err != nil {
		return nil, err
	}
	to, result := lapse.ApprovalFailed, "not carried out: the process carrying it out stopped before the action changed anything; ask again"
	switch {
	case row != nil && strings.HasPrefix(row.Result, "ok"):
		to, result = lapse.ApprovalExecuted, fmt.Sprintf("carried out (audit row %d: %s); the process that carried it out stopped before recording it here", row.ID, row.Result)
	case row != nil:
		result = fmt.Sprintf("failed (audit row %d: %s); the process that carried it out stopped before recording it here", row.ID, row.Result)
	}
	now := s.clock.Now()
	moved, err := as.ApprovalDecide(ctx, &lapse.ApprovalDecideParams{
		ID: id, From: lapse.ApprovalApproved, To: to,
		ApproverID: a.ApproverID, ApproverName: a.ApproverName, DecidedAt: a.DecidedAt,
		Result: lapse.CleanReason(result),
	})
	if errors.Is(err, lapse.ErrStale) {
		return as.ApprovalGet(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	e := system().Entry("approval.settle", approvalTarget(moved), map[string]any{"status": string(to)})
	e.At, e.Result, e.ApprovalID = now, "ok", moved.ID
	return moved, lapse.AuditAppend(ctx, as, e)
}

// actionRow returns the newest audit row of a's action that names a
// (ApprovalID), or nil when there is none: the rows of the action, newest
// first, back to strandedSlack before a was approved, for the action's
// row cannot be older.
func (s *Service) actionRow(ctx context.Context, as lapse.AccessStore, a *lapse.Approval) (*lapse.AuditEntry, error) {
	const page = 500
	p := &lapse.AuditListParams{Action: a.Action, Descending: true, Limit: page}
	since := a.DecidedAt.Add(-strandedSlack)
	for {
		rows, err := as.AuditList(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			if row.ApprovalID == a.ID {
				return row, nil
			}
		}
		if len(rows) < page || rows[len(rows)-1].At.Before(since) {
			return nil, nil
		}
		p.Cursor = rows[len(rows)-1].ID
	}
}

// SettleStranded settles every stranded request (settleStranded), and
// returns how many it moved: what lapse serve does as it starts, for the
// requests a process that stopped left approved. Approval and Approvals
// settle those they read too.
func (s *Service) SettleStranded(ctx context.Context) (int, error) {
	const page = 500
	p := &lapse.ApprovalListParams{Status: lapse.ApprovalApproved, Limit: page}
	n := 0
	for {
		list, err := s.access.ApprovalList(ctx, p)
		if err != nil {
			return n, err
		}
		for _, a := range list {
			if !s.stranded(a) {
				continue
			}
			err := s.tx(ctx, func(as lapse.AccessStore) error {
				got, err := s.settleStranded(ctx, as, a.ID)
				if err == nil && got.Status != lapse.ApprovalApproved {
					n++
				}
				return err
			})
			if err != nil {
				return n, err
			}
		}
		if len(list) < page {
			return n, nil
		}
		p.Before = list[len(list)-1].ID
	}
}
