package engine

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

// txCounting counts the transactions run on its store: the claims.
type txCounting struct {
	lapse.Store
	txs atomic.Int64
}

func (s *txCounting) Tx(ctx context.Context, fn func(tx lapse.Store) error) error {
	s.txs.Add(1)
	return s.Store.Tx(ctx, fn)
}

// lookEngines returns two engines on one SQLite database, as two processes,
// on clk; the first works through a store that counts its transactions.
func lookEngines(t *testing.T, clk lapse.Clock) (*Engine, *Engine, *txCounting) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lapse.db")
	open := func() lapse.Store { return openSQLite(t, path) }
	work := &txCounting{Store: open()}
	e, err := New(work, flows.Builtin(), Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(open(), flows.Builtin(), Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return e, other, work
}

func lookCreate(t *testing.T, e *Engine, orderNo string, ttl time.Duration) *lapse.Order {
	t.Helper()
	o, created, err := e.CreateOrder(context.Background(), &lapse.OrderCreate{OrderNo: orderNo, Flow: "checkout", UserID: "u1",
		Amount: 1000, Currency: "CNY", Items: []lapse.Item{{SKU: "tea", Qty: 1}}, TTL: ttl}, Actor{FiredBy: lapse.FiredByApp, Name: "test"})
	if err != nil || !created {
		t.Fatalf("CreateOrder(%s) = created %v, %v", orderNo, created, err)
	}
	return o
}

// TestSweepLooksBeforeClaiming pins the background sweep's pass: it claims
// (a transaction) only when an order is overdue by SweepGrace or more, as
// the claim's own condition reads,
// and then fires it as before.
func TestSweepLooksBeforeClaiming(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, other, work := lookEngines(t, clk)
	c := NewClaimer(e, ClaimerConfig{})
	cfg := c.conf()
	ctx := context.Background()

	if n, err := c.sweepPass(ctx, ctx, cfg); n != 0 || err != nil || work.txs.Load() != 0 {
		t.Fatalf("sweep of an empty database: fired %d, %v, %d claims; want none", n, err, work.txs.Load())
	}
	o := lookCreate(t, other, "SW-1", 10*time.Second)
	for _, at := range []time.Duration{0, 10 * time.Second, 11*time.Second - time.Microsecond} { // not due, due, overdue by less than SweepGrace
		clk.Set(t0.Add(at))
		before := work.txs.Load()
		if n, err := c.sweepPass(ctx, ctx, cfg); n != 0 || err != nil || work.txs.Load() != before {
			t.Fatalf("sweep at +%v: fired %d, %v, %d claims; want none", at, n, err, work.txs.Load()-before)
		}
	}
	clk.Set(t0.Add(11 * time.Second))
	if n, err := c.sweepPass(ctx, ctx, cfg); n != 1 || err != nil {
		t.Fatalf("sweep of an order overdue by SweepGrace: fired %d, %v; want 1", n, err)
	}
	got, err := e.Order(ctx, o.OrderNo)
	if err != nil || got.State != flows.Closed || got.FiredBy != lapse.FiredBySweep {
		t.Fatalf("after the sweep: %+v, %v; want CLOSED by the sweep", got, err)
	}
}

// TestSweepLookFresh pins when the precise path takes the sweep's look
// instead of its own: only one that began after its own, less than
// MaxSleep ago, with no deadline set in this process since it began.
func TestSweepLookFresh(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, other, _ := lookEngines(t, clk)
	c := NewClaimer(e, ClaimerConfig{})
	ctx := context.Background()
	const maxSleep = time.Second

	if _, fresh := c.sweepLook(time.Time{}, maxSleep); fresh {
		t.Fatal("a look taken before the sweep ever looked")
	}
	// Another process's order, which this one is not told of: the sweep's
	// look knows it, as a look of the precise path would.
	o := lookCreate(t, other, "LK-1", time.Minute)
	asked := t0 // the precise path's own last look
	clk.Set(t0.Add(300 * time.Millisecond))
	if _, err := c.sweepPass(ctx, ctx, c.conf()); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(time.Second))
	look, fresh := c.sweepLook(asked, maxSleep)
	if !fresh || !look.ok || !look.next.Equal(*o.DeadlineAt) || !look.at.Equal(t0.Add(300*time.Millisecond)) {
		t.Fatalf("the sweep's look = %+v, fresh %v; want the next deadline %v seen at +300ms", look, fresh, o.DeadlineAt)
	}
	if _, fresh := c.sweepLook(look.at, maxSleep); fresh {
		t.Error("a look no newer than the precise path's own was taken")
	}
	clk.Set(t0.Add(1300 * time.Millisecond))
	if _, fresh := c.sweepLook(asked, maxSleep); fresh {
		t.Error("a look MaxSleep old was taken: another process's deadline could wait longer than MaxSleep")
	}
	// A deadline set in this process after the look began: the look may
	// not know it, and it may not have woken the precise path (it wakes
	// it only when earlier than the time it sleeps towards).
	clk.Set(t0.Add(time.Second))
	lookCreate(t, e, "LK-2", 2*time.Second)
	if _, fresh := c.sweepLook(asked, maxSleep); fresh {
		t.Error("a look older than a deadline this process set was taken")
	}
	// A new look knows it.
	clk.Set(t0.Add(1100 * time.Millisecond))
	if _, err := c.sweepPass(ctx, ctx, c.conf()); err != nil {
		t.Fatal(err)
	}
	if look, fresh := c.sweepLook(asked, maxSleep); !fresh || !look.next.Equal(t0.Add(3*time.Second)) {
		t.Errorf("the new look = %+v, fresh %v; want the deadline at +3s", look, fresh)
	}
}

