package engine_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

func TestClaimerRunOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		reg := prometheus.NewRegistry()
		e, err := engine.New(open(), flows.Builtin(), engine.Config{Clock: clk, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		c := engine.NewClaimer(e, engine.ClaimerConfig{Batch: 7})
		const n = 50
		for i := range n {
			create(t, e, checkout(orderNo("R", i), time.Duration(i+1)*time.Second))
		}
		// Nothing is early.
		clk.Set(t0.Add(time.Second - time.Microsecond))
		if fired, err := c.RunOnce(ctxT(t)); fired != 0 || err != nil {
			t.Fatalf("RunOnce before any deadline fired %d, %v", fired, err)
		}
		// At +25.5s, the 25 orders due are fired, in several batches.
		clk.Set(t0.Add(25*time.Second + 500*time.Millisecond))
		if fired, err := c.RunOnce(ctxT(t)); fired != 25 || err != nil {
			t.Fatalf("RunOnce fired %d, %v; want 25", fired, err)
		}
		for i := range n {
			o, _ := e.Order(ctxT(t), orderNo("R", i))
			into, events, trs := history(t, e, o.OrderNo)
			if i < 25 {
				last := trs[len(trs)-1]
				if o.State != flows.Closed || o.CloseReason != "TIMEOUT" || o.FiredBy != lapse.FiredByTimer ||
					into[flows.Closed] != 1 || events[flows.EventOrderClosed] != 1 ||
					last.FiredBy != lapse.FiredByTimer || last.Event != flows.Timeout || !last.CreatedAt.Equal(clk.Now()) {
					t.Errorf("%s: %+v, log %+v", o.OrderNo, o, last)
				}
			} else if o.State != flows.Unpaid || len(trs) != 1 {
				t.Errorf("%s fired early: %s", o.OrderNo, o.State)
			}
		}
		if fired, _ := c.RunOnce(ctxT(t)); fired != 0 {
			t.Errorf("second RunOnce fired %d again", fired)
		}
		if got := metricValue(t, reg, "lapse_deadline_firings_total"); got != 25 {
			t.Errorf("lapse_deadline_firings_total{path=timer} = %v, want 25", got)
		}
		if due := metricValue(t, reg, "lapse_due_open_orders"); due != 0 {
			t.Errorf("lapse_due_open_orders = %v, want 0", due)
		}
		clk.Set(t0.Add(time.Hour))
		if due := metricValue(t, reg, "lapse_due_open_orders"); due != 25 {
			t.Errorf("lapse_due_open_orders an hour later = %v, want 25", due)
		}
	})
}

func TestClaimerSweep(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		e := newEngine(t, open(), clk)
		c := engine.NewClaimer(e, engine.ClaimerConfig{SweepGrace: 5 * time.Second, SweepBatch: 3})
		for i := range 10 {
			create(t, e, checkout(orderNo("S", i), time.Duration(i+1)*time.Second))
		}
		// At +10s all are due, but only those overdue by 5s or more (deadlines
		// +1s…+5s) are the sweep's.
		clk.Set(t0.Add(10 * time.Second))
		fired, err := c.Sweep(ctxT(t))
		if fired != 5 || err != nil {
			t.Fatalf("Sweep fired %d, %v; want 5", fired, err)
		}
		for i := range 10 {
			o, _ := e.Order(ctxT(t), orderNo("S", i))
			want := lapse.FiredBySweep
			if i >= 5 {
				want = lapse.FiredByApp // untouched since creation
			}
			if o.FiredBy != want {
				t.Errorf("%s fired by %q, want %q", o.OrderNo, o.FiredBy, want)
			}
		}
	})
}

// TestClaimerLoop runs the background claimer on the real clock.
func TestClaimerLoop(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		e := newEngine(t, open(), lapse.SystemClock{})
		// MaxSleep of an hour: only the in-process wake-up can fire on time.
		c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour})
		c.Start(context.Background())
		defer c.Stop()

		const n = 40
		deadlines := make([]time.Time, n)
		for i := range n {
			deadlines[i] = *create(t, e, checkout(orderNo("L", i), time.Duration(50+i*5)*time.Millisecond)).DeadlineAt
		}
		waitNoneUnpaid(t, e, 10*time.Second)
		for i := range n {
			o, _ := e.Order(ctxT(t), orderNo("L", i))
			if o.State != flows.Closed || o.FiredBy != lapse.FiredByTimer {
				t.Errorf("%s is %s, fired by %s", o.OrderNo, o.State, o.FiredBy)
			}
			if o.ClosedAt.Before(deadlines[i]) {
				t.Errorf("%s closed at %v, before its deadline %v", o.OrderNo, o.ClosedAt, deadlines[i])
			}
		}
	})
}

