package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// twoEngines returns two engines on one database, as two `lapse serve`
// nodes are, each with its own store (its own pool) and the same clock.
func twoEngines(t *testing.T, open func() lapse.Store, clk lapse.Clock, prov lapse.PaymentProvider) [2]*engine.Engine {
	t.Helper()
	var es [2]*engine.Engine
	for i := range es {
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk, Node: fmt.Sprintf("node-%d", i),
			Logger: slog.New(slog.DiscardHandler), StockLedger: true, CouponLedger: true,
			Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": prov}, Merchants: map[string]string{"sandbox": "m-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		es[i] = e
	}
	if _, err := es[0].SetStock(ctxT(t), "tea", 1_000_000); err != nil {
		t.Fatal(err)
	}
	return es
}

// TestRefundKeyRace sends one refund key with different bodies at once to
// two nodes: every request is answered as it would be alone, one after the
// other: the refund made, to the request that made it and to those that
// asked for the same; a conflict to those that asked for another (amount
// or reason).
func TestRefundKeyRace(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		es := twoEngines(t, open, clk, &fakeProvider{})
		ctx := ctxT(t)
		for round := range 6 {
			no := orderNo("RK", round)
			o := create(t, es[0], checkout(no, time.Minute))
			if _, err := es[0].ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
				t.Fatal(err)
			}
			bodies := []engine.RefundRequest{{Amount: 300, Reason: "damaged"}, {Amount: 300, Reason: "late delivery"}, {Amount: 400, Reason: "damaged"}}
			const n = 12
			type answer struct {
				req engine.RefundRequest
				ref *lapse.OrderRefund
				err error
			}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					req := bodies[i%len(bodies)]
					req.Key, req.By = "key-"+no, app
					ref, _, err := es[i%2].RefundOrder(ctx, no, req)
					answers[i] = answer{req, ref, err}
				})
			}
			wg.Wait()
			rs, err := es[0].OrderRefunds(ctx, no)
			if err != nil || len(rs) != 1 {
				t.Fatalf("%s: refunds %+v, %v; want one", no, rs, err)
			}
			made := rs[0]
			for _, a := range answers {
				same := a.req.Amount == made.Amount && a.req.Reason == made.Reason
				switch {
				case same && (a.err != nil || a.ref.ID != made.ID):
					t.Errorf("%s: %+v asked for the refund made, and was answered %+v, %v", no, a.req, a.ref, a.err)
				case !same && lapse.ErrorCode(a.err) != lapse.ECONFLICT:
					t.Errorf("%s: %+v asked for another refund than the %d %q made under its key, and was answered %+v, %v",
						no, a.req, made.Amount, made.Reason, a.ref, a.err)
				}
			}
		}
	})
}

