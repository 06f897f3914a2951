package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
)

// flowSet is the flows an engine runs, by name.
type flowSet struct {
	byName map[string]*lapse.Flow
	names  []string // sorted
	timed  []string // names of the flows that have deadlines, sorted
}

// newFlowSet validates flows, whose names must be unique, and indexes them.
func newFlowSet(flows []*lapse.Flow, maxAt time.Duration) (flowSet, error) {
	fs := flowSet{byName: map[string]*lapse.Flow{}}
	for _, f := range flows {
		if err := f.Validate(); err != nil {
			return flowSet{}, err
		}
		for _, s := range f.States {
			// No deadline goes further than the API lets an order's.
			if s.Deadline != nil && s.Deadline.After > maxAt {
				return flowSet{}, fmt.Errorf("engine: flow %q: state %s: its deadline, %s after it is entered, is further ahead than a deadline may be (Config.MaxDeadline, %s)",
					f.Name, s.Name, s.Deadline.After, maxAt)
			}
		}
		if fs.byName[f.Name] != nil {
			return flowSet{}, fmt.Errorf("engine: flow %q is defined twice", f.Name)
		}
		fs.byName[f.Name] = f
		fs.names = append(fs.names, f.Name)
		if len(f.DeadlineStates()) > 0 {
			fs.timed = append(fs.timed, f.Name)
		}
	}
	if len(fs.byName) == 0 {
		return flowSet{}, fmt.Errorf("engine: no flows")
	}
	slices.Sort(fs.names)
	slices.Sort(fs.timed)
	return fs, nil
}

// get returns the flow called name, or nil.
func (fs *flowSet) get(name string) *lapse.Flow { return fs.byName[name] }

// checkFilter returns an EINVALID error when flow, unless empty, names no
// flow of fs, or state, unless empty, is a state of no flow (of flow, when
// it names one). The error names the field, flow or state, and what it may
// be.
func (fs *flowSet) checkFilter(flow string, state lapse.State) error {
	if flow != "" && fs.byName[flow] == nil {
		return lapse.FieldError("flow", "no flow is called %q (the flows are %s)", flow, strings.Join(fs.names, ", "))
	}
	if state == "" {
		return nil
	}
	var states []string
	for _, f := range fs.all() {
		if flow != "" && f.Name != flow {
			continue
		}
		if f.State(state) != nil {
			return nil
		}
		for _, st := range f.States {
			states = append(states, string(st.Name))
		}
	}
	slices.Sort(states)
	if flow != "" {
		return lapse.FieldError("state", "flow %s has no state %q (its states are %s)", flow, state, strings.Join(slices.Compact(states), ", "))
	}
	return lapse.FieldError("state", "no flow has a state %q (the states are %s)", state, strings.Join(slices.Compact(states), ", "))
}

// all returns the flows sorted by name.
func (fs *flowSet) all() []*lapse.Flow {
	out := make([]*lapse.Flow, len(fs.names))
	for i, n := range fs.names {
		out[i] = fs.byName[n]
	}
	return out
}

// of returns the flow an order follows; an order of a flow this engine does
// not run is an internal error.
func (fs *flowSet) of(o *lapse.Order) (*lapse.Flow, error) {
	f := fs.byName[o.Flow]
	if f == nil {
		return nil, lapse.Errorf(lapse.EINTERNAL, "order %s follows flow %q, which this engine does not run", o.OrderNo, o.Flow)
	}
	return f, nil
}

// ofEvent returns the flow of a delivery's event, read from its payload's
// order, or nil.
func (fs *flowSet) ofEvent(d *lapse.Delivery) *lapse.Flow {
	if d.Event == nil {
		return nil
	}
	o, err := lapse.EventOrder(d.Event)
	if err != nil {
		return nil
	}
	return fs.byName[o.Flow]
}

// CheckOpenOrders returns an EINVALID error when the engine's flows no
// longer fit the orders in the store that have not ended, as after a flow
// file was changed or removed: an open order of a flow the engine does not
// run, in a state its flow no longer has or has made terminal, or with a
// deadline in a state that no longer has one. Such an order could never
// move again, nor its deadline fire (the claimer would find it due on every
// pass and fail), and nothing would show it to an operator. So is an open
// order with items or a coupon of a flow that no longer holds: nothing
// would give back what it reserved and locked. The error names
// each flow and state with its count; a service should refuse to start
// with it, before it changes anything. It reads every open order once.
func (e *Engine) CheckOpenOrders(ctx context.Context) error {
	counts, err := e.store.OrderCountOpen(ctx)
	if err != nil {
		return err
	}
	var problems []string
	for _, c := range counts {
		f := e.flows.get(c.Flow)
		var st *lapse.StateSpec
		if f != nil {
			st = f.State(c.State)
		}
		switch {
		case f == nil:
			problems = append(problems, fmt.Sprintf("%d in state %s of flow %q, which is not loaded", c.N, c.State, c.Flow))
		case st == nil:
			problems = append(problems, fmt.Sprintf("%d of flow %s in state %s, which the flow no longer has (its states are %s)",
				c.N, c.Flow, c.State, stateList(f)))
		case st.Terminal:
			problems = append(problems, fmt.Sprintf("%d of flow %s in state %s, which is terminal now: they did not end there and nothing would end them",
				c.N, c.Flow, c.State))
		case c.Timed > 0 && st.Deadline == nil:
			problems = append(problems, fmt.Sprintf("%d of flow %s in state %s with a deadline, which the state no longer has: it could never fire",
				c.Timed, c.Flow, c.State))
		case c.Holding > 0 && !f.Holds:
			// Made while the flow held: the ledgers and ports give back
			// only what orders of a flow that holds hold (S4).
			problems = append(problems, fmt.Sprintf("%d of flow %s in state %s with items or a coupon, which the flow no longer holds: they would end with their stock reserved and their coupon locked for good",
				c.Holding, c.Flow, c.State))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	if n := len(problems); n > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("and %d more", n-maxProblems))
	}
	return lapse.Errorf(lapse.EINVALID, "the flows do not fit the open orders: %s; run the flows these orders were made with, or end the orders with them first (lapse close, or their events)",
		strings.Join(problems, "; "))
}

// maxProblems bounds the flows and states CheckOpenOrders names.
const maxProblems = 20

// stateList names the states of f.
func stateList(f *lapse.Flow) string {
	names := make([]string, len(f.States))
	for i, s := range f.States {
		names[i] = string(s.Name)
	}
	return strings.Join(names, ", ")
}
