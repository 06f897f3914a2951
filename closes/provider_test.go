package closes_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
	"github.com/lapsehq/lapse/flows"
)

// provider is a fake payment provider that closes payments when it is up,
// and reports the orders in paid as paid.
type provider struct {
	mu   sync.Mutex
	down bool
	paid map[string]bool
}

func (p *provider) Close(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.down:
		return nil, errors.New("connection refused")
	case p.paid[orderNo]:
		return &lapse.ProviderPayment{TxnID: "txn-" + orderNo, OrderNo: orderNo, Status: lapse.ProviderPaid, Amount: 1000,
			Currency: "CNY", PaidAt: t0}, nil
	}
	return &lapse.ProviderPayment{OrderNo: orderNo, Status: lapse.ProviderClosed}, nil
}

func (p *provider) Query(ctx context.Context, orderNo string) (*lapse.ProviderPayment, error) {
	return nil, lapse.ErrProviderNotFound
}

func (p *provider) Charge(ctx context.Context, r *lapse.ChargeRequest) (*lapse.ProviderPayment, error) {
	return nil, errors.New("not here")
}

func (p *provider) Refund(ctx context.Context, r *lapse.RefundRequest) (*lapse.ProviderRefund, error) {
	return nil, errors.New("not here")
}

func (p *provider) RefundQuery(ctx context.Context, key string) (*lapse.ProviderRefund, error) {
	return nil, lapse.ErrProviderNotFound
}

// TestRunAsksTheProvider: orders whose customer started paying are settled
// with the provider first. While it is down their items fail, with the
// error in the item and the audit log, and the next Run tries them again;
// a payment it reports is applied and the order skipped.
func TestRunAsksTheProvider(t *testing.T) {
	t.Parallel()
	prov := &provider{down: true, paid: map[string]bool{"I-003": true}}
	v := newEnv(t, prov)
	ctx := ctxT(t)
	nos := v.orders("I", "u1", 4)
	for _, no := range nos[1:] {
		if _, err := v.e.StartPayment(ctx, no, "sandbox", app); err != nil {
			t.Fatal(err)
		}
	}
	b, err := v.c.Start(ctx, &closes.Selector{UserID: "u1"}, "provider outage", alice, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(time.Minute)
	first, err := v.c.Run(ctx, b.ID, alice, nil)
	if want := "done total 4 closed 1 skipped 0 failed 3 finished"; err != nil || counts(first) != want {
		t.Fatalf("Run with the provider down = %s, %v; want %s", counts(first), err, want)
	}
	items := v.items(b.ID)
	rows := v.closeRows(b.ID)
	for _, no := range nos[1:] {
		if it := items[no]; it.Status != lapse.CloseItemFailed || !strings.Contains(it.Detail, "connection refused") {
			t.Errorf("item %s = %+v, want failed naming the provider's error", no, it)
		}
		if rs := rows["order:"+no]; len(rs) != 1 || !strings.Contains(rs[0].Result, "connection refused") {
			t.Errorf("audit rows of %s = %+v, want one naming the provider's error", no, rs)
		}
		if o, _ := v.e.Order(ctx, no); o.State != flows.Unpaid {
			t.Errorf("%s is %s after a failed close", no, o.State)
		}
	}

	prov.mu.Lock()
	prov.down = false
	prov.mu.Unlock()
	v.clk.Advance(time.Minute)
	second, err := v.c.Run(ctx, b.ID, cli, nil)
	if want := "done total 4 closed 3 skipped 1 failed 0 finished"; err != nil || counts(second) != want {
		t.Fatalf("Run with the provider up = %s, %v; want %s", counts(second), err, want)
	}
	if !second.FinishedAt.After(first.FinishedAt) {
		t.Errorf("finished at %v, then %v", first.FinishedAt, second.FinishedAt)
	}
	v.drain()
	v.closedOnce("I-001", alice)
	v.closedOnce("I-002", cli)
	v.closedOnce("I-004", cli)
	if it := v.items(b.ID)["I-003"]; it.Status != lapse.CloseItemSkipped || !strings.Contains(it.Detail, "PAID") {
		t.Errorf("I-003's item = %+v, want skipped as PAID", it)
	}
	if o, _ := v.e.Order(ctx, "I-003"); o.State != flows.Paid {
		t.Errorf("I-003 is %s, want PAID by the payment the provider reported", o.State)
	}
	rows = v.closeRows(b.ID)
	if rs := rows["order:I-002"]; len(rs) != 2 || rs[0].Result == "ok" || rs[1].Result != "ok" || rs[1].ActorName != "root" {
		t.Errorf("audit rows of I-002 = %+v, want the failure, then root's close", rs)
	}
	v.verifyAudit()
}
