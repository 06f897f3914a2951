package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/internal/problem"
)

// Operators act through the engine as the real callers make them act:
// the HTTP layer (http/auth.go: engine.WithAudit with the principal's row,
// then, unless the call succeeded and its row committed with its change,
// the row again in a transaction of its own, with the failure as its
// Result) for refunds, reviews and deliveries; package closes
// (closes/item.go) for a manual close, outside a batch. S9 (SPEC §5) is
// checked on what they did and what the store holds.

// operator is one of the simulated operators.
type operator struct{ id, name, role string }

var operators = []operator{{"1", "op-1", "admin"}, {"2", "op-2", "ops"}, {"3", "op-3", "support"}}

// opCall is one action of an operator, as the simulator made it.
type opCall struct {
	step    int
	entry   lapse.AuditEntry // the row it must have: actor, action, target, the engine's clock at the action, second factor
	err     error            // what the engine answered
	written bool             // engine.AuditWritten
	// committed: failed, and yet its change and row committed (a lost
	// answer, a crash after the commit)
	committed bool
	lost      bool // succeeded without its row committing with it, and the caller's own row did not commit either
}

// entry is the row of op doing action on target, as access.Principal.Entry
// makes it.
func (op operator) entry(action, target string, params any) *lapse.AuditEntry {
	var raw []byte
	if params != nil {
		raw, _ = json.Marshal(params)
	}
	return &lapse.AuditEntry{ActorKind: access.KindOperator, ActorID: op.id, ActorName: op.name, Role: op.role,
		Action: action, Target: target, Params: raw}
}

// api is op as the HTTP layer names it to the engine (http/auth.go actor).
func (op operator) api() engine.Actor {
	return engine.Actor{FiredBy: lapse.FiredByAPI, Name: access.KindOperator + ":" + op.name}
}

// operate: an operator closes an open order by hand, refunds a paid one,
// resolves an open review, or retries a dead delivery.
func (w *world) operate() {
	op := operators[w.rng.IntN(len(operators))]
	kind := w.rng.IntN(4)
	k := w.rng.IntN(1 << 20) // which review, drawn whatever the store holds
	switch kind {
	case 0:
		w.opClose(op)
	case 1:
		w.opRefund(op)
	default:
		w.opReview(op, kind == 3, k)
	}
}

func (w *world) opClose(op operator) {
	o := w.pickIn(open)
	if o == nil {
		return
	}
	reason := "sim operator closes"
	e := op.entry(closes.ActionClose, "order:"+o.no, nil)
	e.Reason, e.SecondFactor = reason, "totp"
	w.opDo(e, true, func(ctx context.Context) error {
		_, err := w.eng.CloseOrder(ctx, o.no, reason, engine.Actor{FiredBy: lapse.FiredByOperator, Name: op.name})
		return err
	})
}

func (w *world) opRefund(op operator) {
	o := w.pickIn(refundable, "checkout", "membership")
	if o == nil {
		return
	}
	if _, err := w.cfg.Store.OrderGet(w.ctx, o.no); err != nil {
		return // never created
	}
	amount := o.amount
	if o.flow == "checkout" && w.rng.IntN(2) == 0 {
		amount = o.amount / int64(2+w.rng.IntN(3))
	}
	req := engine.RefundRequest{Amount: amount, Reason: "sim operator refunds", By: op.api()}
	if w.rng.IntN(2) == 0 {
		req.Key = fmt.Sprintf("op-rf-%s-%d", o.no, w.rng.IntN(2))
	}
	e := op.entry("refund.create", "order:"+o.no, map[string]any{"amount": amount, "reason": req.Reason})
	e.SecondFactor = "totp"
	w.opDo(e, false, func(ctx context.Context) error {
		_, _, err := w.eng.RefundOrder(ctx, o.no, req)
		return err
	})
}

