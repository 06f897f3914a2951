package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// TestDeadlineChangesRacePayments (S2): deadline changes, cancels, payment
// intents and payments timed around each order's deadline, with the claimer
// and the deliverer running on the real clock. Then every order's history
// is checked against the rule: a deadline (or a PayBy) that has passed was
// never moved, and no order was PAID by a payment whose provider time is
// past the deadline in force at that time.
//
// Orders come in four kinds: plain with an extension around the deadline;
// started paying, with an extension around PayBy; plain, shortened just
// before the deadline; and started paying with a provider that cannot close
// the payment, so that the order stays UNPAID past PayBy (the closer asks
// again later), extended after PayBy, and paid by a callback dated after
// PayBy that arrives after the extension: the hostile tester's case.
func TestDeadlineChangesRacePayments(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		const n, grace, ttl = 200, 100 * time.Millisecond, 2 * time.Second
		prov := &fakeProvider{closeErr: errors.New("gateway down")}
		checkout := flows.Checkout()
		checkout.Grace = grace
		e, err := engine.New(open(), []*lapse.Flow{checkout}, engine.Config{Logger: slog.New(slog.DiscardHandler),
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}}})
		if err != nil {
			t.Fatal(err)
		}
		c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: 20 * time.Millisecond, SweepInterval: 50 * time.Millisecond, SweepGrace: time.Millisecond})
		c.Start(context.Background())
		defer c.Stop()
		d := engine.NewDeliverer(e, engine.DelivererConfig{Poll: 20 * time.Millisecond})
		d.Start(context.Background())
		defer d.Stop()

		ms := func(k int) time.Duration { return time.Duration(k) * time.Millisecond }
		var mu sync.Mutex
		refusedLate := 0          // changes refused because the deadline had passed
		started := map[int]bool{} // orders that were created (and started paying) in time
		var wg sync.WaitGroup
		for i := range n {
			time.Sleep(5 * time.Millisecond)
			wg.Go(func() {
				ctx := ctxT(t)
				no := orderNo("S2", i)
				kind := i % 4
				o, _, err := e.CreateOrder(ctx, &lapse.OrderCreate{OrderNo: no, Flow: "checkout", UserID: "u", Amount: 1000,
					Currency: "CNY", TTL: ttl}, app)
				if err == nil && (kind == 1 || kind == 3) {
					o, err = e.StartPayment(ctx, no, "sandbox", app)
					if lapse.ErrorCode(err) == lapse.ECONFLICT {
						return // on a loaded machine the order closed before its customer started paying
					}
				}
				if err != nil {
					t.Errorf("%s: %v", no, err)
					return
				}
				mu.Lock()
				started[i] = true
				mu.Unlock()
				cutoff := *o.DeadlineAt // PayBy, with an intent
				var change func() error
				changeAt := cutoff.Add(ms(2 - 12*(i%5))) // +2, -10, … -46 ms
				switch kind {
				case 0, 1:
					change = func() error {
						_, _, err := e.SetDeadline(ctx, no, engine.DeadlineChange{ExtendBy: 300 * time.Millisecond, By: app})
						return err
					}
				case 2:
					changeAt = cutoff.Add(-ms(100))
					cutoff = cutoff.Add(-ms(50))
					at := cutoff
					change = func() error {
						_, _, err := e.SetDeadline(ctx, no, engine.DeadlineChange{At: &at, By: app})
						return err
					}
				case 3:
					changeAt = cutoff.Add(ms(20))
					change = func() error {
						_, _, err := e.SetDeadline(ctx, no, engine.DeadlineChange{ExtendBy: time.Minute, By: app})
						return err
					}
				}
				paidAt := cutoff.Add(ms(i%7 - 2)) // -2 … +4 ms
				sendAt := paidAt
				if i%2 == 0 || kind == 3 {
					sendAt = changeAt.Add(ms(10)) // the callback comes after the change
				}
				if kind == 3 {
					paidAt = cutoff.Add(ms(10))
				}
				var pw sync.WaitGroup
				pw.Go(func() {
					time.Sleep(time.Until(changeAt))
					err := change()
					switch {
					case err == nil:
					case lapse.ErrorCode(err) == lapse.ECONFLICT:
						mu.Lock()
						refusedLate++
						mu.Unlock()
					case kind == 2 && lapse.ErrorCode(err) == lapse.EINVALID:
						// It reached the order after the shorter deadline it
						// asked for: not in the future any more, refused.
					default:
						t.Errorf("%s: change: %v", no, err)
					}
				})
				if i%10 == 7 {
					pw.Go(func() {
						time.Sleep(time.Until(cutoff.Add(-ms(1))))
						_, _ = e.Fire(ctx, no, engine.Fire{Event: flows.Cancel, By: app})
					})
				}
				pw.Go(func() {
					time.Sleep(time.Until(sendAt))
					n := &lapse.PaymentNotice{Provider: "sandbox", Kind: lapse.NoticePaid, TxnID: "txn-" + no, OrderNo: no,
						Amount: 1000, Currency: "CNY", PaidAt: paidAt, Raw: []byte(`{}`)}
					if _, err := e.ApplyPayment(ctx, n); err != nil {
						t.Errorf("%s: payment: %v", no, err)
					}
				})
				pw.Wait()
			})
		}
		wg.Wait()
		// Late payments are refunded by the deliverer.
		for stop := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			late, err := e.Store().PaymentList(ctxT(t), &lapse.PaymentListParams{Status: lapse.PaymentLate, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(late) == 0 {
				break
			}
			if time.Now().After(stop) {
				t.Fatalf("payment of %s still late, not refunded", late[0].OrderNo)
			}
		}

		applied, late := 0, 0
		for i := range n {
			if !started[i] {
				continue
			}
			no := orderNo("S2", i)
			into, _, _ := history(t, e, no)
			if into[flows.Paid] > 0 && into[flows.Closed] > 0 {
				t.Errorf("%s was both PAID and CLOSED", no)
			}
			evs, err := e.Events(ctxT(t), no)
			if err != nil {
				t.Fatal(err)
			}
			windows := cutoffs(t, evs)
			for _, w := range windows[1:] {
				if w.byCaller && !w.at.Before(w.previous) {
					t.Errorf("%s: a deadline was moved at %v, after the one in force (%v) had passed", no, w.at.Format(time.RFC3339Nano), w.previous.Format(time.RFC3339Nano))
				}
			}
			pays, err := e.Payments(ctxT(t), no)
			if err != nil || len(pays) != 1 {
				t.Fatalf("%s: payments %v, %v", no, pays, err)
			}
			p := pays[0]
			switch p.Status {
			case lapse.PaymentApplied:
				applied++
				if in := inForce(windows, p.PaidAt); !p.PaidAt.Before(in) {
					t.Errorf("%s PAID by a payment at %v, after the deadline then in force (%v)", no, p.PaidAt.Format(time.RFC3339Nano), in.Format(time.RFC3339Nano))
				}
			case lapse.PaymentRefunded:
				late++
			default:
				t.Errorf("%s: payment %s (%s)", no, p.Status, p.Reason)
			}
		}
		t.Logf("%d orders (%d created in time): %d paid, %d payments refunded as late; %d deadline changes refused because the deadline had passed", n, len(started), applied, late, refusedLate)
		if refusedLate < n/4 {
			t.Errorf("only %d changes were refused as too late; every order of the last kind should have been", refusedLate)
		}
	})
}

