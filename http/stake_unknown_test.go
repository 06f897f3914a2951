package http_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/access"
	"github.com/lapsehq/lapse/engine"
	lapsehttp "github.com/lapsehq/lapse/http"
)

// refundListFails fails the next OrderRefundList once armed, as a database
// that drops one read would.
type refundListFails struct {
	lapse.Store
	armed *atomic.Bool
}

func (s *refundListFails) OrderRefundList(ctx context.Context, orderID int64) ([]*lapse.OrderRefund, error) {
	if s.armed.CompareAndSwap(true, false) {
		return nil, lapse.ErrStoreUnavailable
	}
	return s.Store.OrderRefundList(ctx, orderID)
}

// TestStakeUnknownRefuses: when what an operator's risky call puts at stake
// cannot be told for a reason of the server's (a read that failed), the
// call is refused, audited, and changes nothing. Before, it went on to its
// handler unjudged: a refund above the approval amount was made on one
// operator's word whenever the stake's read failed and the handler's did not.
func TestStakeUnknownRefuses(t *testing.T) {
	t.Parallel()
	armed := new(atomic.Bool)
	cfg := access.Config{ApprovalAmount: 500}
	g := guard(newEnvWith(t, options{access: &cfg, closer: true,
		cfg: lapsehttp.Config{Callbacks: map[string]lapse.PaymentCallback{"hmac": callbackScheme}},
		engine: func(c *engine.Config) {
			c.Payments = engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"hmac": closedProvider{}}}
		},
		wrap: func(s lapse.Store) lapse.Store { return &refundListFails{Store: s, armed: armed} }}))
	g.operator("alice", access.RoleOperator)
	g.paidOrder("SU-1", 1000)
	alice := session(g.login("alice"))
	g.rows()

	armed.Store(true)
	g.call("POST", "/v1/orders/SU-1/refunds", `{"amount":600}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		refused(t, http.StatusServiceUnavailable, lapse.EUNAVAILABLE)
	if rs := g.refunds("SU-1"); len(rs) != 0 {
		t.Fatalf("a refund above the approval amount was made while its stake could not be read: %+v", rs)
	}
	if rows := g.rows(); len(rows) == 0 || rows[len(rows)-1].Action != "refund.create" || rows[len(rows)-1].Result == "ok" {
		t.Errorf("audit rows of the refused refund: %+v; want a refund.create row that is not ok", rows)
	}

	// Read again, the stake holds the refund for a second operator.
	g.call("POST", "/v1/orders/SU-1/refunds", `{"amount":600}`, alice, header(lapsehttp.SecondFactorHeader, g.code("alice"))).
		want(t, http.StatusAccepted)
	if rs := g.refunds("SU-1"); len(rs) != 0 {
		t.Fatalf("a refund above the approval amount was made without approval: %+v", rs)
	}
}
