package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
)

// TestQueueHeld: payments held without their order that are on the desk
// are shown apart from the orders, in both languages; those still waiting
// for their order are not.
func TestQueueHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for _, no := range []string{"GHOST-1", "GHOST-2"} {
		n := &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "txn-" + no, OrderNo: no, Amount: 4200,
			Currency: "CNY", PaidAt: e.clock.Now(), Raw: []byte(`{}`)}
		if _, err := e.engine.ApplyPayment(e.ctx, n); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(2 * time.Minute)
	}
	m, err := engine.NewHeldMatcher(e.engine, engine.HeldMatcherConfig{Window: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.RunOnce(e.ctx); err != nil || got.Reviewed != 1 {
		t.Fatalf("matcher pass = %+v, %v", got, err)
	}
	e.operator("alice", "viewer")
	b := e.login("alice")
	body := b.page("/console/", http.StatusOK)
	for _, want := range []string{"Payments held without their order", "sandbox / txn-GHOST-1", "GHOST-1", "42.00 CNY", "no order GHOST-1 appeared"} {
		if !strings.Contains(body, want) {
			t.Errorf("the queue lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "txn-GHOST-2") || strings.Contains(body, "Nothing waits for an operator.") || len(rows(body)) != 0 {
		t.Errorf("the queue shows a held payment still waiting, says nothing waits, or lists it as an order:\n%s", body)
	}
	b.zh()
	if body := b.page("/console/", http.StatusOK); !strings.Contains(body, "无对应订单的暂存支付") {
		t.Errorf("the queue in Chinese lacks its held payments:\n%s", body)
	}
}
