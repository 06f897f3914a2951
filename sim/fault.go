package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Fault kinds, as counted in a run's summary.
const (
	FaultBefore   = "db_fail"         // a statement failed; nothing was written
	FaultAfter    = "db_lost_commit"  // it ran (and committed), then the caller saw an error
	FaultCrash    = "crash"           // the process died at a store call: engine dropped, a new one started
	FaultRefuse   = "provider_refuse" // the provider refused for good
	FaultLost     = "provider_lost"   // the provider did the work, the answer was lost
	FaultDown     = "provider_down"   // the provider did not answer; nothing done
	FaultPortFail = "port_fail"       // the card issuer failed; nothing done
	FaultPortLost = "port_timeout"    // the card issuer did the work and timed out
	FaultDup      = "callback_dup"    // a provider callback was sent again
	FaultLate     = "callback_late"   // a provider callback waited before it was sent
)

// errInjected is the error of every injected fault, so that a step log can
// tell an injected failure from a real one.
var errInjected = errors.New("sim: injected fault")

// errCrashed is what a crashed process's store returns from then on: the
// process is gone and nothing it does reaches the database.
var errCrashed = errors.New("sim: the process crashed")

// faults draws the faults of one run from the seed. Engine goroutines (the
// claimer's questions to providers, a group's charges, delivery attempts)
// call it concurrently, so draws take a lock; where they race, which call
// gets which draw depends on scheduling (see doc.go).
type faults struct {
	mu     sync.Mutex
	rng    *rand.Rand
	on     bool
	rate   float64 // of a store fault per call
	counts map[string]int
}

func newFaults(seed uint64) *faults {
	return &faults{rng: rand.New(rand.NewPCG(seed, 0xfa17)), on: true, rate: 0.02, counts: map[string]int{}}
}

// draw returns true with probability p while faults are on, counting kind.
func (f *faults) draw(p float64, kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || f.rng.Float64() >= p {
		return false
	}
	f.counts[kind]++
	return true
}

// store returns the fault of one store call: "", FaultBefore, FaultAfter or
// FaultCrash (before or after the call, half each). Inside a transaction a
// call that ran and then failed is rolled back with it, which is a failed
// statement: only a call that commits on its own loses its commit.
func (f *faults) store(inTx bool) (kind string, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || f.rng.Float64() >= f.rate {
		return "", false
	}
	r := f.rng.Float64()
	switch {
	case r < 0.45:
		kind = FaultBefore
	case r < 0.8 && inTx:
		kind = FaultBefore
	case r < 0.8:
		kind, after = FaultAfter, true
	default:
		kind, after = FaultCrash, f.rng.IntN(2) == 0
	}
	f.counts[kind]++
	return kind, after
}

// count counts a fault that the simulator itself made.
func (f *faults) count(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[kind]++
}

func (f *faults) setOn(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = on
}

func (f *faults) summary() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.counts))
	for k, v := range f.counts {
		out[k] = v
	}
	return out
}

func injected(kind, call string) error { return fmt.Errorf("%w: %s at %s", errInjected, kind, call) }
