package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// oneTxnCharger answers every charge with one transaction, of the amount
// asked, once n charges are under way at once: a gateway that takes the
// group's charges for one.
type oneTxnCharger struct {
	fakeProvider
	n       int
	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func (c *oneTxnCharger) Charge(ctx context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	c.mu.Lock()
	if c.waiting++; c.waiting == c.n {
		close(c.all)
	}
	c.mu.Unlock()
	select {
	case <-c.all:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	return &lapse.ProviderPayment{TxnID: "one-txn", OrderNo: r.OrderNo, Status: lapse.ProviderPaid,
		Amount: r.Amount, Currency: r.Currency, PaidAt: t0.Add(time.Minute)}, nil
}

// TestGroupChargesOfOneTxnAtOnce: a provider that answers the charges of a
// group's members, made at once, with one transaction charges one member by
// it at most: a provider's transaction is counted once, however the answers
// interleave.
func TestGroupChargesOfOneTxnAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		const n = 8
		prov := &oneTxnCharger{n: n, all: make(chan struct{})}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		create(t, e, groupReq("G-ONE", time.Minute))
		for i := range n {
			if _, _, err := e.JoinGroup(ctx, "G-ONE", engine.JoinRequest{UserID: fmt.Sprintf("u%d", i), Method: "tok", By: app}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		drain(t, engine.NewDeliverer(e, engine.DelivererConfig{}))
		g, err := e.Group(ctx, "G-ONE")
		if err != nil {
			t.Fatal(err)
		}
		charged := 0
		for _, m := range g.Members {
			if m.Status == lapse.ChargeCharged {
				charged++
			}
		}
		if charged > 1 {
			t.Errorf("%d members charged by the one transaction one-txn; want at most one", charged)
		}
	})
}
