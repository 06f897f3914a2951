package sim

import (
	"context"
	"fmt"
	"sync"

	"github.com/lapsehq/lapse"
)

// notifySubscriber is the name of the outside subscription the simulator
// adds: every order event of every flow goes to it.
const notifySubscriber = "notify"

// notifyPort is a fake outside subscriber (a webhook receiver, a broker):
// it deduplicates on the event id, as the delivery contract asks, and
// answers Query honestly. As the seed draws it fails (nothing done) or
// times out after it applied (ErrUnknownOutcome). It records what it
// applied, for the auditor: every done delivery must have reached it.
type notifyPort struct {
	mu      sync.Mutex
	f       *faults
	rate    float64
	applied map[string]bool // event ids
	sends   map[string]int  // Deliver calls per event id
}

func newNotifyPort(f *faults) *notifyPort {
	return &notifyPort{f: f, rate: 0.15, applied: map[string]bool{}, sends: map[string]int{}}
}

func (n *notifyPort) Deliver(_ context.Context, d *lapse.Delivery) error {
	site := fmt.Sprintf("notify %d", d.ID) // event ids are random; delivery ids follow the run
	if n.f.draw(site, n.rate/2, FaultPortFail) {
		return fmt.Errorf("%w: notify: 503", errInjected)
	}
	lost := n.f.draw(site, n.rate/2, FaultPortLost)
	n.mu.Lock()
	n.applied[d.EventID] = true
	n.sends[d.EventID]++
	n.mu.Unlock()
	if lost {
		return fmt.Errorf("%w: notify timed out: %w", errInjected, lapse.ErrUnknownOutcome)
	}
	return nil
}

func (n *notifyPort) Query(_ context.Context, d *lapse.Delivery) (bool, error) {
	if n.f.draw(fmt.Sprintf("notify query %d", d.ID), n.rate/2, FaultPortFail) {
		return false, fmt.Errorf("%w: notify: 503", errInjected)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.applied[d.EventID], nil
}

func (n *notifyPort) has(eventID string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.applied[eventID]
}
