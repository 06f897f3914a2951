package engine

import (
	"slices"
	"sync"
	"time"
)

// The close lags the engine keeps in memory, beside the Prometheus
// histogram, so that the console can show their quantiles without a
// Prometheus server. They are this process's closes only: each process of a
// deployment keeps its own window.

// LagSummary is what the close lags of a window come to, as this process
// saw them. The quantiles are estimated from a log-scale histogram: each lies
// in the same bin as the true quantile (bins are at most 28% wide) and
// between the least and the greatest lag. Max is exact.
type LagSummary struct {
	Window   time.Duration // as asked, rounded up to whole minutes, at most LagWindow
	Count    int64         // closes in the window
	P50, P99 time.Duration
	Max      time.Duration
	// Bins are the histogram, from the first bin that holds a close to the
	// last; none when Count is zero.
	Bins []LagBin
}

// LagBin is one bin of a LagSummary's histogram: Count closes whose lag was
// at least From and less than To. The last bin has no upper bound: its To
// is zero.
type LagBin struct {
	From, To time.Duration
	Count    int64
}

// LagWindow is how far back CloseLag sees.
const LagWindow = 24 * time.Hour

// CloseLag summarises the close lags (close time - deadline) of the
// deadlines this process fired over the last window, as far back as
// LagWindow. The window is counted in whole minutes of the engine's clock,
// the current minute included: an hour is the current minute and the 59
// before it.
func (e *Engine) CloseLag(window time.Duration) LagSummary {
	return e.metrics.lags.summary(e.clock.Now(), window)
}

// closed records the close of an order of flow whose deadline was deadline,
// at now: in the Prometheus histogram and in the window.
func (m *metrics) closed(flow string, now, deadline time.Time) {
	lag := now.Sub(deadline)
	m.closeLag.WithLabelValues(flow).Observe(lag.Seconds())
	m.lags.record(now, lag)
}

// lagBounds are the upper bounds of the histogram's bins: ten to a decade
// (the R10 series, rounded so that 1, 2 and 5 of each decade are bounds),
// from 100 µs to 100,000 s. A lag below the first falls in the first bin,
// one at or above the last in an unbounded last bin.
var lagBounds = func() []time.Duration {
	var b []time.Duration
	for scale := time.Duration(1000); scale <= 1e11; scale *= 10 {
		for _, m := range []time.Duration{100, 125, 160, 200, 250, 315, 400, 500, 630, 800} {
			b = append(b, m*scale)
		}
	}
	return append(b, 1e14)
}()

// lagBins is the number of bins: one more than the bounds.
const lagBins = 92

// lagBin is the bin of a lag: the number of bounds at or below it.
func lagBin(d time.Duration) int {
	i, _ := slices.BinarySearchFunc(lagBounds, d, func(b, d time.Duration) int {
		if b <= d {
			return -1
		}
		return 1
	})
	return i
}

// lagMinute is one minute of the window.
type lagMinute struct {
	minute   int64 // since the Unix epoch; what the slot holds
	count    int64
	min, max time.Duration
	hist     [lagBins]uint32
}

// lagWindow holds the close lags of the last LagWindow, a slot per minute,
// each reused when its minute comes round again. A slot is allocated when
// a close first lands in it.
type lagWindow struct {
	mu    sync.Mutex
	slots [LagWindow / time.Minute]*lagMinute
}

func unixMinute(t time.Time) int64 {
	s := t.Unix()
	if s < 0 && s%60 != 0 {
		return s/60 - 1
	}
	return s / 60
}

// record adds a close at now with lag. A negative lag (a clock that moved
// back) counts as zero.
func (w *lagWindow) record(now time.Time, lag time.Duration) {
	lag = max(lag, 0)
	m := unixMinute(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	i := m % int64(len(w.slots))
	if i < 0 {
		i += int64(len(w.slots))
	}
	s := w.slots[i]
	if s == nil {
		s = &lagMinute{}
		w.slots[i] = s
	}
	if s.minute != m || s.count == 0 {
		*s = lagMinute{minute: m, min: lag, max: lag}
	}
	s.count++
	s.min, s.max = min(s.min, lag), max(s.max, lag)
	s.hist[lagBin(lag)]++
}

// summary sums the minutes of the window ending at now.
func (w *lagWindow) summary(now time.Time, window time.Duration) LagSummary {
	n := min(int64((window+time.Minute-1)/time.Minute), int64(len(w.slots)))
	out := LagSummary{Window: time.Duration(max(n, 0)) * time.Minute}
	if n <= 0 {
		return out
	}
	last := unixMinute(now)
	var hist [lagBins]int64
	var least time.Duration
	w.mu.Lock()
	for _, s := range w.slots {
		if s == nil || s.count == 0 || s.minute > last || s.minute <= last-n {
			continue
		}
		if out.Count == 0 || s.min < least {
			least = s.min
		}
		out.Count += s.count
		out.Max = max(out.Max, s.max)
		for b, c := range s.hist {
			hist[b] += int64(c)
		}
	}
	w.mu.Unlock()
	if out.Count == 0 {
		return out
	}
	out.P50 = lagQuantile(&hist, out.Count, 50, least, out.Max)
	out.P99 = lagQuantile(&hist, out.Count, 99, least, out.Max)
	first, end := 0, lagBins
	for hist[first] == 0 {
		first++
	}
	for hist[end-1] == 0 {
		end--
	}
	for b := first; b < end; b++ {
		bin := LagBin{Count: hist[b]}
		if b > 0 {
			bin.From = lagBounds[b-1]
		}
		if b < len(lagBounds) {
			bin.To = lagBounds[b]
		}
		out.Bins = append(out.Bins, bin)
	}
	return out
}

// lagQuantile estimates the pct-th percentile of count lags in hist, all
// between least and most: the lag of nearest rank, placed within its bin by
// linear interpolation, the bin narrowed to [least, most].
func lagQuantile(hist *[lagBins]int64, count, pct int64, least, most time.Duration) time.Duration {
	rank := max((pct*count+99)/100, 1)
	var below int64
	for b, c := range hist {
		if c == 0 || below+c < rank {
			below += c
			continue
		}
		lo, hi := least, most
		if b > 0 {
			lo = max(lo, lagBounds[b-1])
		}
		if b < len(lagBounds) {
			hi = min(hi, lagBounds[b])
		}
		return lo + time.Duration(float64(hi-lo)*float64(rank-below)/float64(c))
	}
	return most
}
