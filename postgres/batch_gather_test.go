package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testenv"
)

// gatherProbe is a batcher of ints whose write records each batch.
type gatherProbe struct {
	*batcher[int, int]
	mu      sync.Mutex
	batches [][]int
}

func newGatherProbe(gather time.Duration) *gatherProbe {
	g := &gatherProbe{}
	g.batcher = &batcher[int, int]{max: 1, gather: gather,
		take: func(q []*batchCall[int, int]) (batch, rest []*batchCall[int, int]) { return slices.Clone(q), nil },
		write: func(_ context.Context, batch []*batchCall[int, int]) {
			var ps []int
			for _, c := range batch {
				c.decided, c.r = true, c.p
				ps = append(ps, c.p)
			}
			g.mu.Lock()
			g.batches = append(g.batches, ps)
			g.mu.Unlock()
		}}
	return g
}

// busy makes g's batcher look as it does at thousands of calls a second,
// with n calls in flight at once while its last batch ran.
func (g *gatherProbe) busy(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batcher.mu.Lock()
	defer g.batcher.mu.Unlock()
	g.last, g.gap, g.peak = time.Now(), time.Microsecond, n
}

func (g *gatherProbe) got() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

// waitFor polls cond under b.mu for up to 30 s.
func (g *gatherProbe) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		g.batcher.mu.Lock()
		ok := cond()
		g.batcher.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not after 30s", what)
}

// TestBatchGatherRules checks when a batch waits for more calls, and how
// long: only while calls come at least two a gather, and the batch is
// smaller than the calls that were in flight at once, at most gatherBatch.
func TestBatchGatherRules(t *testing.T) {
	now := time.Now()
	queue := func(n int, age time.Duration) []*batchCall[int, int] {
		var q []*batchCall[int, int]
		for range n {
			q = append(q, &batchCall[int, int]{arrived: now.Add(-age)})
		}
		return q
	}
	for _, c := range []struct {
		name         string
		gather, gap  time.Duration
		peak, queued int
		age          time.Duration
		waits        bool
	}{
		{"thousands a second, one call of four in flight", time.Second, time.Millisecond, 4, 1, 0, true},
		{"three of four", time.Second, time.Millisecond, 4, 3, 0, true},
		{"four waiting", time.Second, time.Millisecond, 4, 4, 0, false},
		{"more in flight than gatherBatch", time.Second, time.Millisecond, 40, 3, 0, true},
		{"one caller that calls again when answered", time.Second, time.Millisecond, 1, 1, 0, false},
		{"two such callers, both waiting", time.Second, time.Millisecond, 2, 2, 0, false},
		{"two such callers, one waiting", time.Second, time.Millisecond, 2, 1, 0, true},
		{"calls less than two a gather", time.Second, 600 * time.Millisecond, 4, 1, 0, false},
		{"no rate known yet", time.Second, 0, 4, 1, 0, false},
		{"first call already gather old", time.Second, time.Millisecond, 4, 1, 2 * time.Second, false},
		{"off", 0, time.Millisecond, 4, 1, 0, false},
		{"off, negative", -1, time.Millisecond, 4, 1, 0, false},
		{"nothing queued", time.Second, time.Millisecond, 4, 0, 0, false},
	} {
		b := &batcher[int, int]{gather: c.gather, gap: c.gap, peak: c.peak, queue: queue(c.queued, c.age)}
		wait := b.gatherFor()
		if c.waits != (wait > 0) || wait > max(c.gather, 0) {
			t.Errorf("%s: waits %s; want a wait %v, at most %s", c.name, wait, c.waits, c.gather)
		}
	}
}

// TestBatchGatherWakes checks that a gathering batch goes as soon as the
// queue holds as many calls as were in flight, not when its time is up,
// and takes them all in one statement.
func TestBatchGatherWakes(t *testing.T) {
	g := newGatherProbe(time.Hour)
	g.busy(4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			c, err := g.do(context.Background(), i)
			if err != nil || !c.decided || c.r != i {
				t.Errorf("call %d: %+v, %v", i, c, err)
			}
		})
		if i == 0 { // the batch is gathering before the others come
			g.waitFor(t, "the first call's batch gathering", func() bool { return g.wake != nil })
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the gathering batch did not go when the queue held four calls")
	}
	if got := g.got(); len(got) != 1 || len(got[0]) != 4 {
		t.Errorf("batches %v; want one of the four calls", got)
	}
}

// TestBatchGatherOneCaller checks that a caller that calls again only once
// answered never waits for a batch, however fast it calls: nobody else is
// coming.
func TestBatchGatherOneCaller(t *testing.T) {
	g := newGatherProbe(time.Hour)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			if c, err := g.do(context.Background(), i); err != nil || c.r != i {
				t.Errorf("call %d: %+v, %v", i, c, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a call of one caller waited for a batch")
	}
	if got := g.got(); len(got) != 200 {
		t.Errorf("%d batches; want 200, one a call", len(got))
	}
	g.batcher.mu.Lock()
	defer g.batcher.mu.Unlock()
	if g.gap <= 0 || g.gap > g.gather/2 {
		t.Errorf("gap %s after 200 calls back to back; want the rate at which a batch would gather", g.gap)
	}
}

// TestBatchGatherTimesOut checks that a batch that gathers in vain goes
// when its first call is gather old.
func TestBatchGatherTimesOut(t *testing.T) {
	const gather = 50 * time.Millisecond
	g := newGatherProbe(gather)
	g.busy(4)
	start := time.Now()
	c, err := g.do(context.Background(), 7)
	if err != nil || c.r != 7 {
		t.Fatalf("call: %+v, %v", c, err)
	}
	if took := time.Since(start); took < gather {
		t.Errorf("answered after %s; want the batch to gather for %s first", took, gather)
	}
	if got := g.got(); len(got) != 1 || len(got[0]) != 1 {
		t.Errorf("batches %v; want one of the one call", got)
	}
}

// TestBatchGatherCancel checks that a call whose context ends while its
// batch gathers leaves the queue unwritten, as a call waiting for a
// statement does.
func TestBatchGatherCancel(t *testing.T) {
	g := newGatherProbe(100 * time.Millisecond)
	g.busy(4)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, 1)
		errc <- err
	}()
	g.waitFor(t, "the call's batch gathering", func() bool { return g.wake != nil })
	cancel()
	if err := <-errc; !errors.Is(err, lapse.ErrStoreUnavailable) {
		t.Errorf("canceled call: %v; want lapse.ErrStoreUnavailable", err)
	}
	g.waitFor(t, "the batcher's loop ending", func() bool { return g.running == 0 })
	if got := g.got(); len(got) != 0 {
		t.Errorf("batches %v; want none: the only call left", got)
	}
}

// TestBatchGatherConfig checks that Config.BatchGather reaches every batch
// of the Store's: zero is the default, negative is off.
func TestBatchGatherConfig(t *testing.T) {
	dsn := testenv.PostgresSchema(t)
	for _, c := range []struct {
		set, want time.Duration
	}{{0, DefaultBatchGather}, {-1, -1}, {3 * time.Millisecond, 3 * time.Millisecond}} {
		s, err := Open(context.Background(), dsn, Config{MaxConns: 2, BatchGather: c.set})
		if err != nil {
			t.Fatal(err)
		}
		got := []time.Duration{s.payments.gather, s.orderReads.gather, s.keyReads.gather, s.orderCreates.gather}
		s.Close()
		for _, g := range got {
			if g != c.want {
				t.Errorf("BatchGather %s: the batches gather %v; want %s each", c.set, got, c.want)
				break
			}
		}
	}
}
