package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

// batchRecorder is a fake broker that takes deliveries in batches: it
// records each call's size and the events it got, and fails the orders it
// is told to, with the error it is told.
type batchRecorder struct {
	mu      sync.Mutex
	sizes   []int             // of each DeliverMany call
	single  int               // Deliver calls
	got     []*lapse.Delivery // in the order received
	fail    map[string]error  // by order_no: fail its next delivery with this error
	during  func([]*lapse.Delivery)
	applied map[string]bool // event ids, for Query
	queries int
}

func (r *batchRecorder) Deliver(ctx context.Context, d *lapse.Delivery) error {
	r.mu.Lock()
	r.single++
	r.mu.Unlock()
	return r.DeliverMany(ctx, []*lapse.Delivery{d})[0]
}

func (r *batchRecorder) DeliverMany(ctx context.Context, ds []*lapse.Delivery) []error {
	if r.during != nil {
		r.during(ds)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes = append(r.sizes, len(ds))
	errs := make([]error, len(ds))
	for i, d := range ds {
		if err := r.fail[d.OrderNo]; err != nil {
			delete(r.fail, d.OrderNo)
			errs[i] = err
			if !errors.Is(err, lapse.ErrUnknownOutcome) {
				continue
			}
		}
		r.got = append(r.got, d)
		if r.applied == nil {
			r.applied = map[string]bool{}
		}
		r.applied[d.EventID] = true
	}
	return errs
}

func (r *batchRecorder) received() []*lapse.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// askingBatchRecorder is a batchRecorder that can be asked about an
// attempt whose outcome is unknown.
type askingBatchRecorder struct{ *batchRecorder }

func (a askingBatchRecorder) Query(ctx context.Context, d *lapse.Delivery) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queries++
	return a.applied[d.EventID], nil
}

// sinkOf returns the delivery of an order's event to subscriber sub.
func sinkOf(t *testing.T, e *engine.Engine, orderNo, sub, event string) engine.DeliveryHistory {
	t.Helper()
	hs, err := e.Deliveries(ctxT(t), orderNo)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Subscriber == sub && h.EventType == event {
			return h
		}
	}
	t.Fatalf("%s has no delivery of %s to %s", orderNo, event, sub)
	return engine.DeliveryHistory{}
}

// TestDeliverManyOutcomes checks a batch subscriber: each claim goes out in
// calls of at most Concurrency deliveries and never one by one; the
// delivered ones are done with their attempt rows, a failed one is retried
// on schedule and a refused one dies, each as a single attempt would.
func TestDeliverManyOutcomes(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sink := &batchRecorder{fail: map[string]error{"DM-03": errors.New("HTTP 503"), "DM-07": fmt.Errorf("bad subject: %w", lapse.ErrRefused)}}
		e := subsEngine(t, open(), clk, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: sink, Concurrency: 4,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		for i := range 10 {
			create(t, e, checkout(fmt.Sprintf("DM-%02d", i), time.Hour))
		}
		if n, err := d.RunOnce(ctx); n != 10 || err != nil {
			t.Fatalf("RunOnce = %d, %v; want 10", n, err)
		}
		if !slices.Equal(sink.sizes, []int{4, 4, 2}) || sink.single != 0 {
			t.Errorf("calls of %v and %d single deliveries; want batches of 4, 4, 2", sink.sizes, sink.single)
		}
		for i := range 10 {
			no := fmt.Sprintf("DM-%02d", i)
			h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated)
			switch no {
			case "DM-03":
				if h.Status != lapse.DeliveryPending || !h.NextAttemptAt.Equal(t0.Add(time.Minute)) || h.LastError != "HTTP 503" ||
					len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeError {
					t.Errorf("%s after a failure: %+v %+v", no, h.Delivery, h.History)
				}
			case "DM-07":
				if h.Status != lapse.DeliveryDead || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeRefused {
					t.Errorf("%s after a refusal: %+v %+v", no, h.Delivery, h.History)
				}
			default:
				if h.Status != lapse.DeliveryDone || h.DoneAt == nil || h.LeaseUntil != nil || len(h.History) != 1 ||
					h.History[0].Outcome != lapse.OutcomeOK || h.History[0].Attempt != 1 || h.History[0].Worker == "" {
					t.Errorf("%s delivered: %+v %+v", no, h.Delivery, h.History)
				}
			}
		}
		reviews, _ := e.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 10})
		if len(reviews) != 1 || reviews[0].OrderNo != "DM-07" {
			t.Fatalf("reviews: %+v", reviews)
		}
		if r := reviews[0].Reason; !strings.Contains(r, " to sink was refused at attempt 1: bad subject") || strings.Contains(r, "retries") {
			t.Errorf("the refused delivery's review says %q; want it refused at its first attempt, not out of retries", r)
		}

		clk.Advance(time.Minute)
		if n, err := d.RunOnce(ctx); n != 1 || err != nil {
			t.Fatalf("the retry: RunOnce = %d, %v", n, err)
		}
		if h := sinkOf(t, e, "DM-03", "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone || len(h.History) != 2 {
			t.Errorf("DM-03 after its retry: %+v %+v", h.Delivery, h.History)
		}
		if got := sink.received(); len(got) != 9 {
			t.Errorf("the sink got %d events, want 9 (all but the refused one)", len(got))
		}
	})
}

