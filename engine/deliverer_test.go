package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// recorder is a fake subscriber: it records the events it is given and fails
// as told.
type recorder struct {
	mu       sync.Mutex
	got      []string // event ids, in delivery order
	fail     int      // fail this many calls, then succeed
	err      error    // the error to fail with
	applied  map[string]bool
	queries  int
	queryErr error
}

func (r *recorder) Deliver(ctx context.Context, d *lapse.Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		if errors.Is(r.err, lapse.ErrUnknownOutcome) {
			r.apply(d) // it arrived; the answer did not
		}
		return r.err
	}
	r.apply(d)
	return nil
}

func (r *recorder) apply(d *lapse.Delivery) {
	if r.applied == nil {
		r.applied = map[string]bool{}
	}
	r.got = append(r.got, d.EventID)
	r.applied[d.EventID] = true
}

func (r *recorder) Query(ctx context.Context, d *lapse.Delivery) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries++
	if r.queryErr != nil {
		return false, r.queryErr
	}
	return r.applied[d.EventID], nil
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// plainRecorder hides Query: a subscriber that cannot be asked.
type plainRecorder struct{ *recorder }

func (p plainRecorder) Deliver(ctx context.Context, d *lapse.Delivery) error {
	return p.recorder.Deliver(ctx, d)
}