// opReview resolves the k-th open review (modulo how many there are), or
// retries the dead delivery of one.
func (w *world) opReview(op operator, retry bool, k int) {
	rs, err := w.cfg.Store.ReviewList(w.ctx, &lapse.ReviewListParams{Open: true, Limit: 100})
	if err != nil {
		return
	}
	if retry {
		rs = slices.DeleteFunc(rs, func(r *lapse.Review) bool { return r.DeliveryID == 0 })
	}
	if len(rs) == 0 {
		w.opClose(op) // nothing to look into: the operator closes an order instead
		return
	}
	rv := rs[k%len(rs)]
	if retry {
		e := op.entry("delivery.retry", fmt.Sprintf("delivery:%d", rv.DeliveryID), nil)
		e.SecondFactor = "totp"
		w.opDo(e, false, func(ctx context.Context) error {
			_, err := w.eng.RetryDelivery(ctx, rv.DeliveryID, op.api())
			return err
		})
		return
	}
	note := "sim operator looked into it"
	e := op.entry("review.resolve", fmt.Sprintf("review:%d", rv.ID), map[string]any{"note": note})
	w.opDo(e, false, func(ctx context.Context) error {
		_, err := w.eng.ResolveReview(ctx, rv.ID, note, op.api())
		return err
	})
}

// opDo makes one operator call under engine.WithAudit, then records its
// row as the real caller does when the engine did not: package closes
// (closer) when the row did not commit, with the failure as its Result;
// the HTTP layer unless the call succeeded and its row committed.
func (w *world) opDo(e *lapse.AuditEntry, closer bool, call func(context.Context) error) {
	at := w.clock.Now()
	ctx := engine.WithAudit(w.ctx, e)
	w.f.operate(true)
	err := call(ctx)
	w.f.operate(false)
	c := &opCall{step: w.step, entry: *e, err: err, written: engine.AuditWritten(ctx)}
	c.entry.At = lapse.Truncate(at)
	w.opCalls = append(w.opCalls, c)
	if err != nil && !c.written {
		// A commit whose answer was lost, or a crash after it: the row
		// committed with the change, and the engine could not tell.
		if rows, rerr := w.auditRows(); rerr == nil {
			c.committed = hasRow(rows, c.entry.ActorName, c.entry.Target, c.entry, c.entry.Action)
		}
	}
	w.outcome(fmt.Sprintf("%s: %s %s (row written %v)", e.ActorName, e.Action, e.Target, c.written), err)
	var result string
	switch {
	case closer && c.written, !closer && err == nil && c.written:
		return
	case err == nil:
		result = "ok"
	case closer:
		result = lapse.Reason(err)
	default:
		p, _ := problem.Of(err)
		result = fmt.Sprintf("%d %s: %s", p.Status, p.Code, p.Detail)
	}
	r := *e
	r.Result, r.At = result, w.clock.Now()
	rerr := lapse.AuditRecord(context.WithoutCancel(w.ctx), w.st, &r)
	if rerr != nil {
		w.logf("  the caller's row of %s %s did not commit: %v", e.Action, e.Target, rerr)
	}
	if err == nil && rerr != nil {
		c.lost = true
	}
}

// isOperator tells whether an actor the engine recorded is an operator's
// (as package closes or the HTTP layer names one), and which.
func isOperator(name string) (string, bool) {
	name = strings.TrimPrefix(name, access.KindOperator+":")
	for _, op := range operators {
		if op.name == name {
			return name, true
		}
	}
	return "", false
}

// auditRows reads the audit log, past the faults.
func (w *world) auditRows() ([]*lapse.AuditEntry, error) {
	as, ok := w.cfg.Store.(lapse.AccessStore)
	if !ok {
		return nil, errors.New("sim: the store keeps no audit log")
	}
	return as.AuditList(w.ctx, &lapse.AuditListParams{})
}

// hasRow reports whether rows hold the row of operator name doing
// something (one of actions, any when none) to target at at that ended
// "ok".
func hasRow(rows []*lapse.AuditEntry, name, target string, at lapse.AuditEntry, actions ...string) bool {
	return slices.ContainsFunc(rows, func(r *lapse.AuditEntry) bool {
		return r.ActorKind == access.KindOperator && r.ActorName == name && r.Target == target && r.At.Equal(at.At) &&
			r.Result == "ok" && (len(actions) == 0 || slices.Contains(actions, r.Action))
	})
}