// window is the end of an order's payment window (its deadline, or PayBy
// once its customer started paying) from at on.
type window struct {
	at       time.Time
	cutoff   time.Time
	previous time.Time // the cutoff before this change
	byCaller bool      // the change was asked for by a caller, not made by Lapse's closer
}

// cutoffs reads an order's windows from its events: the one it was created
// with, then each deadline change.
func cutoffs(t *testing.T, evs []*lapse.OutboxEvent) []window {
	t.Helper()
	var out []window
	for _, ev := range evs {
		if ev.Type != lapse.EventOrderCreated && ev.Type != lapse.EventOrderDeadlineChanged {
			continue
		}
		o, err := lapse.EventOrder(ev)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Deadline *lapse.DeadlineMove }
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if o.DeadlineAt == nil {
			continue
		}
		// The closer's own moves (asking the provider again) leave PayBy as
		// it is; every other move is a caller's: a change or an intent, which
		// must come before the window in force has closed.
		w := window{at: ev.CreatedAt, cutoff: *o.DeadlineAt, byCaller: p.Deadline != nil && p.Deadline.FiredBy != lapse.FiredByPayment}
		if o.PayBy != nil {
			w.cutoff = *o.PayBy
		}
		if len(out) > 0 {
			w.previous = out[len(out)-1].cutoff
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		t.Fatal("no order.created event")
	}
	return out
}

// inForce returns the window end in force at time at.
func inForce(ws []window, at time.Time) time.Time {
	i := slices.IndexFunc(ws, func(w window) bool { return w.at.After(at) })
	if i < 0 {
		i = len(ws)
	}
	return ws[max(i-1, 0)].cutoff
}
