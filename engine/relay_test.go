package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/internal/testenv"
	"github.com/lapsehq/lapse/postgres"
)

// relays reports whether s relays events without delivery rows.
func relays(s lapse.Store) bool {
	_, ok := s.(lapse.Relayer)
	return ok
}

// TestRelayOutcomes checks a relayed subscription (Subscription.Relay):
// on a store that relays, the events it takes get no delivery row at all,
// one it fails gets a delivery with that failed attempt, retried on
// schedule, and one it refuses dies at once with its review; on a store
// that cannot relay the same subscription gets a delivery per event, with
// the same outcomes. Either way the handler sees every event, in batches
// of at most Concurrency.
func TestRelayOutcomes(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		sink := &batchRecorder{fail: map[string]error{"RO-03": errors.New("HTTP 503"), "RO-07": fmt.Errorf("bad subject: %w", lapse.ErrRefused)}}
		e := subsEngine(t, s, clk, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: sink, Concurrency: 4,
			Relay: true, Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		relayReady(t, d)
		ctx := ctxT(t)
		for i := range 10 {
			create(t, e, checkout(fmt.Sprintf("RO-%02d", i), time.Hour))
		}
		if hs, err := e.Deliveries(ctx, "RO-00"); err != nil || len(hs) != 1 || hs[0].Status != lapse.DeliveryPending || hs[0].Relayed != relays(s) {
			t.Fatalf("RO-00 before the relay ran: %+v, %v; want its one delivery pending (relayed: %v)", hs, err, relays(s))
		}
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(sink.sizes, func(n int) bool { return n > 4 }) || sink.single != 0 {
			t.Errorf("calls of %v and %d single deliveries; want batches of at most 4", sink.sizes, sink.single)
		}
		for i := range 10 {
			no := fmt.Sprintf("RO-%02d", i)
			hs, err := e.Deliveries(ctx, no)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case no == "RO-03":
				h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated)
				if h.Status != lapse.DeliveryPending || !h.NextAttemptAt.Equal(t0.Add(time.Minute)) || h.LastError != "HTTP 503" ||
					h.LeaseOwner != "" || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeError || h.History[0].Attempt != 1 {
					t.Errorf("%s after a failure: %+v %+v", no, h.Delivery, h.History)
				}
			case no == "RO-07":
				h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated)
				if h.Status != lapse.DeliveryDead || len(h.History) != 1 || h.History[0].Outcome != lapse.OutcomeRefused {
					t.Errorf("%s after a refusal: %+v %+v", no, h.Delivery, h.History)
				}
			case relays(s):
				if len(hs) != 1 || !hs[0].Relayed || hs[0].ID != 0 || hs[0].Status != lapse.DeliveryDone || hs[0].Subscriber != "sink" || len(hs[0].History) != 0 {
					t.Errorf("%s was relayed: its deliveries are %+v, want one relayed and done, with no row", no, hs)
				}
			default:
				if h := sinkOf(t, e, no, "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone {
					t.Errorf("%s delivered: %+v", no, h.Delivery)
				}
			}
		}
		reviews, _ := e.Reviews(ctx, &lapse.ReviewListParams{Open: true, Limit: 10})
		if len(reviews) != 1 || reviews[0].OrderNo != "RO-07" || !strings.Contains(reviews[0].Reason, " to sink was refused at attempt 1: bad subject") {
			t.Fatalf("reviews: %+v", reviews)
		}

		clk.Advance(time.Minute)
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if h := sinkOf(t, e, "RO-03", "sink", lapse.EventOrderCreated); h.Status != lapse.DeliveryDone || len(h.History) != 2 {
			t.Errorf("RO-03 after its retry: %+v %+v", h.Delivery, h.History)
		}
		got := sink.received()
		var nos []string
		for _, dl := range got {
			nos = append(nos, dl.OrderNo)
		}
		slices.Sort(nos)
		if len(nos) != 9 || slices.Contains(nos, "RO-07") || len(slices.Compact(nos)) != 9 {
			t.Errorf("the sink got %v, want each order but RO-07 once", nos)
		}
		if _, err := d.RunOnce(ctx); err != nil || len(sink.received()) != 9 {
			t.Errorf("a pass with nothing new handed over %d events (%v)", len(sink.received())-9, err)
		}
	})
}