// TestClaimersExactlyOnce runs three engines, each with its own store
// connection (three "processes"), over one database.
func TestClaimersExactlyOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		const n = 3000
		clk := lapse.SystemClock{}
		first := newEngine(t, open(), clk)
		for i := range n {
			create(t, first, checkout(orderNo("X", i), time.Duration(200+i/10)*time.Millisecond))
		}
		// Every store is opened (and migrated) before any claimer starts:
		// SQLite's busy handler does not queue writers, so one opening while
		// three claimers write could wait past its busy timeout.
		var cs []*engine.Claimer
		for range 3 {
			e := newEngine(t, open(), clk)
			cs = append(cs, engine.NewClaimer(e, engine.ClaimerConfig{Batch: 50, Workers: 2, MaxSleep: 20 * time.Millisecond, SweepInterval: 100 * time.Millisecond, SweepGrace: time.Millisecond}))
		}
		for _, c := range cs {
			c.Start(context.Background())
		}
		waitNoneUnpaid(t, first, 60*time.Second)
		for _, c := range cs {
			c.Stop()
		}
		for i := range n {
			into, events, _ := history(t, first, orderNo("X", i))
			if into[flows.Closed] != 1 || events[flows.EventOrderClosed] != 1 {
				t.Fatalf("%s: %d transitions to CLOSED, %d order.closed events", orderNo("X", i), into[flows.Closed], events[flows.EventOrderClosed])
			}
		}
	})
}

// TestPayRacesDeadline pays orders at their deadline, a few milliseconds
// either side, while the claimer closes them: each ends PAID or CLOSED, never
// both, and nothing leaves CLOSED.
func TestPayRacesDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		const n = 300
		e := newEngine(t, open(), lapse.SystemClock{})
		c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond, SweepGrace: time.Millisecond})
		c.Start(context.Background())
		defer c.Stop()

		// Deadlines start once every order exists (10 s is ample even on a
		// loaded machine), 7 ms apart; the orders are created in parallel.
		start := lapse.SystemClock{}.Now().Add(10 * time.Second)
		deadlines := make([]time.Time, n)
		reqs := make([]*lapse.OrderCreate, n)
		for i := range n {
			deadlines[i] = start.Add(time.Duration(i) * 7 * time.Millisecond)
			reqs[i] = checkout(orderNo("P", i), 0)
			reqs[i].DeadlineAt = &deadlines[i]
		}
		var next atomic.Int64
		var cw sync.WaitGroup
		for range 8 {
			cw.Go(func() {
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					if _, _, err := e.CreateOrder(ctxT(t), reqs[i], app); err != nil {
						t.Errorf("CreateOrder(%s): %v", reqs[i].OrderNo, err)
					}
				}
			})
		}
		cw.Wait()
		if time.Now().After(start) {
			t.Fatalf("creating %d orders took longer than the lead time", n)
		}
		var wg sync.WaitGroup
		for i := range n {
			offset := time.Duration(rand.IntN(7001)-3500) * time.Microsecond // ±3.5 ms
			wg.Go(func() {
				time.Sleep(time.Until(deadlines[i].Add(offset)))
				_, _ = e.Fire(context.Background(), reqs[i].OrderNo, engine.Fire{Event: flows.Pay, By: app})
			})
		}
		wg.Wait()
		waitNoneUnpaid(t, e, 30*time.Second)
		paid, closed := 0, 0
		for i := range n {
			o, _ := e.Order(ctxT(t), orderNo("P", i))
			into, events, trs := history(t, e, o.OrderNo)
			switch o.State {
			case flows.Paid:
				paid++
				if into[flows.Closed] != 0 || events[flows.EventOrderClosed] != 0 || events[flows.EventOrderPaid] != 1 {
					t.Errorf("%s PAID with history %v %v", o.OrderNo, into, events)
				}
				if pay := trs[len(trs)-1]; !pay.CreatedAt.Before(deadlines[i]) {
					t.Errorf("%s PAID at %v, not before its deadline %v", o.OrderNo, pay.CreatedAt, deadlines[i])
				}
			case flows.Closed:
				closed++
				if into[flows.Paid] != 0 || events[flows.EventOrderPaid] != 0 || events[flows.EventOrderClosed] != 1 || o.CloseReason != "TIMEOUT" {
					t.Errorf("%s CLOSED with history %v %v", o.OrderNo, into, events)
				}
			default:
				t.Errorf("%s ended %s", o.OrderNo, o.State)
			}
			if len(trs) != 2 {
				t.Errorf("%s has %d log rows, want creation + one", o.OrderNo, len(trs))
			}
		}
		t.Logf("%d orders: %d paid before their deadline, %d closed at it", n, paid, closed)
	})
}

