package lapse

import "context"

// SandboxStore keeps the state of the built-in sandbox payment gateway
// (payment.Sandbox): its payments, charges, refunds and signing secret, so
// that every process sharing a database sees one gateway. A store only
// reads and writes these records; the gateway's rules live in package
// payment, which does each of its operations in one SandboxTx that first
// locks the order it is about (SandboxOrderLock). Both built-in stores
// implement it and pass storetest.RunSandbox.
//
// Every record belongs to a gateway, the sandbox's provider name: two
// sandboxes of other names in one database do not see each other's.
// Lookups that find nothing return an error wrapping ErrProviderNotFound.
type SandboxStore interface {
	// SandboxTx runs fn in one transaction on a SandboxStore bound to it,
	// committing when fn returns nil and rolling back otherwise; fn's error
	// is returned as it is. On a SandboxStore that is already a
	// transaction, it runs fn in that same transaction.
	SandboxTx(ctx context.Context, fn func(tx SandboxStore) error) error

	// SandboxOrderLock locks the gateway's order orderNo, known to the
	// gateway or not, until the transaction ends. Transactions that lock one
	// order run one after the other, and what one reads after its lock
	// includes every commit of those before it, so that a read, a decision
	// and a write under the lock are one step. It may lock more than the
	// order (SQLite locks the whole database). Outside SandboxTx it is an
	// EINVALID error.
	SandboxOrderLock(ctx context.Context, gateway, orderNo string) error

	// SandboxPaymentList returns the gateway's payments of orderNo, or
	// every payment of the gateway when orderNo is "", in the order they
	// were first put.
	SandboxPaymentList(ctx context.Context, gateway, orderNo string) ([]*SandboxPayment, error)

	// SandboxPaymentGet returns the gateway's payment txnID.
	SandboxPaymentGet(ctx context.Context, gateway, txnID string) (*SandboxPayment, error)

	// SandboxPaymentPut records p, a new payment or a new version of one
	// (by Gateway and TxnID). A payment's OrderNo never changes: a put that
	// changes it is an EINVALID error.
	SandboxPaymentPut(ctx context.Context, p *SandboxPayment) error

	// SandboxChargeGet returns the gateway's charge under idempotency key.
	SandboxChargeGet(ctx context.Context, gateway, key string) (*SandboxCharge, error)

	// SandboxChargeCreate records c unless the gateway has a charge under
	// its Key: then it writes nothing and returns created=false. Inside a
	// transaction it waits for a concurrent creator of the key to end.
	SandboxChargeCreate(ctx context.Context, c *SandboxCharge) (created bool, err error)

	// SandboxRefundGet returns the gateway's refund under idempotency key.
	SandboxRefundGet(ctx context.Context, gateway, key string) (*SandboxRefund, error)

	// SandboxRefundCreate records r unless the gateway has a refund under
	// its Key: then it writes nothing and returns created=false. Inside a
	// transaction it waits for a concurrent creator of the key to end.
	SandboxRefundCreate(ctx context.Context, r *SandboxRefund) (created bool, err error)

	// SandboxRefundList returns every refund of the gateway, in the order
	// they were created.
	SandboxRefundList(ctx context.Context, gateway string) ([]*SandboxRefund, error)

	// SandboxSecretKeep records secret as the gateway's signing secret
	// unless the gateway has one, and returns the one it has: of
	// concurrent keepers, all get the secret of the first.
	SandboxSecretKeep(ctx context.Context, gateway string, secret []byte) ([]byte, error)
}

// SandboxPayment is a payment as a sandbox gateway holds it.
type SandboxPayment struct {
	Gateway string
	ProviderPayment
	// Refunded is how much of Amount was refunded.
	Refunded int64
	// Callback is the body of the latest callback about the payment, nil
	// before the first.
	Callback []byte
}

// SandboxCharge is a charge a sandbox gateway made under an idempotency
// key: the request, and the payment it made.
type SandboxCharge struct {
	Gateway  string
	Key      string
	OrderNo  string
	Amount   int64
	Currency string
	Method   string
	TxnID    string
}

// SandboxRefund is a refund a sandbox gateway made under an idempotency key:
// the request as sent (OrderNo and Currency may be empty) and the refund's
// id and status.
type SandboxRefund struct {
	Gateway  string
	Key      string
	TxnID    string
	OrderNo  string
	Amount   int64
	Currency string
	Reason   string
	RefundID string
	Status   ProviderRefundStatus
}