func ledgerEngine(t *testing.T, s lapse.Store, clk lapse.Clock, subs ...engine.Subscription) *engine.Engine {
	t.Helper()
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, StockLedger: true, CouponLedger: true, Subscriptions: subs})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// subsEngine is an engine with subscriptions and no ledgers.
func subsEngine(t *testing.T, s lapse.Store, clk lapse.Clock, subs ...engine.Subscription) *engine.Engine {
	t.Helper()
	e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, Subscriptions: subs})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLedgersHoldAndGiveBack(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := ledgerEngine(t, open(), clk)
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		for sku, n := range map[string]int64{"tea": 10, "cup": 2} {
			if _, err := e.SetStock(ctx, sku, n); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []string{"SAVE1", "SAVE2"} {
			if _, err := e.CreateCoupon(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		req := func(no, coupon string, items ...lapse.Item) *lapse.OrderCreate {
			r := checkout(no, time.Minute)
			r.Items, r.Coupon = items, coupon
			return r
		}
		// Lines of one SKU are summed: 2 + 1 tea.
		create(t, e, req("H-1", "SAVE1", lapse.Item{SKU: "tea", Qty: 2}, lapse.Item{SKU: "cup", Qty: 1}, lapse.Item{SKU: "tea", Qty: 1}))
		stock := func(sku string) *lapse.Stock {
			st, err := e.Stock(ctx, sku)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		if tea, cup := stock("tea"), stock("cup"); tea.Reserved != 3 || cup.Reserved != 1 {
			t.Fatalf("after H-1: tea %+v, cup %+v", tea, cup)
		}

		// Refusals are 409s that name what is short, and write nothing.
		refusals := []struct {
			req   *lapse.OrderCreate
			field string
			text  string
		}{
			{req("H-2", "", lapse.Item{SKU: "cup", Qty: 2}), "", "cup"},
			{req("H-3", "", lapse.Item{SKU: "nope", Qty: 1}), "items", "nope"},
			{req("H-4", "SAVE1", lapse.Item{SKU: "tea", Qty: 1}), "", "SAVE1"},
			{req("H-5", "GHOST", lapse.Item{SKU: "tea", Qty: 1}), "coupon", "GHOST"},
		}
		for _, r := range refusals {
			_, _, err := e.CreateOrder(ctx, r.req, app)
			var le *lapse.Error
			if lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(lapse.ErrorMessage(err), r.text) || (r.field != "" && (!errors.As(err, &le) || le.Field != r.field)) {
				t.Errorf("%s = %v, want a conflict naming %s", r.req.OrderNo, err, r.text)
			}
			if _, err := e.Order(ctx, r.req.OrderNo); !errors.Is(err, lapse.ErrOrderNotFound) {
				t.Errorf("refused %s was written", r.req.OrderNo)
			}
		}
		if tea, cup := stock("tea"), stock("cup"); tea.Reserved != 3 || cup.Reserved != 1 {
			t.Errorf("refusals moved stock: tea %+v, cup %+v", tea, cup)
		}

		// Closing gives back, once.
		if _, err := e.Fire(ctx, "H-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if n, err := d.RunOnce(ctx); err != nil || n != 2 {
			t.Fatalf("RunOnce = %d, %v; want the stock and coupon deliveries", n, err)
		}
		if n, _ := d.RunOnce(ctx); n != 0 {
			t.Errorf("second RunOnce attempted %d", n)
		}
		if tea, cup := stock("tea"), stock("cup"); tea.Reserved != 0 || tea.OnHand != 10 || cup.Reserved != 0 {
			t.Errorf("after closing: tea %+v, cup %+v", tea, cup)
		}
		c, moves, _ := e.Coupon(ctx, "SAVE1")
		if c.Status != lapse.CouponAvailable || len(moves) != 2 || moves[1].Kind != lapse.CouponUnlock {
			t.Errorf("SAVE1 after closing: %+v %d moves", c, len(moves))
		}

		// Paying uses up.
		create(t, e, req("H-6", "SAVE2", lapse.Item{SKU: "tea", Qty: 4}))
		if _, err := e.Fire(ctx, "H-6", engine.Fire{Event: flows.Pay, By: app}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if tea := stock("tea"); tea.OnHand != 6 || tea.Reserved != 0 {
			t.Errorf("after paying: tea %+v", tea)
		}
		if c, _, _ := e.Coupon(ctx, "SAVE2"); c.Status != lapse.CouponUsed || c.OrderNo != "H-6" {
			t.Errorf("SAVE2 after paying: %+v", c)
		}
		hs, err := e.Deliveries(ctx, "H-6")
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Status != lapse.DeliveryDone || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeOK {
				t.Errorf("delivery %s of %s: %+v", h.Subscriber, h.EventType, h.Delivery)
			}
		}
	})
}

func TestDeliveryScheduleAndDeath(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sink := &recorder{fail: 3, err: errors.New("HTTP 503")}
		notify := &recorder{}
		e := subsEngine(t, open(), clk,
			engine.Subscription{Name: "sink", Events: []string{"order.closed"}, Handler: plainRecorder{sink},
				Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute, 5 * time.Minute}}},
			engine.Subscription{Name: "notify", Events: []string{"delivery.dead"}, Handler: notify})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		create(t, e, checkout("S-1", time.Hour))
		if _, err := e.Fire(ctx, "S-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		step := func(at time.Duration, want int) {
			t.Helper()
			clk.Set(t0.Add(at))
			if n, err := d.RunOnce(ctx); n != want || err != nil {
				t.Fatalf("RunOnce at +%v = %d, %v; want %d", at, n, err, want)
			}
		}
		step(0, 1)                         // attempt 1 fails: next at +1m
		step(time.Minute-time.Second, 0)   // not yet
		step(time.Minute, 1)               // attempt 2 fails: next at +6m
		step(6*time.Minute-time.Second, 0) // not yet
		step(6*time.Minute, 2)             // attempt 3 fails: dead; notify gets delivery.dead
		hs, _ := e.Deliveries(ctx, "S-1")
		var dead *engine.DeliveryHistory
		for i := range hs {
			if hs[i].Subscriber == "sink" {
				dead = &hs[i]
			}
		}
		if dead == nil || dead.Status != lapse.DeliveryDead || dead.Delivery.Attempts != 3 || len(dead.LastError) == 0 || len(dead.History) != 3 {
			t.Fatalf("sink delivery: %+v", dead)
		}
		for i, a := range dead.History {
			if a.Outcome != lapse.OutcomeError || a.Error != "HTTP 503" || a.Attempt != i+1 {
				t.Errorf("attempt %d: %+v", i, a)
			}
		}
		reviews, _ := e.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 10})
		if len(reviews) != 1 || reviews[0].OrderNo != "S-1" || !strings.Contains(reviews[0].Reason, " to sink ran out of retries after 3 attempts: HTTP 503") {
			t.Errorf("reviews: %+v", reviews)
		}
		if got := notify.calls(); len(got) != 1 {
			t.Errorf("notify got %d delivery.dead events, want 1", len(got))
		}
		for _, h := range hs {
			if h.EventType == lapse.EventDeliveryDead && h.Subscriber == "sink" {
				t.Error("the dead subscriber was sent news of its own death")
			}
		}

		// An operator retries: a fresh schedule, and now it works.
		if _, err := e.RetryDelivery(ctx, dead.ID, operator); err != nil {
			t.Fatal(err)
		}
		if _, err := e.RetryDelivery(ctx, dead.ID, operator); lapse.ErrorCode(err) != lapse.ECONFLICT {
			t.Errorf("retrying a pending delivery = %v, want conflict", err)
		}
		step(6*time.Minute, 1)
		if got := sink.calls(); len(got) != 1 {
			t.Errorf("sink received %d events, want 1", len(got))
		}
		hs, _ = e.Deliveries(ctx, "S-1")
		for _, h := range hs {
			if h.Subscriber == "sink" && (h.Status != lapse.DeliveryDone || len(h.History) != 4) {
				t.Errorf("after the retry: %+v with %d attempts", h.Delivery, len(h.History))
			}
		}
	})
}

