package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
)

// Fault kinds, as counted in a run's summary.
const (
	FaultBefore    = "db_fail"         // a statement failed; nothing was written
	FaultAfter     = "db_lost_commit"  // it ran (and committed), then the caller saw an error
	FaultCrash     = "crash"           // the process died at a store call: engine dropped, a new one started
	FaultRefuse    = "provider_refuse" // the provider refused for good
	FaultLost      = "provider_lost"   // the provider did the work, the answer was lost
	FaultDown      = "provider_down"   // the provider did not answer; nothing done
	FaultPortFail  = "port_fail"       // the card issuer failed; nothing done
	FaultPortLost  = "port_timeout"    // the card issuer did the work and timed out
	FaultDup       = "callback_dup"    // a provider callback was sent again
	FaultLate      = "callback_late"   // a provider callback waited before it was sent
	FaultRedisLost = "redis_lost"      // the shared trigger lost all its data
	FaultRedisDown = "redis_down"      // the shared trigger's calls failed for a while
)

// errInjected is the error of every injected fault, so that a step log can
// tell an injected failure from a real one.
var errInjected = errors.New("sim: injected fault")

// errCrashed is what a crashed process's store returns from then on: the
// process is gone and nothing it does reaches the database.
var errCrashed = errors.New("sim: the process crashed")

// faults draws the faults of one run from the seed. Engine goroutines (the
// claimer's questions to providers, a group's charges) call it
// concurrently, so a draw does not come from one stream: it is a hash of the
// seed, the site of the call (a store method, a provider call and its key)
// and how many draws that site had, so that calls of different sites may
// interleave in any order and each still gets its own draw. Only concurrent
// calls of one site (two questions to the provider's Close for different
// orders are different sites; two concurrent OrderDeadlineSet calls are
// one) can swap draws (see doc.go).
type faults struct {
	mu   sync.Mutex
	seed uint64
	on   bool
	rate float64 // of a store fault per call
	// opRate replaces rate while an operator's call runs (operating), so
	// that its audited writes meet failures, lost commits and crashes.
	opRate    float64
	operating bool
	counts    map[string]int
	draws     map[string]uint64
}

func newFaults(seed uint64) *faults {
	return &faults{seed: seed, on: true, rate: 0.02, opRate: 0.1, counts: map[string]int{}, draws: map[string]uint64{}}
}

// roll returns the next draw of site, in [0, 1).
func (f *faults) roll(site string) float64 {
	n := f.draws[site]
	f.draws[site] = n + 1
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", f.seed, site, n)
	return rand.New(rand.NewPCG(h.Sum64(), f.seed)).Float64()
}

// draw returns true with probability p while faults are on, counting kind.
func (f *faults) draw(site string, p float64, kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || f.roll(site) >= p {
		return false
	}
	f.counts[kind]++
	return true
}

// store returns the fault of one store call: "", FaultBefore, FaultAfter or
// FaultCrash (before or after the call, half each). Inside a transaction a
// call that ran and then failed is rolled back with it, which is a failed
// statement: only a call that commits on its own loses its commit.
func (f *faults) store(call string, inTx bool) (kind string, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on {
		return "", false
	}
	rate := f.rate
	if f.operating {
		rate = f.opRate
	}
	r := f.roll(call)
	if r >= rate {
		return "", false
	}
	r /= rate
	switch {
	case r < 0.45:
		kind = FaultBefore
	case r < 0.8 && inTx:
		kind = FaultBefore
	case r < 0.8:
		kind, after = FaultAfter, true
	default:
		kind, after = FaultCrash, r < 0.9
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

// operate raises the store's fault rate, or sets it back, around an
// operator's call.
func (f *faults) operate(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.operating = on
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