// TestRelayOrderOfEvents checks that an order's events reach a relayed
// subscriber in order: when one fails, the events of its order after it
// wait behind its delivery (in the same batch and in later ones) and go
// out after it, while other orders' events go on.
func TestRelayOrderOfEvents(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sink := &batchRecorder{fail: map[string]error{"RE-1": errors.New("HTTP 503")}}
		e := subsEngine(t, open(), clk, engine.Subscription{Name: "sink", Handler: sink, Concurrency: 8, Relay: true,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		relayReady(t, d)
		ctx := ctxT(t)
		create(t, e, checkout("RE-1", time.Hour))
		create(t, e, checkout("RE-2", time.Hour))
		if _, err := e.Fire(ctx, "RE-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		// Another event of RE-1, written after its first went to a row.
		if _, err := e.Fire(ctx, "RE-2", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		for _, dl := range sink.received() {
			if dl.OrderNo == "RE-1" {
				t.Fatalf("RE-1's %s went out while its order.created waits for a retry", dl.EventType)
			}
		}
		clk.Advance(time.Minute)
		for range 3 {
			if _, err := d.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var re1, re2 []string
		for _, dl := range sink.received() {
			switch dl.OrderNo {
			case "RE-1":
				re1 = append(re1, dl.EventType)
			case "RE-2":
				re2 = append(re2, dl.EventType)
			}
		}
		want := []string{lapse.EventOrderCreated, "order.closed"}
		if !slices.Equal(re1, want) || !slices.Equal(re2, want) {
			t.Fatalf("RE-1 got %v and RE-2 %v, want each %v", re1, re2, want)
		}
	})
}

// TestRelayOrderAcrossBatches checks that an order's event that failed in
// one batch holds back the order's next event in a later batch that the
// relay reads in the same transaction (while the handler has the first),
// before either has a delivery row, and that the batches' other events go
// out.
func TestRelayOrderAcrossBatches(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		sink := &batchRecorder{fail: map[string]error{"RB-1": errors.New("HTTP 503")}}
		e := subsEngine(t, open(), clk, engine.Subscription{Name: "sink", Handler: sink, Concurrency: 2, Relay: true,
			Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		relayReady(t, d)
		ctx := ctxT(t)
		// Batches of two: RB-1 and RB-2 created, then RB-1 closed and RB-3
		// created.
		create(t, e, checkout("RB-1", time.Hour))
		create(t, e, checkout("RB-2", time.Hour))
		if _, err := e.Fire(ctx, "RB-1", engine.Fire{Event: flows.Cancel, By: app}); err != nil {
			t.Fatal(err)
		}
		create(t, e, checkout("RB-3", time.Hour))
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		var nos []string
		for _, dl := range sink.received() {
			if dl.OrderNo == "RB-1" {
				t.Fatalf("RB-1's %s went out while its order.created waits for a retry", dl.EventType)
			}
			nos = append(nos, dl.OrderNo)
		}
		if slices.Sort(nos); !slices.Equal(nos, []string{"RB-2", "RB-3"}) {
			t.Fatalf("the sink got the events of %v; want RB-2's and RB-3's", nos)
		}
		clk.Advance(time.Minute)
		for range 3 {
			if _, err := d.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var rb1 []string
		for _, dl := range sink.received() {
			if dl.OrderNo == "RB-1" {
				rb1 = append(rb1, dl.EventType)
			}
		}
		if want := []string{lapse.EventOrderCreated, "order.closed"}; !slices.Equal(rb1, want) {
			t.Fatalf("RB-1 got %v, want %v", rb1, want)
		}
	})
}

// relayReads counts, for each relay transaction that moved its cursor,
// the batches it read.
type relayReads struct {
	*postgres.Store
	mu       sync.Mutex
	reads    int   // in the transaction under way
	perMoved []int // of each transaction that moved the cursor
}

func (s *relayReads) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	return s.Store.Tx(ctx, func(tx lapse.Store) error {
		s.mu.Lock()
		s.reads = 0
		s.mu.Unlock()
		return fn(&relayReadsTx{Store: tx.(*postgres.Store), rec: s})
	})
}

type relayReadsTx struct {
	*postgres.Store
	rec *relayReads
}

func (tx *relayReadsTx) RelayRead(ctx context.Context, p *lapse.RelayReadParams) (*lapse.RelayBatch, error) {
	tx.rec.mu.Lock()
	tx.rec.reads++
	tx.rec.mu.Unlock()
	return tx.Store.RelayRead(ctx, p)
}

func (tx *relayReadsTx) RelayAdvance(ctx context.Context, c *lapse.RelayCursor, relayed int64) error {
	tx.rec.mu.Lock()
	tx.rec.perMoved = append(tx.rec.perMoved, tx.rec.reads)
	tx.rec.mu.Unlock()
	return tx.Store.RelayAdvance(ctx, c, relayed)
}

// TestRelayStopsReadingOnFailure checks that a relay whose handler fails
// (a broker that is down) reads no batch past the one it read beside the
// failed one, so that its transaction, which holds the cursor, lasts two
// of the handler's timeouts at most, not eight; and that with a handler
// that takes everything it reads on, several batches a transaction.
func TestRelayStopsReadingOnFailure(t *testing.T) {
	run := func(t *testing.T, fail bool) []int {
		clk := lapse.NewManualClock(t0)
		s := &relayReads{Store: relayStore(t)}
		sink := &batchRecorder{fail: map[string]error{}}
		e := subsEngine(t, s, clk, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: sink, Concurrency: 2,
			Relay: true, Schedule: lapse.Schedule{Steps: []time.Duration{time.Minute}}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		relayReady(t, d)
		for i := range 12 {
			no := fmt.Sprintf("RF-%02d", i)
			if fail {
				sink.fail[no] = errors.New("HTTP 503")
			}
			create(t, e, checkout(no, time.Hour))
		}
		s.mu.Lock()
		s.perMoved = nil
		s.mu.Unlock()
		if _, err := d.RunOnce(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Clone(s.perMoved)
	}
	if got := run(t, true); len(got) == 0 || slices.Max(got) > 2 {
		t.Errorf("every event failing: batches read by each transaction that moved the cursor %v; want at most 2", got)
	}
	if got := run(t, false); len(got) == 0 || slices.Max(got) < 3 {
		t.Errorf("every event taken: batches read by each transaction that moved the cursor %v; want more than 2 in one", got)
	}
}

// TestRelayTwoProcesses checks relays of one subscription on two engines
// of one PostgreSQL database (the store that relays), as on two
// processes: each event is handed over once, by one or the other, while
// both run. A relay whose transaction fails after its handler took the
// batch hands the batch over again.
func TestRelayTwoProcesses(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresSchema(t)
	s := openPostgres(t, dsn)
	var mu sync.Mutex
	seen := map[string]int{}
	sink := &batchRecorder{during: func(ds []*lapse.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, dl := range ds {
			seen[dl.EventID]++
		}
	}}
	sub := func(relay bool) engine.Subscription {
		return engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: sink, Concurrency: 16, Relay: relay}
	}
	clk := lapse.SystemClock{}
	e1 := subsEngine(t, s, clk, sub(true))
	e2 := subsEngine(t, s, clk, sub(true))
	const n = 400
	ctx := ctxT(t)
	d1 := engine.NewDeliverer(e1, engine.DelivererConfig{Owner: "one"})
	d2 := engine.NewDeliverer(e2, engine.DelivererConfig{Owner: "two"})
	relayReady(t, d1)
	relayReady(t, d2)
	for i := range n {
		create(t, []*engine.Engine{e1, e2}[i%2], checkout(fmt.Sprintf("R2-%03d", i), time.Hour))
	}
	d1.Start(ctx)
	d2.Start(ctx)
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events handed over in a minute", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d1.Stop()
	d2.Stop()
	for _, dl := range sink.received() {
		if dl.ID != 0 {
			t.Fatalf("%s went out as delivery %d, want relayed", dl.OrderNo, dl.ID)
		}
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("event %s handed over %d times by two relays that never failed", id, k)
		}
	}

	// Stopped while their transactions may be open, the relays moved
	// their cursor past what they had handed over: nothing is left.
	if n, err := d1.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("after both relays stopped, a relay read %d events (err %v), want none: a stop left a batch to be handed over again", n, err)
	}

	// A relay whose transaction fails (its connection ended by the server)
	// after the handler took the batch hands the batch over again.
	for i := range 3 {
		create(t, e1, checkout(fmt.Sprintf("R2-X%d", i), time.Hour))
	}
	handed := 0
	var endErr error
	sink.during = func(ds []*lapse.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, dl := range ds {
			seen[dl.EventID]++
		}
		handed += len(ds)
		endErr = endRelayTx(ctx, dsn)
	}
	_, err := d1.RunOnce(ctx)
	sink.during = nil
	if endErr != nil {
		t.Fatalf("cannot end the relay's transaction: %v", endErr)
	}
	if err == nil {
		t.Fatal("a relay whose transaction was cut reported no error")
	}
	if handed != 3 {
		t.Fatalf("the relay whose transaction was cut handed over %d events, want the 3 written", handed)
	}
	again := 0
	if _, err := d2.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, dl := range sink.received() {
		if strings.HasPrefix(dl.OrderNo, "R2-X") {
			again++
		}
	}
	if again != 6 {
		t.Fatalf("the cut batch of 3 was handed over %d times in all, want twice each (6)", again)
	}

	// A process told not to relay writes deliveries, and still relays
	// what the relaying ones wrote, so that none waits for them.
	e3 := subsEngine(t, s, clk, sub(false))
	create(t, e1, checkout("R2-ON", time.Hour))
	create(t, e3, checkout("R2-OFF", time.Hour))
	d3 := engine.NewDeliverer(e3, engine.DelivererConfig{Owner: "three"})
	if _, err := d3.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var on, offs int
	for _, dl := range sink.received() {
		switch dl.OrderNo {
		case "R2-ON":
			on++
			if dl.ID != 0 {
				t.Errorf("R2-ON went out as delivery %d, want relayed", dl.ID)
			}
		case "R2-OFF":
			offs++
			if dl.ID == 0 {
				t.Error("R2-OFF, written by a process that does not relay, went out relayed")
			}
		}
	}
	if on != 1 || offs != 1 {
		t.Fatalf("a process that does not relay handed over R2-ON %d times and R2-OFF %d times, want once each", on, offs)
	}
}

// TestRelayFoundLater checks that a process that does not relay a
// subscription, and found no cursor of it when it started, relays the
// events of a relay made after it started: the process that relays them
// may stop for good, and its events must not wait for a restart here.
func TestRelayFoundLater(t *testing.T) {
	t.Parallel()
	s := relayStore(t)
	sink := &batchRecorder{}
	sub := func(relay bool) engine.Subscription {
		return engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: sink, Concurrency: 16, Relay: relay}
	}
	clk := lapse.SystemClock{}
	ctx := ctxT(t)
	off := engine.NewDeliverer(subsEngine(t, s, clk, sub(false)), engine.DelivererConfig{Owner: "off", RelayWatch: 50 * time.Millisecond})
	off.Start(ctx)
	t.Cleanup(off.Stop)

	// A process that relays starts: its relay makes the cursor, it writes
	// events for the relay, and it stops before relaying them.
	on := subsEngine(t, s, clk, sub(true))
	onD := engine.NewDeliverer(on, engine.DelivererConfig{Owner: "on"})
	onD.Start(ctx)
	onD.Stop()
	for i := range 3 {
		create(t, on, checkout(fmt.Sprintf("RL-%d", i), time.Hour))
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := sink.received()
		if len(got) == 3 {
			for _, dl := range got {
				if dl.ID != 0 {
					t.Errorf("%s went out as delivery %d, want relayed", dl.OrderNo, dl.ID)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 3 events of a relay made after this process started handed over in 30s", len(got))
		}
	}
}

// TestRelayStartMakesCursor checks that a Deliverer's Start returns with
// the cursors of its relayed subscriptions made, so that the events the
// process writes for them from then on are found by the processes that
// look for relays, even if it stops for good before it reads them.
func TestRelayStartMakesCursor(t *testing.T) {
	t.Parallel()
	s := relayStore(t)
	ctx := ctxT(t)
	e := subsEngine(t, s, lapse.SystemClock{},
		engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: &batchRecorder{}, Concurrency: 16, Relay: true})
	d := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "on"})
	d.Start(ctx)
	cursors, err := s.RelayList(ctx)
	d.Stop()
	if err != nil || len(cursors) != 1 || cursors[0].Subscriber != "sink" {
		t.Fatalf("cursors when Start returned: %+v, %v; want sink's", cursors, err)
	}
}

