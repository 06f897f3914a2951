package sim

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
)

// process is one run of the engine on the store: when it crashes, every
// store call it makes from then on fails, as if the process were gone, and
// the simulator starts a new one on the same database.
type process struct {
	n       int
	crashed atomic.Bool
	crashAt atomic.Int64 // when positive, the process dies at that many more store calls
}

// faultStore is the store as one process sees it: each call may fail before
// it runs, or run (and commit, outside a transaction) and then report an
// error, or crash the process, as the seed draws. Calls it does not list
// pass through unfaulted.
type faultStore struct {
	lapse.Store
	// The store's audit log and the other access records, so that the
	// engine's audited writes (engine.WithAudit) and its sealer find them
	// through this store; only AuditInsert is faulted.
	lapse.AccessStore
	f    *faults
	p    *process
	inTx bool
}

func (s *faultStore) do(call string, fn func() error) error {
	if s.p.crashed.Load() {
		return errCrashed
	}
	if s.p.crashAt.Load() > 0 && s.p.crashAt.Add(-1) == 0 {
		s.f.count(FaultCrash)
		s.p.crashed.Store(true)
		return errCrashed
	}
	kind, after := s.f.store(call, s.inTx)
	if kind == "" {
		return fn()
	}
	if !after {
		if kind == FaultCrash {
			s.p.crashed.Store(true)
			return errCrashed
		}
		return injected(kind, call)
	}
	if err := fn(); err != nil {
		return err
	}
	if kind == FaultCrash {
		s.p.crashed.Store(true)
		return errCrashed
	}
	return injected(kind, call)
}

// Tx faults the transaction as a whole (a failed BEGIN, a commit whose
// answer was lost, a crash at the commit) and hands fn a faulted store. A
// process that crashed inside fn never commits, whatever fn returns.
func (s *faultStore) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.do("Tx", func() error {
		return s.Store.Tx(ctx, func(tx lapse.Store) error {
			err := fn(newFaultStore(tx, s.f, s.p, true))
			if err == nil && s.p.crashed.Load() {
				return errCrashed
			}
			return err
		})
	})
}

// newFaultStore wraps st, whose access records it passes on when st keeps
// them.
func newFaultStore(st lapse.Store, f *faults, p *process, inTx bool) *faultStore {
	as, _ := st.(lapse.AccessStore)
	return &faultStore{Store: st, AccessStore: as, f: f, p: p, inTx: inTx}
}

// AuditInsert appends an audit row: the engine's, in the transaction of an
// audited change, or the simulated operator's own (lapse.AuditRecord).
func (s *faultStore) AuditInsert(ctx context.Context, e *lapse.AuditEntry) error {
	return s.do("AuditInsert", func() error { return s.AccessStore.AuditInsert(ctx, e) })
}

func call1[T any](s *faultStore, name string, fn func() (T, error)) (T, error) {
	var out T
	err := s.do(name, func() error {
		var err error
		out, err = fn()
		return err
	})
	return out, err
}

func call2[T any, U any](s *faultStore, name string, fn func() (T, U, error)) (T, U, error) {
	var a T
	var b U
	err := s.do(name, func() error {
		var err error
		a, b, err = fn()
		return err
	})
	return a, b, err
}

func (s *faultStore) OrderCreate(ctx context.Context, p *lapse.OrderCreateParams) (*lapse.Order, bool, error) {
	return call2(s, "OrderCreate", func() (*lapse.Order, bool, error) { return s.Store.OrderCreate(ctx, p) })
}

func (s *faultStore) OrderGet(ctx context.Context, orderNo string) (*lapse.Order, error) {
	return call1(s, "OrderGet", func() (*lapse.Order, error) { return s.Store.OrderGet(ctx, orderNo) })
}

func (s *faultStore) OrderLock(ctx context.Context, orderNo string) (*lapse.Order, error) {
	return call1(s, "OrderLock", func() (*lapse.Order, error) { return s.Store.OrderLock(ctx, orderNo) })
}

func (s *faultStore) OrderTransition(ctx context.Context, p *lapse.OrderTransitionParams) (*lapse.Order, error) {
	return call1(s, "OrderTransition", func() (*lapse.Order, error) { return s.Store.OrderTransition(ctx, p) })
}

func (s *faultStore) OrderTransitionMany(ctx context.Context, ps []*lapse.OrderTransitionParams) ([]int64, error) {
	return call1(s, "OrderTransitionMany", func() ([]int64, error) { return s.Store.OrderTransitionMany(ctx, ps) })
}

func (s *faultStore) OrderDeadlineSet(ctx context.Context, p *lapse.OrderDeadlineSetParams) (*lapse.Order, error) {
	return call1(s, "OrderDeadlineSet", func() (*lapse.Order, error) { return s.Store.OrderDeadlineSet(ctx, p) })
}

func (s *faultStore) OrderClaimDue(ctx context.Context, p *lapse.OrderClaimDueParams) ([]*lapse.Order, error) {
	return call1(s, "OrderClaimDue", func() ([]*lapse.Order, error) { return s.Store.OrderClaimDue(ctx, p) })
}

func (s *faultStore) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	return call2(s, "OrderNextDeadline", func() (time.Time, bool, error) { return s.Store.OrderNextDeadline(ctx, flows, from) })
}

