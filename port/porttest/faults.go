package porttest

import (
	"fmt"
	"time"
)

// Faults are the failures a StockService injects. The rates apply to
// deliveries (POST) only; Down and Latency apply to queries too. Each
// delivery draws one number from the seeded source and falls in at most one
// of FailRate, ApplyThenFailRate and HangRate, in that order, so their sum
// must not exceed 1.
type Faults struct {
	// FailRate is the share of deliveries answered 500 without being
	// applied.
	FailRate float64
	// ApplyThenFailRate is the share applied and then answered 500: a lost
	// answer. The caller retries and is answered 409.
	ApplyThenFailRate float64
	// HangRate is the share held, without an answer, until the client gives
	// up; then the connection is dropped by panicking with
	// http.ErrAbortHandler, as net/http expects (under an
	// httptest.ResponseRecorder that panic reaches the caller).
	HangRate float64
	// HangApplies makes a held delivery apply before it hangs, so that only
	// a query-back can tell the caller what happened.
	HangApplies bool
	// Down answers every request 503 at once, without applying anything, as
	// a load balancer with no healthy backend does.
	Down bool
	// Latency delays every request before it is handled.
	Latency time.Duration
}

func (f Faults) validate() error {
	for _, r := range []float64{f.FailRate, f.ApplyThenFailRate, f.HangRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("porttest: fault rates are in [0, 1], got %v", r)
		}
	}
	if sum := f.FailRate + f.ApplyThenFailRate + f.HangRate; sum > 1 {
		return fmt.Errorf("porttest: fault rates add up to %v, more than 1", sum)
	}
	if f.Latency < 0 {
		return fmt.Errorf("porttest: negative latency %v", f.Latency)
	}
	return nil
}

// fault is what one delivery suffers.
type fault int

const (
	noFault fault = iota
	failFault
	applyThenFailFault
	hangFault
)

// pick places a number drawn from [0, 1) among the rates.
func (f Faults) pick(x float64) fault {
	switch {
	case x < f.FailRate:
		return failFault
	case x < f.FailRate+f.ApplyThenFailRate:
		return applyThenFailFault
	case x < f.FailRate+f.ApplyThenFailRate+f.HangRate:
		return hangFault
	}
	return noFault
}

// SetFaults replaces the faults; requests that arrive from now on suffer
// them. It panics on rates outside [0, 1] or adding up to more than 1.
func (s *StockService) SetFaults(f Faults) {
	if err := f.validate(); err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the faults in force.
func (s *StockService) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Pause holds every request that arrives from now on, counted in flight,
// until Resume, until its client gives up, or until Close. It makes a slow
// service whose pace the test controls.
func (s *StockService) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused == nil {
		s.paused = make(chan struct{})
	}
}

// Resume lets the requests held by Pause go on.
func (s *StockService) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
}
