package nats_test

import (
	"context"
	"net/url"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/faultproxy"
	"github.com/lapsehq/lapse/nats"
)

// proxied returns a config whose traffic goes through a fault proxy to the
// real server, the proxy, and a handle on the real server.
func proxied(tb testing.TB) (nats.Config, *faultproxy.Proxy, jetstream.JetStream) {
	tb.Helper()
	cfg, js := testConfig(tb)
	u, err := url.Parse(cfg.URL)
	if err != nil {
		tb.Fatalf("parse %s: %v", cfg.URL, err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		tb.Fatalf("faultproxy: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	cfg.URL = viaProxy(tb, cfg.URL, p.Addr())
	return cfg, p, js
}

// checkOncePerID fails tb unless the stream holds exactly one message per
// sent event id, with the right subject.
func checkOncePerID(tb testing.TB, js jetstream.JetStream, cfg nats.Config, sent []*lapse.Delivery) {
	tb.Helper()
	want := map[string]string{}
	for _, d := range sent {
		want[d.Event.ID] = cfg.Subject + "." + d.Event.Type
	}
	seen := map[string]int{}
	for _, m := range readStream(tb, js, cfg.Stream) {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		seen[id]++
		if subj, ok := want[id]; !ok || m.Subject() != subj {
			tb.Errorf("message %q on %s: not an event that was sent there", id, m.Subject())
		}
	}
	for id := range want {
		if seen[id] != 1 {
			tb.Errorf("event %s is in the stream %d times, want once", id, seen[id])
		}
	}
	if len(seen) != len(want) {
		tb.Errorf("%d distinct ids in the stream, want %d", len(seen), len(want))
	}
}

// TestOutageLosesNothing takes the server away for OutageLength while events
// keep coming, as the delivery workers would see it: every attempt during the
// outage fails within the publish timeout, every event is retried until the
// server is back, and the stream ends up with each event exactly once.
func TestOutageLosesNothing(t *testing.T) {
	t.Parallel()
	cfg, p, js := proxied(t)
	s := newSink(t, cfg)
	outage := faultproxy.OutageLength()
	ctx, cancel := context.WithTimeout(context.Background(), outage+2*time.Minute)
	defer cancel()

	r := faultproxy.NewRedeliverer(s, 4, 100*time.Millisecond, 2*time.Second)
	defer r.Stop()
	stop := r.SubmitEvery(50*time.Millisecond, func(n int) *lapse.Delivery { return delivery("order.closed", n) })
	if err := r.WaitDelivered(ctx, 20); err != nil {
		t.Fatalf("before the outage: %v", err)
	}

	downAt := time.Now()
	p.Down()
	time.Sleep(outage) // the outage itself: events keep coming and failing
	upAt := time.Now()
	p.Up()
	if err := r.WaitDelivered(ctx, r.Delivered()+20); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	sent := stop()
	if err := r.WaitIdle(ctx); err != nil {
		t.Fatalf("draining after the outage: %v", err)
	}
	drained := time.Since(upAt)

	attempts := r.Attempts()
	checkAttempts(t, attempts, cfg.PublishTimeout, downAt, upAt)
	checkOncePerID(t, js, cfg, sent)
	slow := attempts.Slowest()
	t.Logf("outage %v: %d events, %d attempts, %d failed, slowest %v; back %v after the server; drained %v after it",
		outage, len(sent), len(attempts), attempts.Failed(), slow.End.Sub(slow.Start), attempts.FirstSuccessAfter(upAt), drained)
}

// checkAttempts fails t when an attempt took longer than its timeout (plus
// scheduling slack), or when one that ran wholly inside the outage (after a
// grace for attempts in flight when it began) did not fail.
func checkAttempts(t *testing.T, attempts faultproxy.Attempts, timeout time.Duration, downAt, upAt time.Time) {
	t.Helper()
	if slow := attempts.Slowest(); slow.End.Sub(slow.Start) > timeout+time.Second {
		t.Errorf("an attempt took %v, past its timeout of %v: %v", slow.End.Sub(slow.Start), timeout, slow.Err)
	}
	during := attempts.Within(downAt.Add(timeout), upAt)
	if len(during) == 0 {
		t.Errorf("no attempt ran during the outage")
	}
	for _, a := range during {
		if a.Err == nil {
			t.Errorf("event %s was delivered during the outage", a.EventID)
		}
	}
}

// TestResetMidPublishRetries resets every connection while publishes are in
// flight (the proxy's latency keeps some in flight at all times): those
// attempts fail and are retried, none is lost or stored twice, and the sink
// keeps working.
func TestResetMidPublishRetries(t *testing.T) {
	t.Parallel()
	cfg, p, js := proxied(t)
	s := newSink(t, cfg)
	p.SetLatency(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	r := faultproxy.NewRedeliverer(s, 8, 50*time.Millisecond, 500*time.Millisecond)
	defer r.Stop()
	var sent []*lapse.Delivery
	for i := range 200 {
		d := delivery("order.paid", i)
		sent = append(sent, d)
		r.Submit(d)
	}
	for i := 1; i <= 5; i++ {
		if err := r.WaitDelivered(ctx, 30*i); err != nil {
			t.Fatalf("before reset %d: %v", i, err)
		}
		p.ResetPeers()
	}
	if err := r.WaitIdle(ctx); err != nil {
		t.Fatalf("after the resets: %v", err)
	}
	attempts := r.Attempts()
	if attempts.Failed() == 0 {
		t.Fatalf("no attempt failed across 5 resets with publishes in flight")
	}
	checkOncePerID(t, js, cfg, sent)
	t.Logf("5 resets: %d attempts for %d events, %d failed, e.g. %v", len(attempts), len(sent), attempts.Failed(), attempts.FirstErr())
}

// TestBlackholeFailsWithinTimeout stalls the link without closing it, which
// the client cannot tell from a slow server: Deliver gives up at its timeout,
// and the retry after the link heals does not store the event twice even
// though the stalled publish reaches the server too.
func TestBlackholeFailsWithinTimeout(t *testing.T) {
	t.Parallel()
	cfg, p, js := proxied(t)
	cfg.PublishTimeout = time.Second
	s := newSink(t, cfg)
	d := delivery("order.closed", 1)

	p.Blackhole()
	start := time.Now()
	err := s.Deliver(context.Background(), d)
	if took := time.Since(start); err == nil || took > cfg.PublishTimeout+500*time.Millisecond {
		t.Fatalf("Deliver on a stalled link = %v after %v; want an error within %v", err, took, cfg.PublishTimeout)
	}
	p.Up()
	deliverEventually(t, s, d, 30*time.Second)
	checkOncePerID(t, js, cfg, []*lapse.Delivery{d})
}

// deliverEventually retries d until it is delivered, failing tb after within.
func deliverEventually(tb testing.TB, s *nats.Sink, d *lapse.Delivery, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		err := s.Deliver(context.Background(), d)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not delivered within %v: %v", within, err)
		}
		time.Sleep(100 * time.Millisecond) // a retry schedule's wait
	}
}

// TestNewWhileServerDown starts the sink while no server is reachable: New
// succeeds, Deliver fails fast until the server is back, and then the stream
// is set up and the event published.
func TestNewWhileServerDown(t *testing.T) {
	t.Parallel()
	cfg, p, js := proxied(t)
	p.Down()
	start := time.Now()
	s := newSink(t, cfg)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("New took %v with the server down", took)
	}
	d := delivery("order.created", 1)
	start = time.Now()
	if err := s.Deliver(context.Background(), d); err == nil {
		t.Fatalf("Deliver succeeded with the server down")
	} else if took := time.Since(start); took > time.Second {
		t.Fatalf("Deliver took %v to fail with the server down: %v", took, err)
	}
	p.Up()
	deliverEventually(t, s, d, 30*time.Second)
	checkOncePerID(t, js, cfg, []*lapse.Delivery{d})
}

// TestCloseLeavesNoGoroutines runs alone (not in parallel) so that the
// process's goroutine count is the sink's doing.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	cfg, p, _ := proxied(t)
	before := runtime.NumGoroutine()
	s, err := nats.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Deliver(context.Background(), delivery("order.closed", 1)); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	for i, err := range s.DeliverMany(context.Background(), []*lapse.Delivery{delivery("order.closed", 3), delivery("order.closed", 4)}) {
		if err != nil {
			t.Fatalf("DeliverMany, delivery %d: %v", i, err)
		}
	}
	p.ResetPeers()
	_ = s.Deliver(context.Background(), delivery("order.closed", 2))
	_ = s.DeliverMany(context.Background(), []*lapse.Delivery{delivery("order.closed", 5)})
	_ = s.Close()
	waitGoroutines(t, before)
}

// waitGoroutines waits for the goroutine count to fall back to n, and dumps
// the goroutines if it does not.
func waitGoroutines(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			tb.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), n, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