func (s *faultStore) PaymentCreate(ctx context.Context, p *lapse.PaymentCreateParams) (*lapse.Payment, bool, error) {
	return call2(s, "PaymentCreate", func() (*lapse.Payment, bool, error) { return s.Store.PaymentCreate(ctx, p) })
}

func (s *faultStore) PaymentGet(ctx context.Context, provider, txnID string) (*lapse.Payment, error) {
	return call1(s, "PaymentGet", func() (*lapse.Payment, error) { return s.Store.PaymentGet(ctx, provider, txnID) })
}

func (s *faultStore) PaymentList(ctx context.Context, p *lapse.PaymentListParams) ([]*lapse.Payment, error) {
	return call1(s, "PaymentList", func() ([]*lapse.Payment, error) { return s.Store.PaymentList(ctx, p) })
}

func (s *faultStore) PaymentUpdate(ctx context.Context, p *lapse.PaymentUpdateParams) (*lapse.Payment, error) {
	return call1(s, "PaymentUpdate", func() (*lapse.Payment, error) { return s.Store.PaymentUpdate(ctx, p) })
}

func (s *faultStore) OrderRefundCreate(ctx context.Context, r *lapse.OrderRefund) (*lapse.OrderRefund, bool, error) {
	return call2(s, "OrderRefundCreate", func() (*lapse.OrderRefund, bool, error) { return s.Store.OrderRefundCreate(ctx, r) })
}

func (s *faultStore) OrderRefundUpdate(ctx context.Context, p *lapse.OrderRefundUpdateParams) (*lapse.OrderRefund, error) {
	return call1(s, "OrderRefundUpdate", func() (*lapse.OrderRefund, error) { return s.Store.OrderRefundUpdate(ctx, p) })
}

func (s *faultStore) DeliveryClaim(ctx context.Context, p *lapse.DeliveryClaimParams) ([]*lapse.Delivery, error) {
	return call1(s, "DeliveryClaim", func() ([]*lapse.Delivery, error) { return s.Store.DeliveryClaim(ctx, p) })
}

func (s *faultStore) DeliveryFinish(ctx context.Context, p *lapse.DeliveryFinishParams) (*lapse.Delivery, error) {
	return call1(s, "DeliveryFinish", func() (*lapse.Delivery, error) { return s.Store.DeliveryFinish(ctx, p) })
}

func (s *faultStore) DeliveryDoneMany(ctx context.Context, p *lapse.DeliveryDoneManyParams) ([]int64, error) {
	return call1(s, "DeliveryDoneMany", func() ([]int64, error) { return s.Store.DeliveryDoneMany(ctx, p) })
}

func (s *faultStore) EffectClaim(ctx context.Context, consumer, eventID string, at time.Time) (bool, error) {
	return call1(s, "EffectClaim", func() (bool, error) { return s.Store.EffectClaim(ctx, consumer, eventID, at) })
}

func (s *faultStore) StockMove(ctx context.Context, p *lapse.StockMoveParams) error {
	return s.do("StockMove", func() error { return s.Store.StockMove(ctx, p) })
}

func (s *faultStore) CouponMove(ctx context.Context, p *lapse.CouponMoveParams) (*lapse.Coupon, error) {
	return call1(s, "CouponMove", func() (*lapse.Coupon, error) { return s.Store.CouponMove(ctx, p) })
}

func (s *faultStore) GroupMemberAdd(ctx context.Context, m *lapse.GroupMember) (*lapse.GroupMember, bool, error) {
	return call2(s, "GroupMemberAdd", func() (*lapse.GroupMember, bool, error) { return s.Store.GroupMemberAdd(ctx, m) })
}

func (s *faultStore) GroupMemberList(ctx context.Context, orderID int64) ([]*lapse.GroupMember, error) {
	return call1(s, "GroupMemberList", func() ([]*lapse.GroupMember, error) { return s.Store.GroupMemberList(ctx, orderID) })
}

func (s *faultStore) GroupMemberGet(ctx context.Context, key string) (*lapse.GroupMember, error) {
	return call1(s, "GroupMemberGet", func() (*lapse.GroupMember, error) { return s.Store.GroupMemberGet(ctx, key) })
}

func (s *faultStore) GroupMemberGetByTxn(ctx context.Context, provider, txnID string) (*lapse.GroupMember, error) {
	return call1(s, "GroupMemberGetByTxn", func() (*lapse.GroupMember, error) { return s.Store.GroupMemberGetByTxn(ctx, provider, txnID) })
}

func (s *faultStore) GroupMemberUpdate(ctx context.Context, p *lapse.GroupMemberUpdateParams) (*lapse.GroupMember, error) {
	return call1(s, "GroupMemberUpdate", func() (*lapse.GroupMember, error) { return s.Store.GroupMemberUpdate(ctx, p) })
}

func (s *faultStore) CardIssue(ctx context.Context, p *lapse.CardIssueParams) ([]*lapse.Card, bool, error) {
	return call2(s, "CardIssue", func() ([]*lapse.Card, bool, error) { return s.Store.CardIssue(ctx, p) })
}

func (s *faultStore) CardRevoke(ctx context.Context, orderID int64, at time.Time) ([]*lapse.Card, error) {
	return call1(s, "CardRevoke", func() ([]*lapse.Card, error) { return s.Store.CardRevoke(ctx, orderID, at) })
}