// relayStore opens a migrated PostgreSQL store in a schema of its own: the
// store that relays.
func relayStore(t *testing.T) *postgres.Store {
	t.Helper()
	return openPostgres(t, testenv.PostgresSchema(t))
}

// stopTaker is a batch handler whose first call returns only once its
// context has ended, having taken its batch: a broker that acknowledged
// the events as the process was told to stop.
type stopTaker struct {
	entered chan struct{}
	once    sync.Once
	mu      sync.Mutex
	got     map[string]int // by event id
}

func (h *stopTaker) Deliver(ctx context.Context, d *lapse.Delivery) error {
	return h.DeliverMany(ctx, []*lapse.Delivery{d})[0]
}

func (h *stopTaker) DeliverMany(ctx context.Context, ds []*lapse.Delivery) []error {
	h.once.Do(func() {
		close(h.entered)
		<-ctx.Done()
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range ds {
		h.got[d.EventID]++
	}
	return make([]error, len(ds))
}

// TestRelayStopHandsNothingTwice stops a relay (lapse serve's SIGTERM)
// while its handler has a batch, which the handler then takes: the relay
// records it and moves its cursor past it, so that no relay hands it over
// again. Before, the stop cut the relay's transaction, and every stop
// handed the batches in flight over twice.
func TestRelayStopHandsNothingTwice(t *testing.T) {
	t.Parallel()
	s := relayStore(t)
	h := &stopTaker{entered: make(chan struct{}), got: map[string]int{}}
	e := subsEngine(t, s, lapse.SystemClock{}, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: h, Concurrency: 16, Relay: true})
	d := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "one"})
	relayReady(t, d)
	const n = 5
	for i := range n {
		create(t, e, checkout(fmt.Sprintf("RS-%d", i), time.Hour))
	}
	d.Start(ctxT(t))
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay handed nothing over in 30 s")
	}
	d.Stop()
	again, err := engine.NewDeliverer(e, engine.DelivererConfig{Owner: "two"}).RunOnce(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if again != 0 || len(h.got) != n {
		t.Fatalf("after a stop, the next relay read %d events and %d of %d were handed over; want none read again and all handed over", again, len(h.got), n)
	}
	for id, k := range h.got {
		if k != 1 {
			t.Errorf("event %s handed over %d times", id, k)
		}
	}
}

