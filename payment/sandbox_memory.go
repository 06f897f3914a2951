package payment

import (
	"context"
	"slices"
	"sync"

	"github.com/lapsehq/lapse"
)

// MemorySandboxStore is a lapse.SandboxStore held in memory: the state of
// sandboxes in one process, the default of SandboxConfig.Store. Sandboxes
// that share one MemorySandboxStore are one gateway, as processes sharing a
// database are. Its transactions run one at a time and roll back what fn
// wrote when it fails. Safe for concurrent use.
type MemorySandboxStore struct {
	mu    sync.Mutex // held by the transaction in progress
	state *memorySandbox
	tx    *memoryTx // set on a store bound to a transaction
}

type memorySandbox struct {
	payments map[memoryKey]*lapse.SandboxPayment // by gateway and txn id
	order    []memoryKey                         // payments in the order first put
	charges  map[memoryKey]*lapse.SandboxCharge  // by gateway and key
	refunds  map[memoryKey]*lapse.SandboxRefund  // by gateway and key
	made     []memoryKey                         // refunds in the order created
	secrets  map[string][]byte
}

type memoryKey struct{ gateway, id string }

// memoryTx holds what undoes a transaction's writes, latest last.
type memoryTx struct{ undo []func() }

var _ lapse.SandboxStore = (*MemorySandboxStore)(nil)

// NewMemorySandboxStore returns an empty MemorySandboxStore.
func NewMemorySandboxStore() *MemorySandboxStore {
	return &MemorySandboxStore{state: &memorySandbox{
		payments: map[memoryKey]*lapse.SandboxPayment{},
		charges:  map[memoryKey]*lapse.SandboxCharge{},
		refunds:  map[memoryKey]*lapse.SandboxRefund{},
		secrets:  map[string][]byte{},
	}}
}

// with runs fn on the state: at once inside a transaction, which holds the
// lock, and under the lock outside one.
func (m *MemorySandboxStore) with(fn func(st *memorySandbox)) {
	if m.tx == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
	}
	fn(m.state)
}

// onUndo records how to undo a write, inside a transaction.
func (m *MemorySandboxStore) onUndo(f func()) {
	if m.tx != nil {
		m.tx.undo = append(m.tx.undo, f)
	}
}

