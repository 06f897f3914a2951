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
// second one. A creation is the exception: on a store with a
// lapse.OrderCreateWither the engine hands it the row with the order
// (orderCreateWith), and the store commits them together, with other
// creations if it can.

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
// its end if a write in it changed something. Inside a transaction (eff set)
// writes pass through and say whether they changed anything: the
// transaction's owner appends.
type auditing struct {
	lapse.Store
	clock    lapse.Clock
	eff      *bool      // in a transaction: set once a write in it changed something
	appended *broadcast // signalled when a row committed: wakes the AuditSealers of the engine
}

func (s auditing) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	if s.eff != nil { // nested: the outer transaction appends
		return s.Store.Tx(ctx, func(tx lapse.Store) error { return fn(auditing{tx, s.clock, s.eff, s.appended}) })
	}
	p := pending(ctx)
	eff := new(bool)
	appended := false
	err := s.Store.Tx(ctx, func(tx lapse.Store) error {
		if err := fn(auditing{tx, s.clock, eff, s.appended}); err != nil {
			return err
		}
		if p == nil || !*eff {
			return nil
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
		appended = true
		return lapse.AuditAppend(ctx, as, &e)
	})
	if err == nil && appended {
		p.mu.Lock()
		p.written = true
		p.mu.Unlock()
		s.appended.signal()
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

// write runs call, one store write, as auditing says; changed tells from
// its result whether it changed anything (a create that found the record
// there did not).
func write[T any](ctx context.Context, s auditing, call func(lapse.Store) (T, error), changed func(T) bool) (T, error) {
	if s.eff != nil {
		got, err := call(s.Store)
		if err == nil && changed(got) {
			*s.eff = true
		}
		return got, err
	}
	if pending(ctx) == nil {
		return call(s.Store)
	}
	var got T
	err := s.Tx(ctx, func(tx lapse.Store) error {
		var err error
		got, err = write(ctx, tx.(auditing), call, changed)
		return err
	})
	return got, err
}

// always is the changed of writes that change something whenever they
// succeed.
func always[T any](T) bool { return true }

// two carries a write's two results through write.
type two[A any] struct {
	a       A
	created bool
}

func created[A any](r two[A]) bool { return r.created }

func (s auditing) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[*lapse.Order], error) {
		o, created, err := st.OrderCreate(ctx, p)
		return two[*lapse.Order]{o, created}, err
	}, created)
	return r.a, r.created, err
}

// orderCreateWith creates p, reserving reserve (none when nil), with the
// row ctx carries (WithAudit), in one call of the store's
// lapse.OrderCreateWither, which may write it together with concurrent
// creations rather than in a transaction of its own. ok is false when it
// cannot, and nothing was written: the store has none, the row is of a
// close batch, or s is a transaction's. The row is the one Tx would
// append, at the clock's time (Tx's is taken at its end, this one before
// the write: both are within the call).
func (s auditing) orderCreateWith(ctx context.Context, p *lapse.OrderCreateParams, reserve []lapse.Item) (got *lapse.Order, created, ok bool, err error) {
	c, isChecked := s.Store.(checked)
	if s.eff != nil || !isChecked {
		return nil, false, false, nil
	}
	w := lapse.OrderCreateWith{Reserve: reserve}
	pa := pending(ctx)
	if pa != nil {
		pa.mu.Lock()
		e := *pa.entry
		pa.mu.Unlock()
		if e.Batch != 0 {
			return nil, false, false, nil
		}
		e.At = s.clock.Now()
		if e.Result == "" {
			e.Result = "ok"
		}
		w.Audit = &e
	}
	got, created, ok, err = c.orderCreateWith(ctx, p, w)
	if ok && err == nil && created && pa != nil {
		pa.mu.Lock()
		pa.written = true
		pa.mu.Unlock()
		s.appended.signal()
	}
	return got, created, ok, err
}

func (s auditing) OrderCreateMany(ctx context.Context, ps []*lapse.OrderCreateParams) error {
	_, err := write(ctx, s, func(st lapse.Store) (struct{}, error) { return struct{}{}, st.OrderCreateMany(ctx, ps) }, always)
	return err
}

func (s auditing) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Order, error) { return st.OrderTransition(ctx, p) }, always)
}

func (s auditing) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	return write(ctx, s, func(st lapse.Store) ([]int64, error) { return st.OrderTransitionMany(ctx, ps) },
		func(ids []int64) bool { return len(ids) > 0 })
}

