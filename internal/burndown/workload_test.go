package burndown

import (
	"testing"
	"time"
)

// TestWorkloadLayout: every due and every not-due order is loaded once,
// interleaved, every due deadline before the run starts and every other a
// day after it.
func TestWorkloadLayout(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC)
	for _, ratio := range []int{0, 1, 4} {
		w := &workload{due: 50, ratio: ratio, at: at}
		seen := map[string]bool{}
		due := 0
		for k := range w.total() {
			p := w.params(k)
			o := p.Order
			if seen[o.OrderNo] {
				t.Fatalf("ratio %d: %s loaded twice", ratio, o.OrderNo)
			}
			seen[o.OrderNo] = true
			if i, ok := w.dueIndex(o.OrderNo); ok {
				due++
				if !o.DeadlineAt.Equal(w.dueDeadline(i)) || !o.DeadlineAt.Before(at) {
					t.Errorf("due %s: deadline %v", o.OrderNo, o.DeadlineAt)
				}
			} else if !o.DeadlineAt.After(at.Add(24 * time.Hour).Add(-time.Nanosecond)) {
				t.Errorf("not due %s: deadline %v", o.OrderNo, o.DeadlineAt)
			}
			if len(p.Outbox) != 1 || p.Log.Version != 1 || !o.CreatedAt.Before(*o.DeadlineAt) {
				t.Errorf("%s: %d outbox rows, log version %d, created %v", o.OrderNo, len(p.Outbox), p.Log.Version, o.CreatedAt)
			}
		}
		if due != 50 || len(seen) != 50*(ratio+1) {
			t.Errorf("ratio %d: %d due of %d, want 50 of %d", ratio, due, len(seen), 50*(ratio+1))
		}
		if !w.dueDeadline(49).Equal(at.Add(-time.Microsecond)) {
			t.Errorf("the last due deadline is %v, want 1µs before %v", w.dueDeadline(49), at)
		}
	}
}

func TestLagNearestRank(t *testing.T) {
	t.Parallel()
	var lags []time.Duration
	for i := 1000; i >= 1; i-- {
		lags = append(lags, time.Duration(i)*time.Millisecond)
	}
	got := lagOf(lags)
	want := Lag{P50: 500 * time.Millisecond, P99: 990 * time.Millisecond, P999: 999 * time.Millisecond, Max: time.Second}
	if got != want {
		t.Errorf("lagOf(1..1000 ms) = %+v, want %+v", got, want)
	}
	if got := lagOf([]time.Duration{7}); got != (Lag{7, 7, 7, 7}) {
		t.Errorf("lagOf one lag = %+v", got)
	}
	if got := lagOf(nil); got != (Lag{}) {
		t.Errorf("lagOf none = %+v", got)
	}
}