// TestDeliverManyUnknownOutcome checks that a batch subscriber that can be
// asked is asked, one by one, about an attempt whose outcome was unknown,
// and that the event is not sent again when it had arrived.
func TestDeliverManyUnknownOutcome(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		rec := &batchRecorder{fail: map[string]error{"DU-1": lapse.ErrUnknownOutcome}}
		e := subsEngine(t, open(), clk, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: askingBatchRecorder{rec},
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Second}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		ctx := ctxT(t)
		create(t, e, checkout("DU-1", time.Hour))
		create(t, e, checkout("DU-2", time.Hour))
		if n, _ := d.RunOnce(ctx); n != 2 {
			t.Fatalf("RunOnce attempted %d, want 2", n)
		}
		if h := sinkOf(t, e, "DU-1", "sink", lapse.EventOrderCreated); !h.Unknown || h.History[0].Outcome != lapse.OutcomeUnknown {
			t.Fatalf("after a lost answer: %+v %+v", h.Delivery, h.History)
		}
		clk.Advance(time.Second)
		if n, _ := d.RunOnce(ctx); n != 1 {
			t.Fatal("no second attempt")
		}
		if h := sinkOf(t, e, "DU-1", "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone || h.History[1].Outcome != lapse.OutcomeApplied {
			t.Errorf("after the query-back: %+v %+v", h.Delivery, h.History)
		}
		if got := rec.received(); len(got) != 2 || rec.queries != 1 {
			t.Errorf("received %d events with %d queries; want 2 after one query", len(got), rec.queries)
		}
	})
}

// TestDeliverManyLeaseLost checks that a batch whose leases ran out while
// it was out finishes only the deliveries no other worker took over.
func TestDeliverManyLeaseLost(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		rec := &batchRecorder{}
		e := subsEngine(t, s, clk, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: rec, Timeout: time.Hour})
		ctx := ctxT(t)
		for i := range 3 {
			create(t, e, checkout(fmt.Sprintf("DL-%d", i), time.Hour))
		}
		// While the batch is out, its leases run out and another worker
		// takes one delivery over.
		var taken *lapse.Delivery
		rec.during = func(ds []*lapse.Delivery) {
			clk.Advance(2 * time.Minute)
			got, err := s.DeliveryClaim(ctx, &lapse.DeliveryClaimParams{Now: clk.Now(), Owner: "other", LeaseUntil: clk.Now().Add(time.Minute),
				Subscribers: []string{"sink"}, Limit: 1})
			if err != nil || len(got) != 1 {
				t.Errorf("the other worker's claim = %d, %v", len(got), err)
				return
			}
			taken = got[0]
		}
		d := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "me", Lease: time.Minute})
		if n, err := d.RunOnce(ctx); n != 3 || err != nil {
			t.Fatalf("RunOnce = %d, %v", n, err)
		}
		if taken == nil {
			t.FailNow()
		}
		for i := range 3 {
			h := sinkOf(t, e, fmt.Sprintf("DL-%d", i), "sink", lapse.EventOrderCreated)
			if h.ID == taken.ID {
				if h.Status != lapse.DeliveryPending || h.LeaseOwner != "other" || h.Delivery.Attempts != 2 || len(h.History) != 0 {
					t.Errorf("the delivery taken over: %+v %+v", h.Delivery, h.History)
				}
			} else if h.Status != lapse.DeliveryDone || len(h.History) != 1 || h.History[0].Worker != "me" {
				t.Errorf("a delivery still ours: %+v %+v", h.Delivery, h.History)
			}
		}
	})
}