func (s auditing) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Order, error) { return st.OrderDeadlineSet(ctx, p) }, always)
}

func (s auditing) DeliveryRetry(ctx context.Context, p *lapse.DeliveryRetryParams) (*lapse.Delivery, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Delivery, error) { return st.DeliveryRetry(ctx, p) }, always)
}

func (s auditing) ReviewCreate(ctx context.Context, r *lapse.Review) (*lapse.Review, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Review, error) { return st.ReviewCreate(ctx, r) }, always)
}

func (s auditing) ReviewResolve(ctx context.Context, p *lapse.ReviewResolveParams) ([]*lapse.Review, error) {
	return write(ctx, s, func(st lapse.Store) ([]*lapse.Review, error) { return st.ReviewResolve(ctx, p) },
		func(rs []*lapse.Review) bool { return len(rs) > 0 })
}

func (s auditing) HeldPaymentUpdate(ctx context.Context, p *lapse.HeldPaymentUpdateParams) (*lapse.HeldPayment, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.HeldPayment, error) { return st.HeldPaymentUpdate(ctx, p) }, always)
}

func (s auditing) StockSet(ctx context.Context, p *lapse.StockSetParams) (*lapse.Stock, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Stock, error) { return st.StockSet(ctx, p) }, always)
}

func (s auditing) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	_, err := write(ctx, s, func(st lapse.Store) (struct{}, error) { return struct{}{}, st.StockMove(ctx, p) }, always)
	return err
}

func (s auditing) CouponCreate(ctx context.Context, p *lapse.CouponCreateParams) (*lapse.Coupon, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Coupon, error) { return st.CouponCreate(ctx, p) }, always)
}

func (s auditing) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Coupon, error) { return st.CouponMove(ctx, p) }, always)
}

func (s auditing) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[*lapse.Payment], error) {
		pay, created, err := st.PaymentCreate(ctx, p)
		return two[*lapse.Payment]{pay, created}, err
	}, created)
	return r.a, r.created, err
}

func (s auditing) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Payment, error) { return st.PaymentUpdate(ctx, p) }, always)
}

func (s auditing) OrderRefundCreate(ctx context.Context, r *lapse.OrderRefund) (*lapse.OrderRefund, bool, error) {
	res, err := write(ctx, s, func(st lapse.Store) (two[*lapse.OrderRefund], error) {
		ref, created, err := st.OrderRefundCreate(ctx, r)
		return two[*lapse.OrderRefund]{ref, created}, err
	}, created)
	return res.a, res.created, err
}

func (s auditing) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.OrderRefund, error) { return st.OrderRefundUpdate(ctx, p) }, always)
}

func (s auditing) GroupMemberAdd(ctx context.Context, m *lapse.GroupMember) (*lapse.GroupMember, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[*lapse.GroupMember], error) {
		got, created, err := st.GroupMemberAdd(ctx, m)
		return two[*lapse.GroupMember]{got, created}, err
	}, created)
	return r.a, r.created, err
}

func (s auditing) GroupMemberUpdate(ctx context.Context, p *lapse.GroupMemberUpdateParams) (*lapse.GroupMember, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.GroupMember, error) { return st.GroupMemberUpdate(ctx, p) }, always)
}

func (s auditing) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	r, err := write(ctx, s, func(st lapse.Store) (two[[]*lapse.Card], error) {
		cs, created, err := st.CardIssue(ctx, p)
		return two[[]*lapse.Card]{cs, created}, err
	}, created)
	return r.a, r.created, err
}

func (s auditing) CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*lapse.Card, error) {
	return write(ctx, s, func(st lapse.Store) ([]*lapse.Card, error) { return st.CardRevoke(ctx, orderID, at) },
		func(cs []*lapse.Card) bool { return len(cs) > 0 })
}

func (s auditing) CardUse(ctx context.Context, p *lapse.CardUseParams) (*lapse.Card, error) {
	return write(ctx, s, func(st lapse.Store) (*lapse.Card, error) { return st.CardUse(ctx, p) }, always)
}

func (s auditing) EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (bool, error) {
	return write(ctx, s, func(st lapse.Store) (bool, error) { return st.EffectClaim(ctx, consumer, eventID, at) },
		func(first bool) bool { return first })
}