// TestRefundsRaceCaptured sends refunds under different keys at once to two
// nodes, while deliverers on both settle them: what is refunded never
// exceeds what was captured.
func TestRefundsRaceCaptured(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		es := twoEngines(t, open, clk, prov)
		ctx := ctxT(t)
		no := "RC-1"
		o := create(t, es[0], checkout(no, time.Minute))
		if _, err := es[0].ApplyPayment(ctx, paid(o, "txn-"+no, clk.Now())); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for _, e := range es {
			d := engine.NewDeliverer(e, engine.DelivererConfig{})
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := d.RunOnce(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		var rw sync.WaitGroup
		for i := range 40 {
			rw.Go(func() {
				for range 20 {
					_, _, err := es[i%2].RefundOrder(ctx, no, engine.RefundRequest{Amount: 70, Reason: "r", Key: fmt.Sprintf("k-%d", i), By: app})
					if err == nil || lapse.ErrorCode(err) != lapse.ECONFLICT && !isStale(err) {
						if err != nil {
							t.Error(err)
						}
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		rw.Wait()
		close(stop)
		wg.Wait()
		rs, err := es[0].OrderRefunds(ctx, no)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, r := range rs {
			if r.Status != lapse.OrderRefundFailed {
				total += r.Amount
			}
		}
		if _, made := prov.refunded(); total > 1000 || made > 1000 {
			t.Errorf("refunds of %d and %d made at the provider, of 1000 captured: %+v", total, made, rs)
		}
	})
}

// TestCouponRace creates orders with one coupon at once on two nodes: one
// holds it.
func TestCouponRace(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		es := twoEngines(t, open, clk, &fakeProvider{})
		ctx := ctxT(t)
		if _, err := es[0].CreateCoupon(ctx, "ONE"); err != nil {
			t.Fatal(err)
		}
		const n = 16
		var wg sync.WaitGroup
		var mu sync.Mutex
		var made []string
		for i := range n {
			wg.Go(func() {
				req := checkout(orderNo("CR", i), time.Minute)
				req.Items, req.Coupon = nil, "ONE"
				o, created, err := es[i%2].CreateOrder(ctx, req, app)
				switch {
				case err == nil && created:
					mu.Lock()
					made = append(made, o.OrderNo)
					mu.Unlock()
				case lapse.ErrorCode(err) != lapse.ECONFLICT:
					t.Errorf("%s: %v", req.OrderNo, err)
				}
			})
		}
		wg.Wait()
		c, _, err := es[0].Coupon(ctx, "ONE")
		if err != nil || len(made) != 1 || c.OrderNo != made[0] || c.Status != lapse.CouponLocked {
			t.Fatalf("orders %v made with the coupon; it is %+v, %v", made, c, err)
		}
	})
}

func isStale(err error) bool { return errors.Is(err, lapse.ErrStale) }

// afterRefundList is a store whose OrderRefundList, read inside a
// transaction, runs hook once after the read: what another node does
// between an operator's read and commit.
type afterRefundList struct {
	lapse.Store
	inTx bool
	hook *sync.Once
	fn   func()
}

func (s *afterRefundList) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.Store.Tx(ctx, func(tx lapse.Store) error {
		return fn(&afterRefundList{Store: tx, inTx: true, hook: s.hook, fn: s.fn})
	})
}

func (s *afterRefundList) OrderRefundList(ctx context.Context, orderID int64) ([]*lapse.OrderRefund, error) {
	rs, err := s.Store.OrderRefundList(ctx, orderID)
	if s.inTx && s.fn != nil {
		s.hook.Do(s.fn)
	}
	return rs, err
}

// TestSettleReviewRacesRefundCallback: an operator settles an unasked
// refund in review on one node while the callback of the order's own
// refund completes it on another, between the operator's read of the
// refunds and its commit. Each sees the other's refund unsettled; still,
// with all the order captured refunded, the order ends REFUNDED, not
// REFUNDING for ever. (SQLite's single writer cannot interleave so; the
// callback waits for the operator's commit.)
func TestSettleReviewRacesRefundCallback(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		prov := &fakeProvider{}
		api := paymentEngine(t, open(), clk, prov)
		ctx := ctxT(t)
		o := create(t, api, checkout("SR-1", time.Hour))
		if _, err := api.ApplyPayment(ctx, paid(o, "txn-SR-1", clk.Now())); err != nil {
			t.Fatal(err)
		}
		if _, _, err := api.RefundOrder(ctx, "SR-1", engine.RefundRequest{Amount: 400, Reason: "damaged", Key: "k-SR-1", By: app}); err != nil {
			t.Fatal(err)
		}
		// 6.00 more refunded in the provider's dashboard: in review.
		if _, err := api.ApplyPayment(ctx, refundNotice(o, "txn-SR-1", "re-dash", 600, clk.Now())); err != nil {
			t.Fatal(err)
		}
		rvs := orderReviews(t, api, "SR-1")
		if len(rvs) != 1 {
			t.Fatalf("reviews %+v", rvs)
		}
		done := make(chan error, 1)
		st := &afterRefundList{Store: open(), hook: &sync.Once{}, fn: func() {
			go func() {
				_, err := api.ApplyPayment(ctx, refundNotice(o, "txn-SR-1", "k-SR-1", 400, clk.Now()))
				done <- err
			}()
			select {
			case err := <-done:
				done <- err
			case <-time.After(2 * time.Second): // it waits for the operator
			}
		}}
		op := paymentEngine(t, st, clk, prov)
		if _, err := op.SettleReview(ctx, rvs[0].ID, lapse.OrderRefundSucceeded, "the dashboard shows it", app); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		rs, _ := api.OrderRefunds(ctx, "SR-1")
		var got []string
		for _, r := range rs {
			got = append(got, fmt.Sprintf("%d %s", r.Amount, r.Status))
		}
		if cur, _ := api.Order(ctx, "SR-1"); cur.State != flows.Refunded {
			t.Errorf("SR-1 is %s with refunds %v; want REFUNDED, all it captured refunded", cur.State, got)
		}
	})
}

