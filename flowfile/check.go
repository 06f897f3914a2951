package flowfile

import (
	"maps"
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
)

// check finds the problems that lapse.Flow.Validate finds, in the same order,
// and reports the first at the line of the name, state, event or transition
// at fault: Validate can only name them.
func (p *parser) check(f *lapse.Flow, at *lines) {
	if !validFlowName(f.Name) {
		p.failf(at.name, "flow name %q: use lower case letters, digits, _ or -, starting with a letter, at most 32 long", f.Name)
	}
	// Before the checks that walk the flow once a state.
	switch {
	case len(f.States) > lapse.MaxFlowStates:
		p.failf(at.states[lapse.MaxFlowStates].name, "more than %d states: a flow has at most %d", lapse.MaxFlowStates, lapse.MaxFlowStates)
	case len(f.Events) > lapse.MaxFlowEvents:
		p.failf(at.events[lapse.MaxFlowEvents], "more than %d events: a flow has at most %d", lapse.MaxFlowEvents, lapse.MaxFlowEvents)
	case len(f.Transitions) > lapse.MaxFlowTransitions:
		p.failf(at.transitions[lapse.MaxFlowTransitions].from, "more than %d transitions: a flow has at most %d",
			lapse.MaxFlowTransitions, lapse.MaxFlowTransitions)
	}
	if p.err != nil {
		return
	}
	states := map[lapse.State]int{} // the line of each state's declaration
	for i, s := range f.States {
		line := at.states[i].name
		switch {
		case !validState(s.Name):
			p.failf(line, "state name %q: use upper case letters, digits and _, starting with a letter, at most 32 long", s.Name)
		case states[s.Name] != 0:
			p.failf(line, "state %s is declared twice (first at line %d)", s.Name, states[s.Name])
		default:
			states[s.Name] = line
		}
	}
	events := map[lapse.Event]int{}
	for i, e := range f.Events {
		line := at.events[i]
		switch {
		case !validEvent(e.Name):
			p.failf(line, "event name %q: use upper case letters, digits and _, starting with a letter, at most 32 long", e.Name)
		case events[e.Name] != 0:
			p.failf(line, "event %s is declared twice (first at line %d)", e.Name, events[e.Name])
		default:
			events[e.Name] = line
		}
	}
	if st := f.State(f.Initial); st == nil {
		p.failf(at.initial, "initial state %s is not declared (states: %s)", f.Initial, stateNames(f))
	} else if st.Terminal {
		p.failf(at.initial, "initial state %s is terminal: an order would start where it ends, never closed (and holding its stock, if the flow holds)", f.Initial)
	}

	for i, t := range f.Transitions {
		tl := at.transitions[i]
		where := string(t.From) + " --" + string(t.Event) + "--> " + string(t.To)
		from, to := f.State(t.From), f.State(t.To)
		switch {
		case from == nil:
			p.failf(tl.from, "transition %s: unknown state %s (states: %s)", where, t.From, stateNames(f))
		case to == nil:
			p.failf(tl.to, "transition %s: unknown state %s (states: %s)", where, t.To, stateNames(f))
		case events[t.Event] == 0:
			p.failf(tl.event, "transition %s: unknown event %s (declare it under events)", where, t.Event)
		case from.Terminal:
			p.failf(tl.from, "transition %s leaves %s, which is terminal: nothing moves an order out of it", where, t.From)
		}
		for j := range i {
			if f.Transitions[j].From == t.From && f.Transitions[j].Event == t.Event {
				p.failf(tl.event, "transition %s: state %s already has a transition on %s (line %d)",
					where, t.From, t.Event, at.transitions[j].event)
			}
		}
		if len(t.Emits) > lapse.MaxEmits {
			p.failf(tl.emits, "transition %s emits %d event types: a transition emits at most %d", where, len(t.Emits), lapse.MaxEmits)
			continue
		}
		for k, typ := range t.Emits {
			switch {
			case slices.Contains(t.Emits[:k], typ):
				p.failf(tl.emits, "transition %s emits %q twice: each would be an event of its own, delivered and acted on twice", where, typ)
			case slices.Contains(lapse.EngineEvents(), typ):
				p.failf(tl.emits, "transition %s emits %q, which only the engine writes (%s)", where, typ,
					strings.Join(lapse.EngineEvents(), ", "))
			case !lapse.ValidEmit(typ):
				p.failf(tl.emits, "transition %s emits %q: emitted events look like order.closed, at most %d long", where, typ, lapse.MaxEmitLen)
			}
		}
	}

	for i, s := range f.States {
		d := s.Deadline
		if d == nil {
			continue
		}
		sl := at.states[i]
		t := f.Transition(s.Name, d.Event)
		switch {
		case s.Terminal:
			p.failf(sl.deadline, "state %s is terminal and cannot have a deadline", s.Name)
		case t == nil:
			accepts := "no events"
			if evs := f.Accepts(s.Name); len(evs) > 0 {
				accepts = joinEvents(evs)
			}
			p.failf(sl.deadlineEvent, "state %s: its deadline fires %s, which the state does not accept (it accepts %s)",
				s.Name, d.Event, accepts)
		case t.Guard != nil:
			// A guard could refuse a due order forever and stall the claimer.
			p.failf(sl.deadlineEvent, "state %s: the transition its deadline fires (%s) cannot have a guard", s.Name, d.Event)
		case f.FeatureEvent(d.Event):
			p.failf(sl.deadlineEvent, "state %s: its deadline fires %s, which only Lapse fires for a verified payment (pays) or a refund (refunds): a timer is neither",
				s.Name, d.Event)
		}
	}

	if c := f.DeadlineCycle(); c != nil && p.err == nil {
		i := slices.IndexFunc(f.States, func(s lapse.StateSpec) bool { return s.Name == c[0] })
		p.failf(at.states[i].deadlineEvent, "%s", c.Problem())
	}

	emitted := map[string]bool{}
	for _, t := range f.Transitions {
		for _, typ := range t.Emits {
			emitted[typ] = true
		}
	}
	holdings := func(key string, types []string, lines []int) {
		named := map[string]int{}
		for i, typ := range types {
			switch {
			case named[typ] != 0:
				p.failf(lines[i], "%s names %s twice (first at line %d)", key, typ, named[typ])
			case !f.Holds:
				p.failf(lines[i], "%s needs holds: true", key)
			case !emitted[typ]:
				p.failf(lines[i], "%s: no transition emits %s", key, typ)
			case key == "release_on" && slices.Contains(f.ConsumeOn, typ):
				p.failf(lines[i], "%s both releases and consumes holdings", typ)
			}
			named[typ] = lines[i]
		}
	}
	holdings("release_on", f.ReleaseOn, at.releaseOn)
	holdings("consume_on", f.ConsumeOn, at.consumeOn)
	if t := f.EndsHolding(); t != nil && p.err == nil {
		i := slices.IndexFunc(f.Transitions, func(u lapse.Transition) bool { return u.From == t.From && u.Event == t.Event })
		p.failf(at.transitions[i].to, "transition %s --%s--> %s ends the order holding its stock and coupon: emit an event of release_on (%s) or consume_on (%s)",
			t.From, t.Event, t.To, strings.Join(f.ReleaseOn, ", "), strings.Join(f.ConsumeOn, ", "))
	}
	if f.Pays != "" && events[f.Pays] == 0 {
		p.failf(at.pays, "pays: event %s is not declared", f.Pays)
	}
	if r := f.Refunds; r != (lapse.RefundEvents{}) {
		for _, ev := range []lapse.Event{r.Start, r.Done, r.Partial} {
			if events[ev] == 0 {
				p.failf(at.refunds, "refunds: event %s is not declared", ev)
			}
		}
		if f.Pays == "" {
			p.failf(at.refunds, "refunds need a flow that takes payments (pays)")
		}
	}
	if ev, a, b := f.SharedFeatureEvent(); ev != "" {
		line := at.refunds
		if a == "pays" {
			line = at.pays
		}
		p.failf(line, "%s is named twice, as %s and %s: each names an event of its own", ev, a, b)
	}
	if t := f.PaidWithoutPayment(); t != nil && p.err == nil {
		i := slices.IndexFunc(f.Transitions, func(u lapse.Transition) bool { return u.From == t.From && u.Event == t.Event })
		p.failf(at.transitions[i].event, "transition %s --%s--> %s makes the order paid without a payment: %s is entered from a state before payment only by pays (%s)",
			t.From, t.Event, t.To, t.To, f.Pays)
	}
	if t := f.PaidAgain(); t != nil && p.err == nil {
		i := slices.IndexFunc(f.Transitions, func(u lapse.Transition) bool { return u.From == t.From && u.Event == t.Event })
		p.failf(at.transitions[i].event, "transition %s --%s--> %s takes a payment for an order that is paid already: %s is entered by pays (%s), or after it, and a second payment would be applied beside the first",
			t.From, t.Event, t.To, t.From, f.Pays)
	}
	if f.Grace > 0 && f.Pays == "" {
		p.failf(at.grace, "grace needs a flow that takes payments (pays)")
	}
	if f.Grace > lapse.DefaultMaxDeadline {
		p.failf(at.grace, "grace: %s is further ahead than a deadline may be: at most 366d", f.Grace)
	}

	if p.err != nil || f.State(f.Initial) == nil {
		return
	}
	reached := f.Reachable(f.Initial)
	for i, s := range f.States {
		if !reached[s.Name] {
			p.failf(at.states[i].name, "state %s is unreachable: no transitions lead to it from %s", s.Name, f.Initial)
		}
	}
	// An order in a state from which it can reach no terminal state stays
	// there for ever, with what it holds: a flow's orders must be able to
	// end, whatever state they are in.
	var ends []string
	for _, s := range f.States {
		if s.Terminal {
			ends = append(ends, string(s.Name))
		}
	}
	if len(ends) == 0 {
		p.failf(at.name, "flow %s has no terminal state: its orders could never end (mark the states that end them terminal: true)", f.Name)
		return
	}
	if endless := f.Endless(); len(endless) > 0 {
		i := slices.IndexFunc(f.States, func(s lapse.StateSpec) bool { return s.Name == endless[0] })
		p.failf(at.states[i].name, "state %s leads to no terminal state (%s): an order in it could never end", endless[0], strings.Join(ends, ", "))
	}
}