// lookCounting counts the looks at the next deadline made through its store.
type lookCounting struct {
	lapse.Store
	looks atomic.Int64
}

func (s *lookCounting) OrderNextDeadline(ctx context.Context, flows []string, from time.Time) (time.Time, bool, error) {
	s.looks.Add(1)
	return s.Store.OrderNextDeadline(ctx, flows, from)
}

// TestSweepTakesPreciseLook pins the other half of sharing looks: a pass of
// the sweep takes the precise path's look when it began less than MaxSleep
// ago and this process set no deadline since, so that an idle Claimer sends
// one statement every MaxSleep and no more; an older look, or one this
// process's deadline came after, is looked at again.
func TestSweepTakesPreciseLook(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clk := lapse.NewManualClock(t0)
	e, other, _ := lookEngines(t, clk)
	counting := &lookCounting{Store: e.work}
	e.work = counting
	c := NewClaimer(e, ClaimerConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	o := lookCreate(t, other, "PL-1", time.Minute)

	done := make(chan struct{})
	go func() { defer close(done); c.precise(ctx, ctx) }()
	// The precise path looks, then sleeps for MaxSleep of real time; the
	// manual clock stands still, so its look stays fresh.
	for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(time.Millisecond) {
		c.lookMu.Lock()
		kept := c.look.ok
		c.lookMu.Unlock()
		if kept {
			break
		}
	}
	cancel()
	<-done
	c.lookMu.Lock()
	look := c.look
	c.lookMu.Unlock()
	if !look.ok || !look.next.Equal(*o.DeadlineAt) {
		t.Fatalf("the precise path kept the look %+v; want the deadline %v", look, o.DeadlineAt)
	}
	before := counting.looks.Load()
	clk.Set(t0.Add(500 * time.Millisecond))
	if n, err := c.sweepPass(context.Background(), context.Background(), c.conf()); n != 0 || err != nil || counting.looks.Load() != before {
		t.Fatalf("sweep beside a fresh look: fired %d, %v, %d looks of its own; want none", n, err, counting.looks.Load()-before)
	}
	clk.Set(t0.Add(c.maxSleep()))
	if _, err := c.sweepPass(context.Background(), context.Background(), c.conf()); err != nil || counting.looks.Load() != before+1 {
		t.Fatalf("sweep beside a look MaxSleep old: %v, %d looks of its own; want 1", err, counting.looks.Load()-before)
	}
	lookCreate(t, e, "PL-2", time.Minute)
	if _, err := c.sweepPass(context.Background(), context.Background(), c.conf()); err != nil || counting.looks.Load() != before+2 {
		t.Fatalf("sweep after this process set a deadline: %v, %d looks of its own; want 2", err, counting.looks.Load()-before)
	}
}

// openSQLite opens the SQLite store at path, migrated, closed when t ends.
func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}
