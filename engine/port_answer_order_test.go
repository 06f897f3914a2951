package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// otherOrderProvider answers every Close with a payment made for another
// order than the one asked about: a port at odds with its contract.
type otherOrderProvider struct {
	*fakeProvider
	at time.Time
}

func (p *otherOrderProvider) Close(_ context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	if orderNo == "PO-3" { // its own order, but no transaction
		return &lapse.ProviderPayment{OrderNo: orderNo, Status: lapse.ProviderPaid, Amount: 1000, Currency: "CNY", Merchant: "m-1", PaidAt: p.at}, nil
	}
	return &lapse.ProviderPayment{TxnID: "txn-of-" + orderNo + "-x", OrderNo: orderNo + "-x", Status: lapse.ProviderPaid,
		Amount: 1000, Currency: "CNY", Merchant: "m-1", PaidAt: p.at}, nil
}

// TestPortAnswerOfAnotherOrder: a payment port's answer to closing order A
// that is a payment of another order does not pay A, neither when the
// closer asks nor when an operator closes A by hand: it is no answer about
// A (the HTTP provider refuses it as unreadable, which a port of the
// library's user may not), so A is asked about again, as after an answer
// that cannot be read, and no payment is recorded on it (S3: the capture is
// the other order's). So is a paid answer that names no transaction: a
// payment Lapse could never tell from another.
func TestPortAnswerOfAnotherOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &otherOrderProvider{fakeProvider: &fakeProvider{}, at: t0.Add(10 * time.Second)}
		e := paymentEngine(t, open(), clk, prov)
		ctx := ctxT(t)
		for no, ttl := range map[string]time.Duration{"PO-1": time.Minute, "PO-2": 2 * time.Hour, "PO-3": time.Minute} {
			create(t, e, checkout(no, ttl))
			if _, err := e.StartPayment(ctx, no, "sandbox", app); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set(t0.Add(time.Hour)) // past PO-1's deadline and its grace
		c := engine.NewClaimer(e, engine.ClaimerConfig{})
		if _, err := c.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.CloseOrder(ctx, "PO-2", "stuck", operator); lapse.ErrorCode(err) != lapse.EUNAVAILABLE {
			t.Errorf("CloseOrder of PO-2, whose provider answers with another order's payment = %v; want EUNAVAILABLE", err)
		}
		for _, no := range []string{"PO-1", "PO-2", "PO-3"} {
			o, err := e.Order(ctx, no)
			if err != nil || o.State != flows.Unpaid {
				t.Errorf("%s after its provider answered with another order's payment: %+v, %v; want UNPAID, asked again", no, o, err)
			}
			if ps, err := e.Payments(ctx, no); err != nil || len(ps) != 0 {
				t.Errorf("payments of %s = %+v, %v; want none", no, ps, err)
			}
		}
		// Nor does a notice without a transaction, whoever makes one.
		for _, kind := range []lapse.PaymentNoticeKind{lapse.NoticePaid, lapse.NoticeRefunded} {
			n := &lapse.PaymentNotice{Provider: "sandbox", Kind: kind, OrderNo: "PO-2", Amount: 1000, Currency: "CNY",
				Merchant: "m-1", PaidAt: clk.Now()}
			if p, err := e.ApplyPayment(ctx, n); lapse.ErrorCode(err) != lapse.EINVALID {
				t.Errorf("ApplyPayment of a %s notice without a transaction = %+v, %v; want EINVALID", kind, p, err)
			}
		}
		if o, _ := e.Order(ctx, "PO-2"); o.State != flows.Unpaid {
			t.Errorf("PO-2 after a notice without a transaction is %s, want UNPAID", o.State)
		}
	})
}

// otherOrderCharger answers every charge, and every query about one, with
// a capture made under another number than the member's charge key.
type otherOrderCharger struct {
	fakeProvider
	clk lapse.Clock
}

func (c *otherOrderCharger) answer(key string) *lapse.ProviderPayment {
	return &lapse.ProviderPayment{TxnID: "ch-of-" + key + "-x", OrderNo: key + "-x", Status: lapse.ProviderPaid,
		Amount: 990, Currency: "CNY", PaidAt: c.clk.Now()}
}

func (c *otherOrderCharger) Charge(_ context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return c.answer(r.IdempotencyKey), nil
}

func (c *otherOrderCharger) Query(_ context.Context, key string) (*lapse.ProviderPayment, error) {
	return c.answer(key), nil
}

// TestGroupChargeAnswerOfAnotherOrder: a charge answered with a capture
// made under another number than the member's charge key does not charge
// the member (S7, S3: the capture is another's): the member stays
// charging, its outcome unknown, and the group does not settle on it.
func TestGroupChargeAnswerOfAnotherOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &otherOrderCharger{clk: clk}
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		create(t, e, groupReq("G-OX", time.Minute))
		if _, _, err := e.JoinGroup(ctx, "G-OX", engine.JoinRequest{UserID: "u1", Method: "tok", By: app}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if _, err := engine.NewClaimer(e, engine.ClaimerConfig{}).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		drain(t, d)
		clk.Advance(engine.DefaultGroupRetries[0])
		drain(t, d) // the next round asks, and is answered the same
		g, _ := e.Group(ctx, "G-OX")
		if m := g.Members[0]; m.Status != lapse.ChargeCharging || m.TxnID != "" {
			t.Errorf("member u1 = %+v; want charging, no transaction recorded", m)
		}
		if g.Order.State == flows.GroupSettled {
			t.Errorf("G-OX settled on a capture of another order")
		}
	})
}