// The naming rules are lapse's. Rather than copy its patterns, these ask
// Validate about one name at a time, in a flow that is otherwise valid.

func validFlowName(name string) bool {
	return probe(name, "A", "E").Validate() == nil
}

func validState(s lapse.State) bool {
	return probe("probe", s, "E").Validate() == nil
}

func validEvent(e lapse.Event) bool {
	return probe("probe", "A", e).Validate() == nil
}

// probe is a valid flow called name, whose orders start in s and end
// (in a state called other than s) on e.
func probe(name string, s lapse.State, e lapse.Event) *lapse.Flow {
	end := lapse.State("Z")
	if s == end {
		end = "Y"
	}
	return &lapse.Flow{Name: name, Initial: s, States: []lapse.StateSpec{{Name: s}, {Name: end, Terminal: true}},
		Events: []lapse.EventSpec{{Name: e}}, Transitions: []lapse.Transition{{From: s, Event: e, To: end}}}
}

func stateNames(f *lapse.Flow) string {
	names := make([]string, len(f.States))
	for i, s := range f.States {
		names[i] = string(s.Name)
	}
	return strings.Join(names, ", ")
}

func joinEvents(evs []lapse.Event) string {
	set := map[string]bool{}
	for _, e := range evs {
		set[string(e)] = true
	}
	return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
}
