package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
	"github.com/lapsehq/lapse/sqlite"
)

var lagT0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

func TestLagBounds(t *testing.T) {
	if len(lagBounds)+1 != lagBins {
		t.Fatalf("%d bounds, %d bins", len(lagBounds), lagBins)
	}
	for i := 1; i < len(lagBounds); i++ {
		if r := float64(lagBounds[i]) / float64(lagBounds[i-1]); r <= 1 || r > 1.28 && i < len(lagBounds)-1 {
			t.Errorf("bounds %v, %v: ratio %.3f", lagBounds[i-1], lagBounds[i], r)
		}
	}
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second} {
		if b := lagBin(d); lagBounds[b-1] != d {
			t.Errorf("%v is not a bound: it falls in bin %d from %v", d, b, lagBounds[b-1])
		}
	}
	for d, want := range map[time.Duration]int{0: 0, 99 * time.Microsecond: 0, 100 * time.Microsecond: 1, 1e14: lagBins - 1, 1e15: lagBins - 1} {
		if got := lagBin(d); got != want {
			t.Errorf("lagBin(%v) = %d, want %d", d, got, want)
		}
	}
}

// sameBin reports whether got lies in the bin of want.
func sameBin(got, want time.Duration) bool {
	return lagBin(got) == lagBin(want) || got == lagBounds[lagBin(want)]
}

func TestLagWindowQuantiles(t *testing.T) {
	t.Parallel()
	t.Run("empty", func(t *testing.T) {
		var w lagWindow
		if s := w.summary(lagT0, time.Hour); s.Count != 0 || s.P50 != 0 || s.P99 != 0 || s.Max != 0 || s.Bins != nil || s.Window != time.Hour {
			t.Errorf("empty window: %+v", s)
		}
	})
	t.Run("one value", func(t *testing.T) {
		var w lagWindow
		for range 7 {
			w.record(lagT0, 42*time.Millisecond)
		}
		s := w.summary(lagT0, time.Hour)
		if s.Count != 7 || s.P50 != 42*time.Millisecond || s.P99 != 42*time.Millisecond || s.Max != 42*time.Millisecond {
			t.Errorf("seven of 42ms: %+v", s)
		}
		if len(s.Bins) != 1 || s.Bins[0] != (LagBin{From: 40 * time.Millisecond, To: 50 * time.Millisecond, Count: 7}) {
			t.Errorf("bins %+v", s.Bins)
		}
	})
	t.Run("uniform", func(t *testing.T) {
		var w lagWindow
		for i := 1000; i >= 1; i-- { // 1ms … 1s, spread over ten minutes
			w.record(lagT0.Add(time.Duration(i%10)*time.Minute), time.Duration(i)*time.Millisecond)
		}
		s := w.summary(lagT0.Add(10*time.Minute), time.Hour)
		if s.Count != 1000 || s.Max != time.Second {
			t.Fatalf("count %d, max %v", s.Count, s.Max)
		}
		for _, q := range []struct {
			name      string
			got, want time.Duration
		}{{"p50", s.P50, 500 * time.Millisecond}, {"p99", s.P99, 990 * time.Millisecond}} {
			if !sameBin(q.got, q.want) || q.got < q.want*99/100 || q.got > q.want*101/100 {
				t.Errorf("%s = %v, want about %v", q.name, q.got, q.want)
			}
		}
		var n int64
		for i, b := range s.Bins {
			n += b.Count
			if i > 0 && b.From != s.Bins[i-1].To {
				t.Errorf("bin %d starts at %v, the one before ends at %v", i, b.From, s.Bins[i-1].To)
			}
		}
		if n != 1000 || s.Bins[0].From != time.Millisecond || s.Bins[len(s.Bins)-1].To != 1250*time.Millisecond {
			t.Errorf("bins %+v hold %d", s.Bins, n)
		}
	})
	t.Run("skewed", func(t *testing.T) {
		var w lagWindow
		for range 98 {
			w.record(lagT0, 10*time.Millisecond)
		}
		w.record(lagT0, 5*time.Second)
		w.record(lagT0, 5*time.Second)
		w.record(lagT0, -time.Second) // a clock that went back: zero
		s := w.summary(lagT0, time.Hour)
		if s.Count != 101 || s.Max != 5*time.Second || s.P99 != 5*time.Second || !sameBin(s.P50, 10*time.Millisecond) {
			t.Errorf("98 of 10ms, 2 of 5s, one of 0: %+v", s)
		}
		if s.Bins[0] != (LagBin{From: 0, To: 100 * time.Microsecond, Count: 1}) {
			t.Errorf("first bin %+v", s.Bins[0])
		}
	})
	t.Run("beyond the bounds", func(t *testing.T) {
		var w lagWindow
		w.record(lagT0, 30*time.Hour)
		s := w.summary(lagT0, time.Minute)
		if s.P50 != 30*time.Hour || s.Max != 30*time.Hour || len(s.Bins) != 1 || s.Bins[0].To != 0 || s.Bins[0].From != 1e14 {
			t.Errorf("30h: %+v", s)
		}
	})
}

