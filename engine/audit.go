package engine

import (
	"context"
	"sync"
	"time"

	"github.com/lapsehq/lapse"
)

// An audited call. Every action of a service's key or an operator is in the
// audit log (S9), in the same transaction as its effect, so that neither
// commits without the other. The caller who knows who acts (the HTTP API,
// the command line) puts the row in the context with WithAudit; the first
// write the engine makes for the call then runs in a transaction that
// appends the row at its end. What the call writes after that (a refund's
// answer from its provider, say) is the consequence of the action, not a
// second one.

type auditKey struct{}

// pendingAudit is the row of one audited call and whether it committed.
type pendingAudit struct {
	mu      sync.Mutex
	entry   *lapse.AuditEntry
	written bool
}

// WithAudit returns a context under which the engine appends entry to the
// audit log with the first change it makes: in that change's transaction,
// at the time of the engine's clock, with Result "ok" unless it is set. The
// store must be a lapse.AccessStore (all built-in stores are). After the
// call, AuditWritten tells whether the row committed; when it did not (the
// call failed, or changed nothing), the caller records it itself with
// lapse.AuditRecord.
func WithAudit(ctx context.Context, entry *lapse.AuditEntry) context.Context {
	return context.WithValue(ctx, auditKey{}, &pendingAudit{entry: entry})
}

// AuditWritten reports whether the row that ctx carries (WithAudit) was
// committed with a change.
func AuditWritten(ctx context.Context) bool {
	p, _ := ctx.Value(auditKey{}).(*pendingAudit)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.written
}

// withoutAudit returns ctx with no row to audit, for writes a call makes
// that are not its action.
func withoutAudit(ctx context.Context) context.Context {
	return context.WithValue(ctx, auditKey{}, (*pendingAudit)(nil))
}

// pending returns the row of ctx still to be written, or nil.
func pending(ctx context.Context) *pendingAudit {
	p, _ := ctx.Value(auditKey{}).(*pendingAudit)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.written {
		return nil
	}
	return p
}

// auditing is the engine's store, above checked: a write outside a
// transaction, under a context with a row to audit, runs in one with the
// row appended; a transaction begun under such a context appends the row at
// its end. Inside a transaction (tx) writes pass through: the transaction's
// owner appends.
type auditing struct {
	lapse.Store
	clock lapse.Clock
	tx    bool
}

func (s auditing) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	p := pending(ctx)
	if s.tx || p == nil {
		return s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(auditing{tx, s.clock, true}) })
	}
	err := s.Store.Tx(ctx, func(tx lapse.Store) error {
		if err := fn(auditing{tx, s.clock, true}); err != nil {
			return err
		}
		as, ok := accessOf(tx)
		if !ok {
			return lapse.Errorf(lapse.EINTERNAL, "engine: the store %T keeps no audit log", tx)
		}
		p.mu.Lock()
		e := *p.entry
		p.mu.Unlock()
		e.At = s.clock.Now()
		if e.Result == "" {
			e.Result = "ok"
		}
		return lapse.AuditAppend(ctx, as, &e)
	})
	if err == nil {
		p.mu.Lock()
		p.written = true
		p.mu.Unlock()
	}
	return err
}

// accessOf returns the AccessStore under tx, through the engine's wrappers.
func accessOf(tx lapse.Store) (lapse.AccessStore, bool) {
	for {
		if as, ok := tx.(lapse.AccessStore); ok {
			return as, true
		}
		switch t := tx.(type) {
		case checked:
			tx = t.Store
		case auditing:
			tx = t.Store
		default:
			return nil, false
		}
	}
}

// write runs call, one store write, as auditing says.
func write[T any](ctx context.Context, s auditing, call func(lapse.Store) (T, error)) (T, error) {
	if s.tx || pending(ctx) == nil {
		return call(s.Store)
	}
	var got T
	err := s.Tx(ctx, func(tx lapse.Store) error {
		var err error
		got, err = call(tx.(auditing).Store)
		return err
	})
	return got, err
}