// SandboxTx runs fn with every other transaction and every call outside one
// waiting, and undoes fn's writes when fn fails or panics.
func (m *MemorySandboxStore) SandboxTx(ctx context.Context, fn func(tx lapse.SandboxStore) error) error {
	if m.tx != nil {
		return fn(m)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	tx := &MemorySandboxStore{state: m.state, tx: &memoryTx{}}
	done := false
	defer func() {
		if !done {
			for _, f := range slices.Backward(tx.tx.undo) {
				f()
			}
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	done = true
	return nil
}

// SandboxOrderLock does nothing more than check that it runs in a
// transaction: a transaction holds the whole store.
func (m *MemorySandboxStore) SandboxOrderLock(ctx context.Context, gateway, orderNo string) error {
	if m.tx == nil {
		return lapse.Errorf(lapse.EINVALID, "sandbox: the lock of order %s is taken in a transaction", orderNo)
	}
	return nil
}

// SandboxPaymentList returns copies of the payments of orderNo (or of every
// order), in the order first put.
func (m *MemorySandboxStore) SandboxPaymentList(ctx context.Context, gateway, orderNo string) ([]*lapse.SandboxPayment, error) {
	var out []*lapse.SandboxPayment
	m.with(func(st *memorySandbox) {
		for _, k := range st.order {
			if p := st.payments[k]; k.gateway == gateway && (orderNo == "" || p.OrderNo == orderNo) {
				out = append(out, clonePayment(p))
			}
		}
	})
	return out, nil
}

// SandboxPaymentGet returns a copy of the payment txnID.
func (m *MemorySandboxStore) SandboxPaymentGet(ctx context.Context, gateway, txnID string) (*lapse.SandboxPayment, error) {
	var p *lapse.SandboxPayment
	m.with(func(st *memorySandbox) { p = st.payments[memoryKey{gateway, txnID}] })
	if p == nil {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no payment %q", txnID)
	}
	return clonePayment(p), nil
}

// SandboxPaymentPut records a copy of p.
func (m *MemorySandboxStore) SandboxPaymentPut(ctx context.Context, p *lapse.SandboxPayment) error {
	var err error
	m.with(func(st *memorySandbox) {
		k := memoryKey{p.Gateway, p.TxnID}
		prev, ok := st.payments[k]
		switch {
		case ok && prev.OrderNo != p.OrderNo:
			err = lapse.Errorf(lapse.EINVALID, "sandbox: payment %s is of order %s, not %s", p.TxnID, prev.OrderNo, p.OrderNo)
			return
		case ok:
			m.onUndo(func() { st.payments[k] = prev })
		default:
			st.order = append(st.order, k)
			m.onUndo(func() { delete(st.payments, k); st.order = st.order[:len(st.order)-1] })
		}
		st.payments[k] = clonePayment(p)
	})
	return err
}

// SandboxChargeGet returns a copy of the charge under key.
func (m *MemorySandboxStore) SandboxChargeGet(ctx context.Context, gateway, key string) (*lapse.SandboxCharge, error) {
	var c *lapse.SandboxCharge
	m.with(func(st *memorySandbox) { c = st.charges[memoryKey{gateway, key}] })
	if c == nil {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no charge under key %q", key)
	}
	out := *c
	return &out, nil
}

// SandboxChargeCreate records a copy of c unless its key is taken.
func (m *MemorySandboxStore) SandboxChargeCreate(ctx context.Context, c *lapse.SandboxCharge) (bool, error) {
	created := false
	m.with(func(st *memorySandbox) {
		k := memoryKey{c.Gateway, c.Key}
		if _, ok := st.charges[k]; ok {
			return
		}
		cp := *c
		st.charges[k], created = &cp, true
		m.onUndo(func() { delete(st.charges, k) })
	})
	return created, nil
}

// SandboxRefundGet returns a copy of the refund under key.
func (m *MemorySandboxStore) SandboxRefundGet(ctx context.Context, gateway, key string) (*lapse.SandboxRefund, error) {
	var r *lapse.SandboxRefund
	m.with(func(st *memorySandbox) { r = st.refunds[memoryKey{gateway, key}] })
	if r == nil {
		return nil, lapse.Refine(lapse.ErrProviderNotFound, "sandbox: no refund under key %q", key)
	}
	out := *r
	return &out, nil
}

// SandboxRefundCreate records a copy of r unless its key is taken.
func (m *MemorySandboxStore) SandboxRefundCreate(ctx context.Context, r *lapse.SandboxRefund) (bool, error) {
	created := false
	m.with(func(st *memorySandbox) {
		k := memoryKey{r.Gateway, r.Key}
		if _, ok := st.refunds[k]; ok {
			return
		}
		cp := *r
		st.refunds[k], created = &cp, true
		st.made = append(st.made, k)
		m.onUndo(func() { delete(st.refunds, k); st.made = st.made[:len(st.made)-1] })
	})
	return created, nil
}

// SandboxRefundList returns copies of the gateway's refunds, in the order
// created.
func (m *MemorySandboxStore) SandboxRefundList(ctx context.Context, gateway string) ([]*lapse.SandboxRefund, error) {
	var out []*lapse.SandboxRefund
	m.with(func(st *memorySandbox) {
		for _, k := range st.made {
			if k.gateway == gateway {
				r := *st.refunds[k]
				out = append(out, &r)
			}
		}
	})
	return out, nil
}

// SandboxSecretKeep keeps secret as the gateway's unless it has one.
func (m *MemorySandboxStore) SandboxSecretKeep(ctx context.Context, gateway string, secret []byte) ([]byte, error) {
	var out []byte
	m.with(func(st *memorySandbox) {
		if _, ok := st.secrets[gateway]; !ok {
			st.secrets[gateway] = slices.Clone(secret)
			m.onUndo(func() { delete(st.secrets, gateway) })
		}
		out = slices.Clone(st.secrets[gateway])
	})
	return out, nil
}

func clonePayment(p *lapse.SandboxPayment) *lapse.SandboxPayment {
	out := *p
	out.Callback = slices.Clone(p.Callback)
	return &out
}