func TestLagWindowExpiry(t *testing.T) {
	t.Parallel()
	var w lagWindow
	w.record(lagT0, time.Second)
	w.record(lagT0.Add(59*time.Second), 3*time.Second) // the same minute
	w.record(lagT0.Add(30*time.Minute), 2*time.Second)
	w.record(lagT0.Add(2*time.Hour), 5*time.Second)
	count := func(now time.Time, window time.Duration) int64 { return w.summary(now, window).Count }

	if n := count(lagT0.Add(59*time.Minute+59*time.Second), time.Hour); n != 3 {
		t.Errorf("an hour, 59m59s on: %d closes, want 3", n)
	}
	if s := w.summary(lagT0.Add(time.Hour), time.Hour); s.Count != 1 || s.Max != 2*time.Second {
		t.Errorf("an hour, 60m on: %+v, want the close at 30m alone", s)
	}
	if s := w.summary(lagT0.Add(2*time.Hour), time.Hour); s.Count != 1 || s.Max != 5*time.Second {
		t.Errorf("an hour, 2h on: %+v", s)
	}
	if n := count(lagT0.Add(2*time.Hour), 24*time.Hour); n != 4 {
		t.Errorf("a day: %d closes, want 4", n)
	}
	if n := count(lagT0.Add(2*time.Hour), 48*time.Hour); n != 4 {
		t.Errorf("two days (as one): %d closes, want 4", n)
	}
	if n := count(lagT0.Add(-time.Minute), 24*time.Hour); n != 0 {
		t.Errorf("a day, before any close: %d closes", n)
	}
	if n := count(lagT0.Add(24*time.Hour-time.Second), 24*time.Hour); n != 4 {
		t.Errorf("a day, 23h59m59s on: %d closes, want 4", n)
	}
	if n := count(lagT0.Add(24*time.Hour), 24*time.Hour); n != 2 {
		t.Errorf("a day, 24h on: %d closes, want 2", n)
	}
	// A day on, the first minute's slot takes new closes and drops the old.
	w.record(lagT0.Add(24*time.Hour+time.Second), 7*time.Second)
	if s := w.summary(lagT0.Add(24*time.Hour+time.Second), time.Minute); s.Count != 1 || s.Max != 7*time.Second || s.P50 != 7*time.Second {
		t.Errorf("the slot reused: %+v", s)
	}
	if s := w.summary(lagT0.Add(time.Minute), 90*time.Second); s.Window != 2*time.Minute || s.Count != 0 {
		t.Errorf("90s, rounded up, after the slot was reused: %+v", s)
	}
	if s := w.summary(lagT0, 0); s.Count != 0 || s.Window != 0 {
		t.Errorf("no window: %+v", s)
	}
}

// TestCloseLagThroughClaimer: the deadlines the claimer fires are in the
// window, with their lags.
func TestCloseLagThroughClaimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lapse.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clk := lapse.NewManualClock(lagT0)
	e, err := New(s, flows.Builtin(), Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		req := &lapse.OrderCreate{OrderNo: fmt.Sprintf("LAG-%d", i), Flow: "checkout", UserID: "u1", Amount: 1000, Currency: "CNY",
			Items: []lapse.Item{{SKU: "tea", Qty: 1}}, TTL: time.Duration(i+1) * time.Second}
		if _, _, err := e.CreateOrder(ctx, req, Actor{FiredBy: lapse.FiredByAPI, Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Set(lagT0.Add(5 * time.Second))
	if n, err := NewClaimer(e, ClaimerConfig{}).RunOnce(ctx); n != 4 || err != nil {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	// Lags 4s, 3s, 2s and 1s.
	got := e.CloseLag(time.Hour)
	if got.Count != 4 || got.Max != 4*time.Second || got.P99 != 4*time.Second || !sameBin(got.P50, 2*time.Second) {
		t.Errorf("CloseLag(1h) = %+v", got)
	}
	clk.Set(lagT0.Add(time.Hour + time.Minute))
	if got := e.CloseLag(time.Hour); got.Count != 0 {
		t.Errorf("an hour later, CloseLag(1h) = %+v", got)
	}
	if got := e.CloseLag(24 * time.Hour); got.Count != 4 {
		t.Errorf("an hour later, CloseLag(24h) = %+v", got)
	}
}