// waitNoneUnpaid waits until no order is UNPAID.
func waitNoneUnpaid(t *testing.T, e *engine.Engine, timeout time.Duration) {
	t.Helper()
	stop := time.Now().Add(timeout)
	for {
		left, err := e.Orders(ctxT(t), &lapse.OrderListParams{State: flows.Unpaid, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(stop) {
			t.Fatalf("orders still UNPAID after %v, e.g. %s due %v", timeout, left[0].OrderNo, left[0].DeadlineAt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue sums the samples of the metric family called name.
func metricValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return sum
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestWorkStoreNotStarved holds every connection of the API's pool while
// orders fall due: a Claimer working through its own pool (WorkStore) still
// closes them.
func TestWorkStoreNotStarved(t *testing.T) {
	dsn := testenv.PostgresSchema(t)
	ctx := context.Background()
	openPool := func(conns int32) *postgres.Store {
		s, err := postgres.Open(ctx, dsn, postgres.Config{MaxConns: conns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	api, work := openPool(1), openPool(2)
	if err := api.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(api, flows.Builtin(), engine.Config{WorkStore: work})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		create(t, e, checkout(orderNo("WS", i), 300*time.Millisecond))
	}
	// A long request holds the API pool's only connection.
	hold, held := make(chan struct{}), make(chan struct{})
	go api.Tx(ctx, func(lapse.Store) error {
		close(held)
		<-hold
		return nil
	})
	<-held
	defer close(hold)
	c := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: 50 * time.Millisecond})
	c.Start(ctx)
	defer c.Stop()
	stop := time.Now().Add(10 * time.Second)
	for {
		var closed int64
		if err := work.Tx(ctx, func(tx lapse.Store) error {
			due, err := tx.OrderCountDue(ctx, time.Now().Add(time.Hour))
			closed = 20 - due
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if closed == 20 {
			return
		}
		if time.Now().After(stop) {
			t.Fatalf("%d of 20 orders closed while the API pool was held", closed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClaimerGathers checks ClaimerConfig.Gather: deadlines that come due
// within it of a claim that fired are fired together by the next claim, at
// most Gather late and never early; without it, each is claimed near its
// own time. Orders closed by one claim share their ClosedAt, the claim's
// time.
func TestClaimerGathers(t *testing.T) {
	for _, c := range []struct {
		name   string
		gather time.Duration
	}{{"gather", time.Second}, {"off", -1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const n = 20 // 20 ms apart: 380 ms from the first to the last
			// Without gathering, a machine so busy that the deadlines
			// were all due before the claimer first looked (or it slept
			// through most of them) fires them in one or two claims,
			// which proves nothing either way: that case is run again,
			// on a new engine, up to three times.
			for try := 1; ; try++ {
				claims := gatherRun(t, c.gather, n)
				switch {
				case c.gather > 0 && claims > 2:
					t.Errorf("%d claims fired the %d deadlines; within a gather of %v, want the first and one more", claims, n, c.gather)
				case c.gather < 0 && claims < 3 && try < 3:
					t.Logf("try %d: %d claims fired the %d deadlines without gathering (a busy machine): again", try, claims, n)
					continue
				case c.gather < 0 && claims < 3:
					t.Errorf("%d claims fired the %d deadlines without gathering, %d times: the test proves nothing", claims, n, try)
				}
				return
			}
		})
	}
}

// gatherRun makes n orders due 20 ms apart on a new engine whose claimer
// gathers for gather (negative: off), waits until the claimer closed them
// all, checks their close lag, and returns how many claims closed them.
func gatherRun(t *testing.T, gather time.Duration, n int) int {
	t.Helper()
	e := newEngine(t, openSQLite(t), lapse.SystemClock{})
	cl := engine.NewClaimer(e, engine.ClaimerConfig{MaxSleep: time.Hour, SweepInterval: time.Hour, Gather: gather})
	cl.Start(context.Background())
	defer cl.Stop()
	// From a time fixed before the orders are made, however long
	// making them takes on a busy machine: deadlines made from each
	// creation's own time (a TTL) drifted apart as creations slowed,
	// and outgrew the gather.
	first := time.Now().Add(2 * time.Second)
	deadlines := make([]time.Time, n)
	for i := range n {
		req := checkout(orderNo("G", i), 0)
		at := first.Add(time.Duration(i*20) * time.Millisecond)
		req.DeadlineAt = &at
		deadlines[i] = *create(t, e, req).DeadlineAt
	}
	waitNoneUnpaid(t, e, 20*time.Second)
	claims := map[time.Time]bool{}
	for i := range n {
		o, _ := e.Order(ctxT(t), orderNo("G", i))
		if o.State != flows.Closed || o.ClosedAt == nil {
			t.Fatalf("%s is %s", o.OrderNo, o.State)
		}
		if lag := o.ClosedAt.Sub(deadlines[i]); lag < 0 || gather > 0 && lag > gather+2*time.Second {
			t.Errorf("%s closed %v after its deadline", o.OrderNo, lag)
		}
		claims[*o.ClosedAt] = true
	}
	return len(claims)
}