// auditOperators checks S9 on the operators' actions since the last
// audit: each one acknowledged has its row, as it was made (actor, action,
// target, the engine's clock, second factor), and no review was resolved by
// an operator without the row of its action. The operators' transitions
// are checked with their orders (auditTransitionRows).
func (w *world) auditOperators(rows []*lapse.AuditEntry) error {
	w.check()
	for _, c := range w.opCalls[w.opChecked:] {
		if c.err != nil || c.lost {
			continue
		}
		e := c.entry
		if !slices.ContainsFunc(rows, func(r *lapse.AuditEntry) bool {
			return r.ActorKind == e.ActorKind && r.ActorID == e.ActorID && r.ActorName == e.ActorName && r.Role == e.Role &&
				r.Action == e.Action && r.Target == e.Target && r.At.Equal(e.At) && r.SecondFactor == e.SecondFactor &&
				r.Result == "ok"
		}) {
			return w.violation("S9", "%s's %s of %s at %s (step %d) was acknowledged, and the audit log has no row of it (second factor %q)",
				e.ActorName, e.Action, e.Target, stamp(e.At), c.step, e.SecondFactor)
		}
	}
	w.opChecked = len(w.opCalls)
	rs, err := w.cfg.Store.ReviewList(w.ctx, &lapse.ReviewListParams{})
	if err != nil {
		return err
	}
	for _, rv := range rs {
		name, ok := isOperator(rv.ResolvedBy)
		if !ok || rv.ResolvedAt == nil {
			continue
		}
		at := lapse.AuditEntry{At: lapse.Truncate(*rv.ResolvedAt)}
		if !hasRow(rows, name, fmt.Sprintf("review:%d", rv.ID), at, "review.resolve") &&
			(rv.DeliveryID == 0 || !hasRow(rows, name, fmt.Sprintf("delivery:%d", rv.DeliveryID), at, "delivery.retry")) {
			return w.violation("S9", "review %d (%s) was resolved by %s at %s, and the audit log has no row of it",
				rv.ID, rv.OrderNo, rv.ResolvedBy, stamp(*rv.ResolvedAt))
		}
	}
	return nil
}

// auditTransitionRows checks S9 on one order's log: every transition by an
// operator (a manual close, a refund) has the row of its action, which
// commits with it.
func (w *world) auditTransitionRows(o *lapse.Order, trs []*lapse.TransitionRecord, rows []*lapse.AuditEntry) error {
	for _, tr := range trs {
		name, ok := isOperator(tr.Actor)
		if !ok {
			continue
		}
		w.check()
		action := "refund.create"
		if tr.FiredBy == lapse.FiredByOperator {
			action = closes.ActionClose
		}
		if !hasRow(rows, name, "order:"+o.OrderNo, lapse.AuditEntry{At: lapse.Truncate(tr.CreatedAt)}, action) {
			return w.violation("S9", "%s: %s --%s--> %s (v%d) by %s at %s has no %s row in the audit log",
				o.OrderNo, tr.FromState, tr.Event, tr.ToState, tr.Version, tr.Actor, stamp(tr.CreatedAt), action)
		}
	}
	return nil
}

// sealAudit runs a pass of the audit log's sealer, as the running sealer
// does within its interval of a commit.
func (w *world) sealAudit() {
	s, err := engine.NewAuditSealer(w.eng, engine.AuditSealerConfig{})
	if err != nil {
		w.failed = err
		return
	}
	n, err := s.RunOnce(w.ctx)
	w.outcome(fmt.Sprintf("sealer sealed %d", n), err)
}

// finalAudit checks S9 at the end: the sealer, run until nothing is left
// unsealed, leaves a chain that verifies and covers every row.
func (w *world) finalAudit() error {
	w.check()
	s, err := engine.NewAuditSealer(w.eng, engine.AuditSealerConfig{})
	if err != nil {
		return err
	}
	for {
		n, err := s.RunOnce(w.ctx)
		if err != nil {
			return fmt.Errorf("sealing the audit log at the end: %w", err)
		}
		if n == 0 {
			break
		}
	}
	rows, err := w.auditRows()
	if err != nil {
		return err
	}
	c, err := lapse.AuditVerify(w.ctx, w.cfg.Store.(lapse.AccessStore), 0)
	if b, ok := errors.AsType[*lapse.AuditBreak](err); ok {
		return w.violation("S9", "the audit log's chain is broken at row %d: %s", b.Seq, b.Reason)
	}
	if err != nil {
		return err
	}
	if c.Unsealed != 0 || c.Rows != int64(len(rows)) {
		return w.violation("S9", "after sealing, the chain covers %d rows of %d, %d unsealed", c.Rows, len(rows), c.Unsealed)
	}
	return nil
}