// TestGroupJoinRacesDeadline joins one group from two nodes while both
// nodes' claimers close it at its deadline: every member joined before
// the group closed (its join is logged before the close, at a time before
// the deadline), every join that was answered created has its member, and
// no other member exists.
func TestGroupJoinRacesDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		var es [2]*engine.Engine
		for i := range es {
			e, err := engine.New(open(), flows.Builtin(), engine.Config{Node: fmt.Sprintf("node-%d", i), Logger: slog.New(slog.DiscardHandler),
				Payments: engine.PaymentConfig{Providers: map[string]lapse.PaymentProvider{"sandbox": &fakeProvider{}}}})
			if err != nil {
				t.Fatal(err)
			}
			es[i] = e
			c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: 5 * time.Millisecond, SweepInterval: 10 * time.Millisecond, SweepGrace: time.Millisecond})
			c.Start(context.Background())
			defer c.Stop()
		}
		ctx := ctxT(t)
		const lead = 1500 * time.Millisecond
		g := create(t, es[0], groupReq("GJ-1", lead))
		deadline := *g.DeadlineAt
		var mu sync.Mutex
		joined := map[string]bool{}
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				time.Sleep(time.Until(deadline.Add(-200 * time.Millisecond)))
				for i := 0; time.Now().Before(deadline.Add(200 * time.Millisecond)); i++ {
					user := fmt.Sprintf("u%02d-%04d", w, i)
					m, created, err := es[w%2].JoinGroup(ctx, "GJ-1", engine.JoinRequest{UserID: user, Method: "tok", By: app})
					switch {
					case err == nil && created:
						mu.Lock()
						joined[user] = true
						mu.Unlock()
						if !m.JoinedAt.Before(deadline) {
							t.Errorf("%s joined at %v, the deadline is %v", user, m.JoinedAt, deadline)
						}
					case err != nil && lapse.ErrorCode(err) != lapse.ECONFLICT:
						t.Errorf("join %s: %v", user, err)
					}
				}
			})
		}
		wg.Wait()
		for stop := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if o, _ := es[0].Order(ctx, "GJ-1"); o.State != flows.GroupOpen || time.Now().After(stop) {
				break
			}
		}
		got, err := es[1].Group(ctx, "GJ-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Order.State == flows.GroupOpen {
			t.Fatalf("GJ-1 is still open")
		}
		if len(got.Members) != len(joined) {
			t.Errorf("%d members, %d joins answered created", len(got.Members), len(joined))
		}
		for _, m := range got.Members {
			if !joined[m.UserID] {
				t.Errorf("member %s was not answered created", m.UserID)
			}
		}
		_, _, trs := history(t, es[0], "GJ-1")
		closed, joins := false, 0
		for _, tr := range trs {
			switch {
			case tr.ToState != flows.GroupOpen:
				closed = true
			case tr.Event == flows.Join:
				joins++
				if closed {
					t.Errorf("a join logged after the close: %+v", tr)
				}
			}
		}
		if joins != len(got.Members) {
			t.Errorf("%d joins logged, %d members", joins, len(got.Members))
		}
		t.Logf("%d members joined before the deadline", joins)
	})
}
