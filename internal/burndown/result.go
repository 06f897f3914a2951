package burndown

import (
	"math"
	"slices"
	"time"
)

// Result is what a Run measured.
type Result struct {
	// The workload, defaults applied.
	Orders, NotDue, Subscribers, Batch, Workers int
	// Loaded is how many orders were loaded (due and not), in Load: not part
	// of the figures.
	Loaded int
	Load   time.Duration
	// Closed is how many orders RunOnce closed, in Elapsed.
	Closed  int
	Elapsed time.Duration
	// Lag is the distribution of closed_at − deadline_at over the closed
	// orders, as read back from the store.
	Lag Lag
	// CPU is what the close used (see CPUMeter).
	CPU CPU
	// WALBytes is the WAL the server wrote during the run (PostgreSQL with
	// Config.Postgres); -1 when not measured.
	WALBytes int64
	// Settings are the server's settings that bear on the figures, in a
	// fixed order (PostgreSQL with Config.Postgres).
	Settings []Setting
}

// PerSecond is closes per second.
func (r *Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Closed) / r.Elapsed.Seconds()
}

// WALPerClose is the WAL bytes per close, or -1 when not measured.
func (r *Result) WALPerClose() float64 {
	if r.WALBytes < 0 || r.Closed == 0 {
		return -1
	}
	return float64(r.WALBytes) / float64(r.Closed)
}

// Lag is a distribution of close lags, by the nearest-rank method: P99 is
// the lag that 99% of the closes were at or below.
type Lag struct {
	P50, P99, P999, Max time.Duration
}

// lagOf returns the distribution of lags, which it sorts.
func lagOf(lags []time.Duration) Lag {
	if len(lags) == 0 {
		return Lag{}
	}
	slices.Sort(lags)
	rank := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(lags)))) - 1
		return lags[min(max(i, 0), len(lags)-1)]
	}
	return Lag{P50: rank(0.50), P99: rank(0.99), P999: rank(0.999), Max: lags[len(lags)-1]}
}

// Setting is a server setting as the server shows it (128MB, on).
type Setting struct {
	Name, Value string
}
