package rabbitmq_test

import (
	"context"
	"net/url"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/faultproxy"
	"github.com/lapsehq/lapse/rabbitmq"
)

// proxied returns a config whose traffic goes through a fault proxy to the
// real broker, the proxy, and a direct connection to the broker.
func proxied(tb testing.TB) (rabbitmq.Config, *faultproxy.Proxy, *broker) {
	tb.Helper()
	cfg, b := testConfig(tb)
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
	return cfg, p, b
}

// checkOncePerIDAfterDedup fails tb unless the queue holds every sent event,
// and nothing else, once its messages are deduplicated by MessageId as a
// consumer would; it returns how many duplicates the consumer dropped.
func checkOncePerIDAfterDedup(tb testing.TB, b *broker, cfg rabbitmq.Config, sent []*lapse.Delivery) int {
	tb.Helper()
	want := map[string]string{}
	for _, d := range sent {
		want[d.Event.ID] = d.Event.Type
	}
	seen := map[string]int{}
	dups := 0
	for _, m := range b.read(cfg.Queue) {
		if typ, ok := want[m.MessageId]; !ok || m.RoutingKey != typ {
			tb.Errorf("message %q with key %s: not an event that was sent", m.MessageId, m.RoutingKey)
		}
		if seen[m.MessageId]++; seen[m.MessageId] > 1 {
			dups++
		}
	}
	for id := range want {
		if seen[id] == 0 {
			tb.Errorf("event %s is not in the queue", id)
		}
	}
	return dups
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

// TestOutageLosesNothing takes the broker away for OutageLength while events
// keep coming, as the delivery workers would see it: every attempt during the
// outage fails within the confirm timeout, every event is retried until the
// broker is back, and the queue ends up with every event, once per
// MessageId after deduplication.
func TestOutageLosesNothing(t *testing.T) {
	t.Parallel()
	cfg, p, b := proxied(t)
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
	checkAttempts(t, attempts, cfg.ConfirmTimeout, downAt, upAt)
	dups := checkOncePerIDAfterDedup(t, b, cfg, sent)
	slow := attempts.Slowest()
	t.Logf("outage %v: %d events, %d attempts, %d failed, slowest %v, %d duplicates for consumers to drop; back %v after the broker; drained %v after it",
		outage, len(sent), len(attempts), attempts.Failed(), slow.End.Sub(slow.Start), dups, attempts.FirstSuccessAfter(upAt), drained)
}

// TestResetMidPublishRetries resets every connection while publishes are in
// flight (the proxy's latency keeps some in flight at all times): those
// attempts fail and are retried, none is lost, and the sink keeps working.
func TestResetMidPublishRetries(t *testing.T) {
	t.Parallel()
	cfg, p, b := proxied(t)
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
	dups := checkOncePerIDAfterDedup(t, b, cfg, sent)
	t.Logf("5 resets: %d attempts for %d events, %d failed, %d duplicates; e.g. %v",
		len(attempts), len(sent), attempts.Failed(), dups, attempts.FirstErr())
}

// TestBlackholeFailsWithinTimeout stalls the link without closing it, which
// the client cannot tell from a slow broker: Deliver gives up at its
// timeout, and the event is delivered once the link heals.
func TestBlackholeFailsWithinTimeout(t *testing.T) {
	t.Parallel()
	cfg, p, b := proxied(t)
	cfg.ConfirmTimeout = time.Second
	s := newSink(t, cfg)
	d := delivery("order.closed", 1)

	p.Blackhole()
	start := time.Now()
	err := s.Deliver(context.Background(), d)
	if took := time.Since(start); err == nil || took > cfg.ConfirmTimeout+500*time.Millisecond {
		t.Fatalf("Deliver on a stalled link = %v after %v; want an error within %v", err, took, cfg.ConfirmTimeout)
	}
	// A second attempt, on another channel of the same stalled connection,
	// must not hang either.
	start = time.Now()
	err = s.Deliver(context.Background(), d)
	if took := time.Since(start); err == nil || took > cfg.ConfirmTimeout+500*time.Millisecond {
		t.Fatalf("second Deliver on a stalled link = %v after %v; want an error within %v", err, took, cfg.ConfirmTimeout)
	}
	p.Up()
	deliverEventually(t, s, d, 30*time.Second)
	checkOncePerIDAfterDedup(t, b, cfg, []*lapse.Delivery{d})
}

// deliverEventually retries d until it is delivered, failing tb after within.
func deliverEventually(tb testing.TB, s *rabbitmq.Sink, d *lapse.Delivery, within time.Duration) {
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

// TestNewWhileBrokerDown starts the sink while the broker cannot be reached:
// New succeeds, Deliver fails fast until the broker is back, and then the
// topology is declared and the event published.
func TestNewWhileBrokerDown(t *testing.T) {
	t.Parallel()
	cfg, p, b := proxied(t)
	p.Down()
	start := time.Now()
	s := newSink(t, cfg)
	if took := time.Since(start); took > cfg.ConfirmTimeout {
		t.Fatalf("New took %v with the broker down", took)
	}
	d := delivery("order.created", 1)
	start = time.Now()
	if err := s.Deliver(context.Background(), d); err == nil {
		t.Fatalf("Deliver succeeded with the broker down")
	} else if took := time.Since(start); took > time.Second {
		t.Fatalf("Deliver took %v to fail with the broker down: %v", took, err)
	}
	p.Up()
	deliverEventually(t, s, d, 30*time.Second)
	checkOncePerIDAfterDedup(t, b, cfg, []*lapse.Delivery{d})
}

// TestCloseLeavesNoGoroutines runs alone (not in parallel) so that the
// process's goroutine count is the sink's doing. It covers the goroutines a
// connection starts, the ones that close abandoned channels, and redials.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	cfg, p, _ := proxied(t)
	cfg.ConfirmTimeout = 500 * time.Millisecond
	before := runtime.NumGoroutine()
	s, err := rabbitmq.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Deliver(context.Background(), delivery("order.closed", 1)); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	p.ResetPeers()
	_ = s.Deliver(context.Background(), delivery("order.closed", 2))
	deliverEventually(t, s, delivery("order.closed", 3), 10*time.Second)
	p.Blackhole() // leaves an abandoned channel whose close cannot finish
	_ = s.Deliver(context.Background(), delivery("order.closed", 4))
	if err := s.Close(); err != nil {
		t.Logf("Close on a stalled link: %v", err)
	}
	p.Up()
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