func TestDeliveryUnknownOutcome(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		port := &recorder{fail: 1, err: lapse.ErrUnknownOutcome} // applies, then the answer is lost
		e := subsEngine(t, open(), clk, engine.Subscription{Name: "port", Events: []string{"order.created"}, Handler: port,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Second, time.Second}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		create(t, e, checkout("U-1", time.Hour))
		if n, _ := d.RunOnce(ctx); n != 1 {
			t.Fatal("no attempt")
		}
		hs, _ := e.Deliveries(ctx, "U-1")
		if h := hs[0]; h.Status != lapse.DeliveryPending || !h.Unknown || h.History[0].Outcome != lapse.OutcomeUnknown {
			t.Fatalf("after a lost answer: %+v", h.Delivery)
		}
		clk.Advance(time.Second)
		if n, _ := d.RunOnce(ctx); n != 1 {
			t.Fatal("no second attempt")
		}
		hs, _ = e.Deliveries(ctx, "U-1")
		if h := hs[0]; h.Status != lapse.DeliveryDone || h.History[1].Outcome != lapse.OutcomeApplied {
			t.Errorf("after the query-back: %+v %+v", h.Delivery, h.History)
		}
		if got := port.calls(); len(got) != 1 || port.queries != 1 {
			t.Errorf("applied %d times with %d queries; want once, after one query", len(got), port.queries)
		}

		// A query that fails keeps the outcome unknown and sends nothing.
		port2 := &recorder{fail: 1, err: lapse.ErrUnknownOutcome, queryErr: errors.New("query timed out")}
		e2 := subsEngine(t, open(), clk, engine.Subscription{Name: "port2", Events: []string{"order.created"}, Handler: port2,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Second}}})
		d2 := engine.NewDeliverer(e2, engine.DelivererConfig{})
		create(t, e2, checkout("U-2", time.Hour))
		d2.RunOnce(ctx)
		clk.Advance(time.Second)
		d2.RunOnce(ctx)
		hs, _ = e2.Deliveries(ctx, "U-2")
		var h engine.DeliveryHistory
		for _, x := range hs {
			if x.Subscriber == "port2" {
				h = x
			}
		}
		if h.Status != lapse.DeliveryDead || !h.Unknown || len(port2.calls()) != 1 {
			t.Errorf("unanswerable query: %+v, applied %d times", h.Delivery, len(port2.calls()))
		}
		reviews, _ := e2.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 10})
		if len(reviews) != 1 || !strings.Contains(reviews[0].Reason, "unknown") {
			t.Errorf("reviews: %+v", reviews)
		}
	})
}

func TestDeliveryLeaseTakeover(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sink := &recorder{}
		s := open()
		e := subsEngine(t, s, clk, engine.Subscription{Name: "sink", Handler: plainRecorder{sink}, Timeout: time.Second})
		ctx := ctxT(t)
		create(t, e, checkout("LT-1", time.Hour))
		// A worker claims the delivery and dies without finishing.
		ds, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: clk.Now(), Owner: "dead-worker", LeaseUntil: clk.Now().Add(time.Minute), Subscribers: []string{"sink"}, Limit: 10})
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim = %d, %v", len(ds), err)
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "live-worker", Lease: time.Minute})
		if n, _ := d.RunOnce(ctx); n != 0 {
			t.Fatal("took over a live lease")
		}
		clk.Advance(time.Minute)
		if n, _ := d.RunOnce(ctx); n != 1 {
			t.Fatal("did not take over an expired lease")
		}
		hs, _ := e.Deliveries(ctx, "LT-1")
		if h := hs[0]; h.Status != lapse.DeliveryDone || h.Delivery.Attempts != 2 || len(h.History) != 1 || h.History[0].Worker != "live-worker" || h.History[0].Attempt != 2 {
			t.Errorf("after takeover: %+v %+v", h.Delivery, h.History)
		}
		if _, err := s.DeliveryFinish(ctx, &lapse.DeliveryFinishParams{ID: ds[0].ID, Owner: "dead-worker", Attempt: 1, Status: lapse.DeliveryDone, At: clk.Now()}); !errors.Is(err, lapse.ErrLeaseLost) {
			t.Errorf("the dead worker's late finish = %v, want ErrLeaseLost", err)
		}
	})
}