// two carries a write's two results through write.
type two[A, B any] struct {
	a A
	b B
}

func (s auditing) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[*lapse.Order, bool], error) {
		o, created, err := st.OrderCreate(ctx, p)
		return two[*lapse.Order, bool]{o, created}, err
	})
	return r.a, r.b, err
}

func (s auditing) OrderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	_, err := write(ctx, s, func(st lapse.Store) (struct{}, error) { return struct{}{}, st.OrderCreateMany(ctx, ps) })
	return err
}

func (s auditing) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Order, error) { return st.OrderTransition(ctx, p) })
}

func (s auditing) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	return write(ctx, s, func(st lapse.Store) ([]int64, error) { return st.OrderTransitionMany(ctx, ps) })
}

func (s auditing) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Order, error) { return st.OrderDeadlineSet(ctx, p) })
}

func (s auditing) DeliveryRetry(ctx context.Context, p *lapse.DeliveryRetryParams) (*lapse.Delivery, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Delivery, error) { return st.DeliveryRetry(ctx, p) })
}

func (s auditing) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Stock, error) { return st.StockSet(ctx, p) })
}

func (s auditing) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	_, err := write(ctx, s, func(st lapse.Store) (struct{}, error) { return struct{}{}, st.StockMove(ctx, p) })
	return err
}

func (s auditing) CouponCreate(ctx context.Context, p *lapse.CouponCreateParams) (*lapse.Coupon, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Coupon, error) { return st.CouponCreate(ctx, p) })
}

func (s auditing) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Coupon, error) { return st.CouponMove(ctx, p) })
}

func (s auditing) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[*lapse.Payment, bool], error) {
		pay, created, err := st.PaymentCreate(ctx, p)
		return two[*lapse.Payment, bool]{pay, created}, err
	})
	return r.a, r.b, err
}

func (s auditing) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Payment, error) { return st.PaymentUpdate(ctx, p) })
}

func (s auditing) OrderRefundCreate(ctx context.Context, r *lapse.OrderRefund) (*lapse.OrderRefund, bool, error) {
	res, err := write(ctx, s, func(st lapse.Store) (two[*lapse.OrderRefund, bool], error) {
		ref, created, err := st.OrderRefundCreate(ctx, r)
		return two[*lapse.OrderRefund, bool]{ref, created}, err
	})
	return res.a, res.b, err
}

func (s auditing) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.OrderRefund, error) { return st.OrderRefundUpdate(ctx, p) })
}

func (s auditing) GroupMemberAdd(ctx context.Context, m *lapse.GroupMember) (*lapse.GroupMember, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[*lapse.GroupMember, bool], error) {
		got, created, err := st.GroupMemberAdd(ctx, m)
		return two[*lapse.GroupMember, bool]{got, created}, err
	})
	return r.a, r.b, err
}

func (s auditing) GroupMemberUpdate(ctx context.Context, p *lapse.GroupMemberUpdateParams) (*lapse.GroupMember, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.GroupMember, error) { return st.GroupMemberUpdate(ctx, p) })
}

func (s auditing) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[[]*lapse.Card, bool], error) {
		cs, created, err := st.CardIssue(ctx, p)
		return two[[]*lapse.Card, bool]{cs, created}, err
	})
	return r.a, r.b, err
}

func (s auditing) CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*lapse.Card, error) {
	return write(ctx, s, func(st lapse.Store) ([]*lapse.Card, error) { return st.CardRevoke(ctx, orderID, at) })
}

func (s auditing) CardUse(ctx context.Context, id int64) (*lapse.Card, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Card, error) { return st.CardUse(ctx, id) })
}

func (s auditing) EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (bool, error) {
	return write(ctx, s, func(st lapse.Store) (bool, error) { return st.EffectClaim(ctx, consumer, eventID, at) })
}