// doneManyFails is a work store whose DeliveryDoneMany fails.
type doneManyFails struct{ lapse.Store }

func (doneManyFails) DeliveryDoneMany(context.Context, *lapse.DeliveryDoneManyParams) ([]int64, error) {
	return nil, errors.New("statement too large")
}

// TestDeliverManyFinishFallsBack checks that when the store cannot record
// a batch's deliveries together, each is recorded on its own.
func TestDeliverManyFinishFallsBack(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		rec := &batchRecorder{}
		e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, WorkStore: doneManyFails{s},
			Subscriptions: []engine.Subscription{{Name: "sink", Events: []string{"order.created"}, Handler: rec}}})
		if err != nil {
			t.Fatal(err)
		}
		create(t, e, checkout("DF-1", time.Hour))
		create(t, e, checkout("DF-2", time.Hour))
		if n, err := engine.NewDeliverer(e, engine.DelivererConfig{}).RunOnce(ctxT(t)); n != 2 || err != nil {
			t.Fatalf("RunOnce = %d, %v", n, err)
		}
		for _, no := range []string{"DF-1", "DF-2"} {
			if h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone || len(h.History) != 1 {
				t.Errorf("%s: %+v %+v", no, h.Delivery, h.History)
			}
		}
	})
}

// doneManyBusy is a work store whose DeliveryDoneMany the database gives
// up on, as a deadlock's victim or past its lock timeout.
type doneManyBusy struct {
	lapse.Store
	calls *atomic.Int32
}

func (b doneManyBusy) DeliveryDoneMany(context.Context, *lapse.DeliveryDoneManyParams) ([]int64, error) {
	b.calls.Add(1)
	return nil, fmt.Errorf("mysql: finish deliveries: %w: %w", lapse.ErrStoreBusy, errors.New("Error 1213: Deadlock found"))
}

// TestDeliverManyFinishBusy checks that a batch whose record the database
// gave up on (lapse.ErrStoreBusy, which is lapse.ErrStoreUnavailable) is
// tried once more and then recorded delivery by delivery, as any other
// failure of the batch's record is, rather than left to its leases as
// when the database is out of reach.
func TestDeliverManyFinishBusy(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		rec := &batchRecorder{}
		var calls atomic.Int32
		e, err := engine.New(s, flows.Builtin(), engine.Config{Clock: clk, WorkStore: doneManyBusy{s, &calls},
			Subscriptions: []engine.Subscription{{Name: "sink", Events: []string{"order.created"}, Handler: rec}}})
		if err != nil {
			t.Fatal(err)
		}
		create(t, e, checkout("DB-1", time.Hour))
		create(t, e, checkout("DB-2", time.Hour))
		if n, err := engine.NewDeliverer(e, engine.DelivererConfig{}).RunOnce(ctxT(t)); n != 2 || err != nil {
			t.Fatalf("RunOnce = %d, %v", n, err)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("DeliveryDoneMany called %d times, want 2 (once more after the database gave up)", n)
		}
		for _, no := range []string{"DB-1", "DB-2"} {
			if h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone || len(h.History) != 1 {
				t.Errorf("%s: %+v %+v", no, h.Delivery, h.History)
			}
		}
	})
}

