package redis_test

import (
	"testing"
	"time"

	"github.com/lapsehq/lapse/engine"
)

// BenchmarkClaim claims 500 due members and marks them done, per op, as a
// trigger loop does with each batch; adding them is not timed.
func BenchmarkClaim(b *testing.B) {
	s := newShared(b)
	tr := s.trigger(b)
	const batch = 500
	due := make([]engine.TriggerDue, batch)
	for i := range due {
		due[i] = engine.TriggerDue{OrderID: 10_000_000 + int64(i), At: base.Add(time.Duration(i) * time.Microsecond)}
	}
	now := base.Add(time.Second)
	for b.Loop() {
		b.StopTimer()
		if err := tr.Add(b.Context(), due); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		got, _, err := tr.Claim(b.Context(), now, time.Minute, batch)
		if err != nil || len(got) != batch {
			b.Fatalf("Claim = %d members, %v", len(got), err)
		}
		if err := tr.Done(b.Context(), got); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "members/s")
}
