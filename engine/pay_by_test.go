package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flowfile"
)

// payThenShip is a flow written in YAML whose orders are paid and then
// have a deadline of their own: the merchant ships within 48 hours.
const payThenShip = `
name: pay_then_ship
initial: UNPAID
pays: PAY
grace: 2m
states:
  - {name: UNPAID, deadline: {after: 15m, event: TIMEOUT}}
  - {name: PAID, deadline: {after: 48h, event: AUTO_REFUND}}
  - {name: SHIPPED, terminal: true}
  - {name: CLOSED, terminal: true}
  - {name: REFUNDED, terminal: true}
events:
  - {name: PAY, internal: true}
  - {name: TIMEOUT, internal: true}
  - {name: AUTO_REFUND, internal: true}
  - {name: SHIP}
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid], guard: before_deadline}
  - {from: UNPAID, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
  - {from: PAID, event: SHIP, to: SHIPPED, emits: [order.shipped], guard: before_deadline}
  - {from: PAID, event: AUTO_REFUND, to: REFUNDED, emits: [order.auto_refund]}
`

// TestPayByEndsWithItsState: the end of a payment window that the
// customer's intent set (pay_by) is the window of the state that takes the
// payment, not of the states after it. Paid, the order has its next
// state's deadline alone: the merchant ships in time, and that deadline
// can be moved, though the payment window closed long ago.
func TestPayByEndsWithItsState(t *testing.T) {
	f, err := flowfile.Parse("pay_then_ship.yaml", []byte(payThenShip))
	if err != nil {
		t.Fatal(err)
	}
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e, err := engine.New(open(), []*lapse.Flow{f}, engine.Config{Clock: clk,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &fakeProvider{}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		for _, no := range []string{"PS-1", "PS-2"} {
			o := create(t, e, &lapse.OrderCreate{OrderNo: no, Flow: "pay_then_ship", UserID: "u", Amount: 1000, Currency: "CNY"})
			if _, err := e.StartPayment(ctx, no, "sandbox", app); err != nil {
				t.Fatal(err)
			}
			if p, err := e.ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil || p.Status != lapse.PaymentApplied {
				t.Fatalf("payment of %s = %+v, %v", no, p, err)
			}
		}
		clk.Advance(time.Hour) // the payment window (15m + 2m) is long closed; PAID's 48h are not
		if o, _, err := e.SetDeadline(ctx, "PS-1", engine.DeadlineChange{ExtendBy: time.Hour, Reason: "courier late", By: app}); err != nil ||
			!o.DeadlineAt.Equal(t0.Add(49*time.Hour)) {
			t.Errorf("extending PAID's deadline = %v, %v; want %s", o, err, t0.Add(49*time.Hour))
		}
		if o, err := e.Fire(ctx, "PS-2", engine.Fire{Event: "SHIP", External: true, By: app}); err != nil || o.State != "SHIPPED" {
			t.Errorf("SHIP within PAID's 48 hours = %v, %v; want SHIPPED", o, err)
		} else if !strings.HasPrefix(o.ClosedDeadlineAt.String(), t0.Add(48*time.Hour).String()) {
			t.Errorf("SHIPPED ended with deadline %v; want PAID's, %s", o.ClosedDeadlineAt, t0.Add(48*time.Hour))
		}
	})
}

// TestPayableStateNotReentered: a flow that takes an order back into a
// state that takes payments and has a deadline, or into another such
// state, is refused: the order keeps the PayBy of its first window, which
// would close the next one early.
func TestPayableStateNotReentered(t *testing.T) {
	const reenter = `
name: reenter
initial: UNPAID
pays: PAY
states:
  - {name: UNPAID, deadline: {after: 15m, event: TIMEOUT}}
  - {name: ON_HOLD}
  - {name: PAID, terminal: true}
  - {name: CLOSED, terminal: true}
events:
  - {name: PAY, internal: true}
  - {name: TIMEOUT, internal: true}
  - {name: HOLD}
  - {name: RESUME}
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid], guard: before_deadline}
  - {from: UNPAID, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
  - {from: UNPAID, event: HOLD, to: ON_HOLD, emits: [order.held]}
  - {from: ON_HOLD, event: RESUME, to: UNPAID, emits: [order.resumed]}
`
	_, err := flowfile.Parse("reenter.yaml", []byte(reenter))
	if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(lapse.ErrorMessage(err), "ON_HOLD --RESUME--> UNPAID enters UNPAID") {
		t.Errorf("a flow that enters its payable state again = %v; want refused, naming the transition", err)
	}
}

// TestPayableStateAfterAnother: a deposit's window followed by the
// balance's, both taking payments, is refused as a window entered again.
func TestPayableStateAfterAnother(t *testing.T) {
	const twice = `
name: deposit
initial: DEPOSIT
pays: PAY
states:
  - {name: DEPOSIT, deadline: {after: 15m, event: TIMEOUT}}
  - {name: BALANCE, deadline: {after: 7d, event: TIMEOUT}}
  - {name: PAID, terminal: true}
  - {name: CLOSED, terminal: true}
events:
  - {name: PAY, internal: true}
  - {name: TIMEOUT, internal: true}
  - {name: NEXT}
transitions:
  - {from: DEPOSIT, event: NEXT, to: BALANCE, emits: [order.deposit]}
  - {from: DEPOSIT, event: PAY, to: PAID, emits: [order.paid]}
  - {from: DEPOSIT, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
  - {from: BALANCE, event: PAY, to: PAID, emits: [order.paid]}
  - {from: BALANCE, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
`
	_, err := flowfile.Parse("deposit.yaml", []byte(twice))
	if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(lapse.ErrorMessage(err), "DEPOSIT --NEXT--> BALANCE enters BALANCE") {
		t.Errorf("a flow with a payment window after another = %v; want refused, naming the transition", err)
	}
}