// TestDeliverManyRunning checks the running loop with a batch subscriber:
// every event reaches it once, in batches, and each order's events in the
// order they were written.
func TestDeliverManyRunning(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		rec := &batchRecorder{}
		e := subsEngine(t, open(), lapse.SystemClock{}, engine.Subscription{Name: "sink", Events: []string{"order.*"}, Handler: rec, Concurrency: 16})
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{Poll: 50 * time.Millisecond})
		d.Start(ctx)
		defer d.Stop()
		const orders = 40
		for i := range orders {
			no := fmt.Sprintf("DR-%02d", i)
			create(t, e, checkout(no, time.Hour))
			if i%2 == 0 {
				if _, err := e.Fire(ctx, no, engine.Fire{Event: flows.Cancel, By: app}); err != nil {
					t.Fatal(err)
				}
			}
		}
		want := orders + orders/2
		deadline := time.Now().Add(time.Minute)
		for len(rec.received()) < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		d.Stop()
		got := rec.received()
		if len(got) != want {
			t.Fatalf("received %d events, want %d", len(got), want)
		}
		seen := map[string]bool{}
		byOrder := map[string][]string{}
		for _, dl := range got {
			if seen[dl.EventID] {
				t.Errorf("event %s of %s received twice", dl.EventType, dl.OrderNo)
			}
			seen[dl.EventID] = true
			byOrder[dl.OrderNo] = append(byOrder[dl.OrderNo], dl.EventType)
		}
		for no, evs := range byOrder {
			if evs[0] != lapse.EventOrderCreated || (len(evs) == 2 && evs[1] != flows.EventOrderClosed) {
				t.Errorf("%s received %s", no, strings.Join(evs, ", "))
			}
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.single != 0 || slices.Max(rec.sizes) > 16 {
			t.Errorf("calls of %v and %d single deliveries; want batches of at most 16", rec.sizes, rec.single)
		}
	})
}

// doneManyGate is a work store whose DeliveryDoneMany waits for open to
// close, counting the calls that entered.
type doneManyGate struct {
	lapse.Store
	open    chan struct{}
	entered chan struct{}
}

func (g doneManyGate) DeliveryDoneMany(ctx context.Context, p *lapse.DeliveryDoneManyParams) ([]int64, error) {
	g.entered <- struct{}{}
	<-g.open
	return g.Store.DeliveryDoneMany(ctx, p)
}

// TestDeliverManyFinishOverlaps checks that the running loop frees a
// batch's slots once its handler has answered: the next batches are
// claimed and handed over while the finishes before them still run, two
// finishes at most, and the batch behind those keeps its slots until one
// ends. Every delivery is recorded done once the finishes go through.
func TestDeliverManyFinishOverlaps(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		s := open()
		var calls atomic.Int32
		rec := &batchRecorder{during: func([]*lapse.Delivery) { calls.Add(1) }}
		gate := doneManyGate{Store: s, open: make(chan struct{}), entered: make(chan struct{}, 100)}
		e, err := engine.New(s, flows.Builtin(), engine.Config{WorkStore: gate,
			Subscriptions: []engine.Subscription{{Name: "sink", Events: []string{"order.created"}, Handler: rec, Concurrency: 4}}})
		if err != nil {
			t.Fatal(err)
		}
		const orders = 20
		for i := range orders {
			create(t, e, checkout(fmt.Sprintf("FO-%02d", i), time.Hour))
		}
		ctx := ctxT(t)
		d := engine.NewDeliverer(e, engine.DelivererConfig{Poll: 50 * time.Millisecond})
		d.Start(ctx)
		defer d.Stop()
		opened := false
		defer func() {
			if !opened {
				close(gate.open)
			}
		}()
		for range 2 {
			select {
			case <-gate.entered:
			case <-time.After(30 * time.Second):
				t.Fatalf("%d batches handed over, and fewer than 2 finishes started", calls.Load())
			}
		}
		for deadline := time.Now().Add(30 * time.Second); calls.Load() < 3; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d batches handed over while 2 finishes wait; want 3", calls.Load())
			}
		}
		time.Sleep(200 * time.Millisecond)
		if n := calls.Load(); n != 3 {
			t.Errorf("%d batches handed over while 2 finishes wait; want 3 (the third waits with its slots taken)", n)
		}
		opened = true
		close(gate.open)
		for deadline := time.Now().Add(time.Minute); len(rec.received()) < orders; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d events", len(rec.received()), orders)
			}
		}
		d.Stop()
		for i := range orders {
			no := fmt.Sprintf("FO-%02d", i)
			if h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone || len(h.History) != 1 {
				t.Errorf("%s: %+v %+v", no, h.Delivery, h.History)
			}
		}
	})
}