// endRelayTx ends, as a server that restarts does, the connection of the
// transaction that holds a relay's cursor in the schema of dsn, and waits
// until it is gone. It is called by a handler, on the relay's goroutine.
func endRelayTx(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT DISTINCT pid FROM pg_locks
		WHERE relation = 'relay_cursors'::regclass AND pid <> pg_backend_pid()`)
	if err != nil {
		return err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return errors.New("no transaction holds the relay's cursor")
	}
	for _, pid := range pids {
		var ended bool
		if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended); err != nil {
			return err
		}
		if !ended {
			return fmt.Errorf("backend %d still there 10 s after it was told to end", pid)
		}
	}
	return nil
}

// relayReady runs d once, which makes the cursors of its relays, as Start
// does: a process relays its events only once it has its relay's cursor.
func relayReady(t *testing.T, d *engine.Deliverer) {
	t.Helper()
	if _, err := d.RunOnce(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestRelayFinalAttempt: an event handed over by the relay is attempt 1 of
// its delivery, so under a schedule of one attempt its handler is told
// that the attempt is the last (lapse.Delivery.Final), as it is told for a
// delivery row's.
func TestRelayFinalAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() lapse.Store) {
		clk := lapse.NewManualClock(t0)
		s := open()
		sink := &batchRecorder{}
		e := subsEngine(t, s, clk, engine.Subscription{Name: "sink", Events: []string{"order.created"}, Handler: sink, Concurrency: 4,
			Relay: true, Schedule: lapse.Schedule{Base: time.Second, MaxAttempts: 1}})
		d := engine.NewDeliverer(e, engine.DelivererConfig{})
		relayReady(t, d)
		for i := range 3 {
			create(t, e, checkout(fmt.Sprintf("RF-%02d", i), time.Hour))
		}
		if _, err := d.RunOnce(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		got := sink.received()
		if len(got) != 3 {
			t.Fatalf("the sink got %d events, want 3", len(got))
		}
		for _, dl := range got {
			if dl.Attempts != 1 || !dl.Final {
				t.Errorf("%s: attempt %d, final %v; want attempt 1, the last of its schedule", dl.OrderNo, dl.Attempts, dl.Final)
			}
		}
	})
}
