package lapse

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Flow is a declarative state machine that orders of one kind follow: states,
// the events they accept, the transitions those events make, a deadline per
// state that fires an event, and the outbox events each transition emits.
//
// A Flow is a plain value; call Validate before use. Every change of an
// order's state is planned by its flow (Plan) and applied by a store as one
// guarded transaction.
type Flow struct {
	Name        string
	Initial     State
	States      []StateSpec
	Events      []EventSpec
	Transitions []Transition

	// Holds makes orders of the flow hold stock for their items and their
	// coupon from creation on: the built-in ledgers reserve them in the
	// creation transaction, or refuse the order. The outbox events named in
	// ReleaseOn give the holdings back; those in ConsumeOn use them up.
	Holds     bool
	ReleaseOn []string
	ConsumeOn []string

	// Pays is the event a verified payment fires; empty when the flow takes
	// no payments. A payment its order's state does not accept, or that a
	// guard refuses (judged at the provider's success time), is late and is
	// refunded.
	Pays Event
	// Refunds names the events of the merchant refund path; zero when the
	// flow has none.
	Refunds RefundEvents
	// Grace is how long past its deadline an order waits when a payment
	// intent was started before the deadline: the customer may be paying.
	// Before closing such an order the closer asks the provider.
	Grace time.Duration

	// Group makes the flow's orders group buys: members join while the group
	// is open and are charged once it closes; zero for other flows.
	Group GroupEvents
	// Issues makes the flow's orders issue benefits (cards) once paid, and
	// revoke them when refunded; zero for other flows.
	Issues IssueEvents
}

// GroupEvents name the events of a group buy's settlement (seed 000). Each
// member joining fires Join, a transition from the open state to itself.
// After the outbox event Charge (the group closed), the settle subscriber
// charges every member through the provider port, then fires Settled; when
// charges still fail after its retry schedule, Failed. An operator's retry
// of a failed group fires Retry, which must emit Charge again. An
// operator's abandoning of a failed group fires Abandon (optional), which
// must emit Refund: on it the members charged are refunded, those whose
// charge is under way asked about first, and the others released.
type GroupEvents struct {
	Join    Event
	Charge  string
	Settled Event
	Failed  Event
	Retry   Event
	Abandon Event
	Refund  string
}

// IssueEvents name the events of issuing benefits (seed 003). After the
// outbox event On (the order was paid), the issue subscriber issues the
// order's cards through the card issuer and fires Issued. The first failure
// fires Failed (the order compensates), and the subscriber retries on its
// schedule; when the schedule runs out it fires GiveUp (manual review), in
// the transaction that records its delivery dead with the operator's
// review. An operator's Retry fires the compensation again, unless the
// order's cards were revoked (lapse.ErrCardsRevoked). The outbox events in
// Revoke (a refund started) revoke every card of the order, for good: the
// issue subscriber never records such an order as issued. In a flow that
// takes refunds, every transition that starts one emits one of them
// (Validate).
type IssueEvents struct {
	On     string
	Issued Event
	Failed Event
	GiveUp Event
	Retry  Event
	Revoke []string
}

// StateSpec describes one state of a flow.
type StateSpec struct {
	Name State
	// Terminal states end the order: nothing moves it out of them. Entering
	// one records the closing time and the event as the close reason.
	Terminal bool
	// Deadline, when set, fires an event once the order has been in the state
	// for After. Orders may override the initial state's deadline at creation.
	Deadline *Deadline
	// Doc says what the state means and who moves an order out of it.
	Doc string
}

// Deadline is a state's timer: After the order entered the state, the
// deadline engine fires Event.
type Deadline struct {
	After time.Duration
	Event Event
}

// DefaultMaxDeadline is how far ahead a deadline may be, unless the
// engine is told otherwise (engine.Config.MaxDeadline): a year and a day.
const DefaultMaxDeadline = 366 * 24 * time.Hour

// EventSpec describes one event of a flow.
type EventSpec struct {
	Name Event
	// Internal events are fired by Lapse itself (the deadline engine, the
	// payment path); the generic events API refuses them.
	Internal bool
	Doc      string
}

// Transition is one edge of a flow: an order in From that receives Event moves
// to To, if Guard allows, and emits the outbox events named in Emits.
type Transition struct {
	From  State
	Event Event
	To    State
	Guard Guard
	Emits []string
}

// Guard decides whether a transition may happen to o at now. It returns nil to
// allow it, or an error (usually ECONFLICT) that says why not.
type Guard func(o *Order, now time.Time) error

// BeforeDeadline is a Guard that allows a transition only while the order's
// deadline (or, once its customer started paying in time, its PayBy) has
// not passed. Checkout's PAY uses it: an order whose payment window lapsed
// must not become PAID.
func BeforeDeadline(o *Order, now time.Time) error {
	cutoff := o.DeadlineAt
	if o.PayBy != nil {
		cutoff = o.PayBy
	}
	if cutoff != nil && !now.Before(*cutoff) {
		return Errorf(ECONFLICT, "order %s passed its deadline at %s", o.OrderNo, cutoff.Format(time.RFC3339Nano))
	}
	return nil
}

// State returns the spec of state s, or nil.
func (f *Flow) State(s State) *StateSpec {
	for i := range f.States {
		if f.States[i].Name == s {
			return &f.States[i]
		}
	}
	return nil
}

// Event returns the spec of event e, or nil.
func (f *Flow) Event(e Event) *EventSpec {
	for i := range f.Events {
		if f.Events[i].Name == e {
			return &f.Events[i]
		}
	}
	return nil
}

// Transition returns the transition that event e makes from state s, or nil.
func (f *Flow) Transition(s State, e Event) *Transition {
	for i := range f.Transitions {
		if f.Transitions[i].From == s && f.Transitions[i].Event == e {
			return &f.Transitions[i]
		}
	}
	return nil
}

// Accepts returns the events that state s accepts, in declaration order.
func (f *Flow) Accepts(s State) []Event {
	var out []Event
	for _, t := range f.Transitions {
		if t.From == s {
			out = append(out, t.Event)
		}
	}
	return out
}

// DeadlineStates returns the states that have a deadline.
func (f *Flow) DeadlineStates() []State {
	var out []State
	for _, s := range f.States {
		if s.Deadline != nil {
			out = append(out, s.Name)
		}
	}
	return out
}

// Bounds of a flow's size. The built-in flows have a dozen states; a flow
// is checked by walks over its transitions from each state, so that a
// flow of tens of thousands of states (a megabyte of YAML) would keep
// Validate, and the start of a service, busy for hours.
const (
	MaxFlowStates      = 256
	MaxFlowEvents      = 256
	MaxFlowTransitions = 1024
)

// MaxEmits is how many event types a transition may emit. Each firing
// writes an outbox event of every one, and a transition of the built-in
// flows emits one.
const MaxEmits = 16

// MaxEmitLen is the longest event type a transition may emit: the type is
// a RabbitMQ routing key (at most 255 bytes) and a NATS subject behind a
// prefix, and a longer one could be written but never published.
const MaxEmitLen = 64

var (
	flowNamePattern  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	symbolPattern    = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,31}$`)
	effectNamePatten = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
)

// Validate checks that the flow is a well-formed state machine: names are
// valid and unique, every transition joins declared states by a declared
// event, no transition leaves a terminal state, every deadline fires an event
// its state accepts, every state is reachable from the initial one, and a
// terminal state can be reached from every state. The error names the
// first problem found.
func (f *Flow) Validate() error {
	bad := func(format string, args ...any) error {
		return Errorf(EINVALID, "flow %q: %s", f.Name, fmt.Sprintf(format, args...))
	}
	if !flowNamePattern.MatchString(f.Name) {
		return bad("name must be lower case letters, digits, _ or -, starting with a letter, at most 32 long")
	}
	if err := f.checkSize(); err != nil {
		return bad("%s", err)
	}
	seen := map[string]bool{}
	for _, s := range f.States {
		if !symbolPattern.MatchString(string(s.Name)) {
			return bad("state %q: names are upper case letters, digits and _, starting with a letter", s.Name)
		}
		if seen[string(s.Name)] {
			return bad("state %s is declared twice", s.Name)
		}
		seen[string(s.Name)] = true
	}
	clear(seen)
	for _, e := range f.Events {
		if !symbolPattern.MatchString(string(e.Name)) {
			return bad("event %q: names are upper case letters, digits and _, starting with a letter", e.Name)
		}
		if seen[string(e.Name)] {
			return bad("event %s is declared twice", e.Name)
		}
		seen[string(e.Name)] = true
	}
	if f.State(f.Initial) == nil {
		return bad("initial state %q is not declared", f.Initial)
	}
	if f.State(f.Initial).Terminal {
		// Created ended, but never closed: open for ever, holding what
		// it holds.
		return bad("initial state %s is terminal: an order would start where it ends", f.Initial)
	}
	for i, t := range f.Transitions {
		where := fmt.Sprintf("transition %s --%s--> %s", t.From, t.Event, t.To)
		switch from, to := f.State(t.From), f.State(t.To); {
		case from == nil:
			return bad("%s: unknown state %s", where, t.From)
		case to == nil:
			return bad("%s: unknown state %s", where, t.To)
		case f.Event(t.Event) == nil:
			return bad("%s: unknown event %s", where, t.Event)
		case from.Terminal:
			return bad("%s: leaves terminal state %s", where, t.From)
		}
		for j := range i {
			if f.Transitions[j].From == t.From && f.Transitions[j].Event == t.Event {
				return bad("%s: state %s already has a transition on %s", where, t.From, t.Event)
			}
		}
		if len(t.Emits) > MaxEmits {
			return bad("%s: emits %d event types: a transition emits at most %d", where, len(t.Emits), MaxEmits)
		}
		for k, eff := range t.Emits {
			if slices.Contains(t.Emits[:k], eff) {
				// Each would be an event of its own, with its own id:
				// delivered, and acted on, twice.
				return bad("%s: emits %s twice", where, eff)
			}
			if !ValidEmit(eff) {
				return bad("%s: emitted event %q must look like order.closed, at most %d long", where, eff, MaxEmitLen)
			}
			if slices.Contains(EngineEvents(), eff) {
				return bad("%s: emits %s, which only the engine writes (%s)", where, eff, strings.Join(EngineEvents(), ", "))
			}
		}
	}
	for _, s := range f.States {
		if s.Deadline == nil {
			continue
		}
		switch {
		case s.Terminal:
			return bad("state %s is terminal and cannot have a deadline", s.Name)
		case s.Deadline.After <= 0:
			return bad("state %s: deadline must be a positive duration", s.Name)
		case f.Transition(s.Name, s.Deadline.Event) == nil:
			return bad("state %s: its deadline fires %s, which the state does not accept", s.Name, s.Deadline.Event)
		case f.Transition(s.Name, s.Deadline.Event).Guard != nil:
			// A guard could refuse a due order forever and stall the claimer.
			return bad("state %s: the transition its deadline fires (%s) cannot have a guard", s.Name, s.Deadline.Event)
		}
	}
	for _, s := range f.States {
		if s.Deadline != nil && f.FeatureEvent(s.Deadline.Event) {
			// A timer is no verified payment, refund or settlement.
			return bad("state %s: its deadline fires %s, which only one of Lapse's features fires (a verified payment, a refund, a group buy's settlement, issuing)",
				s.Name, s.Deadline.Event)
		}
	}
	if c := f.DeadlineCycle(); c != nil {
		return bad("%s", c.Problem())
	}
	emitted := map[string]bool{}
	for _, t := range f.Transitions {
		for _, eff := range t.Emits {
			emitted[eff] = true
		}
	}
	for _, l := range []struct {
		key   string
		types []string
	}{{"release_on", f.ReleaseOn}, {"consume_on", f.ConsumeOn}} {
		named := map[string]bool{}
		for _, typ := range l.types {
			if named[typ] {
				return bad("%s names %s twice", l.key, typ)
			}
			named[typ] = true
		}
	}
	for _, typ := range append(slices.Clone(f.ReleaseOn), f.ConsumeOn...) {
		if !f.Holds {
			return bad("release_on and consume_on need holds")
		}
		if !emitted[typ] {
			return bad("%s releases or consumes holdings, but no transition emits it", typ)
		}
	}
	for _, typ := range f.ReleaseOn {
		if slices.Contains(f.ConsumeOn, typ) {
			return bad("%s both releases and consumes holdings", typ)
		}
	}
	if t := f.EndsHolding(); t != nil {
		return bad("transition %s --%s--> %s ends the order holding its stock and coupon: it must emit an event of release_on or consume_on",
			t.From, t.Event, t.To)
	}
	if f.Pays != "" && f.Event(f.Pays) == nil {
		return bad("payments fire %s, which is not declared", f.Pays)
	}
	if ev, a, b := f.SharedFeatureEvent(); ev != "" {
		return bad("%s names two of the events of Lapse's features (%s and %s): each is told from the others by its event", ev, a, b)
	}
	if r := f.Refunds; r != (RefundEvents{}) {
		for _, ev := range []Event{r.Start, r.Done, r.Partial} {
			if f.Event(ev) == nil {
				return bad("refunds: event %q is not declared (refunds name start, done and partial)", ev)
			}
		}
		if f.Pays == "" {
			return bad("refunds need a flow that takes payments")
		}
		for _, t := range f.Transitions {
			if t.Event == r.Start && len(t.Emits) == 0 {
				// The refund subscriber asks the provider on what it emits.
				return bad("refunds: starting one (%s --%s--> %s) must emit an event, on which the provider is asked for the refund",
					t.From, t.Event, t.To)
			}
		}
	}
	if g := f.Group; g != (GroupEvents{}) {
		for _, ev := range []Event{g.Join, g.Settled, g.Failed, g.Retry} {
			if f.Event(ev) == nil {
				return bad("group: event %q is not declared (a group names join, settled, failed and retry)", ev)
			}
		}
		if !emitted[g.Charge] {
			return bad("group: members are charged after %q, which no transition emits", g.Charge)
		}
		for _, t := range f.Transitions {
			if t.Event == g.Join && t.From != t.To {
				return bad("group: joining (%s) must leave the group in its state, not move it from %s to %s", g.Join, t.From, t.To)
			}
			if t.Event == g.Retry && !slices.Contains(t.Emits, g.Charge) {
				return bad("group: retrying (%s) must emit %s, which charges the members again", g.Retry, g.Charge)
			}
			if g.Abandon != "" && t.Event == g.Abandon && (!f.State(t.To).Terminal || !slices.Contains(t.Emits, g.Refund)) {
				return bad("group: abandoning (%s --%s--> %s) must enter a terminal state and emit %q, which refunds the members charged", t.From, t.Event, t.To, g.Refund)
			}
		}
		if (g.Abandon == "") != (g.Refund == "") || g.Abandon != "" && f.Event(g.Abandon) == nil {
			return bad("group: abandon %q and refund %q go together, and abandon must be declared", g.Abandon, g.Refund)
		}
		if t := f.LeavesCharging(); t != nil {
			return bad("group: transition %s --%s--> %s moves the group on after its members' charges started, by another event than the group's own steps (settled, failed, retry, abandon): the members charged would keep paying for it, and nothing would refund them",
				t.From, t.Event, t.To)
		}
	}
	if is := f.Issues; is.On != "" || is.Issued != "" {
		for _, ev := range []Event{is.Issued, is.Failed, is.GiveUp, is.Retry} {
			if f.Event(ev) == nil {
				return bad("issues: event %q is not declared (issuing names issued, failed, give_up and retry)", ev)
			}
		}
		for _, typ := range append([]string{is.On}, is.Revoke...) {
			if !emitted[typ] {
				return bad("issues: %s is named, but no transition emits it", typ)
			}
		}
		// A refund takes back what the order paid for: the cards go with
		// the money, from whichever state the refund starts (and a card
		// takes no visit once one did, which the order's log of a Revoke
		// event tells).
		for _, t := range f.Transitions {
			if f.Refunds.Start != "" && t.Event == f.Refunds.Start && !slices.ContainsFunc(t.Emits, func(e string) bool { return slices.Contains(is.Revoke, e) }) {
				return bad("issues: starting a refund (%s --%s--> %s) must emit an event of revoke (%s): the order would keep its benefits after its refund",
					t.From, t.Event, t.To, strings.Join(is.Revoke, ", "))
			}
		}
	}
	if t := f.PaidWithoutPayment(); t != nil {
		return bad("transition %s --%s--> %s makes the order paid without a payment: a state that %s leads to, or one after it, is entered from an unpaid state only by %s",
			t.From, t.Event, t.To, f.Pays, f.Pays)
	}
	if t := f.PaidAgain(); t != nil {
		return bad("transition %s --%s--> %s takes a payment for an order that is paid already: %s is a state that %s leads to, or one after it, and a second payment would be applied beside the first",
			t.From, t.Event, t.To, t.From, f.Pays)
	}
	if t := f.ReentersPayable(); t != nil {
		return bad("transition %s --%s--> %s enters %s, which takes payments and has a deadline, after the order had a payment window: the end of a customer's first window (pay_by) would close this one early",
			t.From, t.Event, t.To, t.To)
	}
	if f.Grace < 0 || (f.Grace > 0 && f.Pays == "") {
		return bad("grace must be a positive duration, for a flow that takes payments")
	}
	if f.Grace > DefaultMaxDeadline {
		// It moves the deadline: no further than a deadline may be.
		return bad("grace must be at most 366 days, as a deadline")
	}
	reached := f.Reachable(f.Initial)
	for _, s := range f.States {
		if !reached[s.Name] {
			return bad("state %s is unreachable from %s", s.Name, f.Initial)
		}
	}
	// An order in a state from which no terminal state can be reached
	// stays there for ever, with what it holds.
	if !slices.ContainsFunc(f.States, func(s StateSpec) bool { return s.Terminal }) {
		return bad("no state is terminal: its orders could never end")
	}
	if st := f.Endless(); len(st) > 0 {
		return bad("state %s leads to no terminal state: an order in it could never end", st[0])
	}
	return nil
}

// checkSize returns an error when the flow has more states, events or
// transitions than a flow may have.
func (f *Flow) checkSize() error {
	for _, c := range []struct {
		what   string
		n, max int
	}{{"states", len(f.States), MaxFlowStates}, {"events", len(f.Events), MaxFlowEvents},
		{"transitions", len(f.Transitions), MaxFlowTransitions}} {
		if c.n > c.max {
			return fmt.Errorf("%d %s: a flow has at most %d", c.n, c.what, c.max)
		}
	}
	return nil
}

// ValidEmit reports whether typ may be an event type that a transition
// emits: dot-separated lower case words, such as order.closed, at most
// MaxEmitLen long.
func ValidEmit(typ string) bool {
	return len(typ) <= MaxEmitLen && effectNamePatten.MatchString(typ)
}

// Endless returns the states, in declaration order, from which no
// terminal state can be reached: an order in one could never end.
func (f *Flow) Endless() []State {
	// Walk the transitions backwards from the terminal states: one pass
	// over them, however many states there are.
	into := map[State][]State{}
	for _, t := range f.Transitions {
		into[t.To] = append(into[t.To], t.From)
	}
	ends := map[State]bool{}
	var queue []State
	for _, s := range f.States {
		if s.Terminal && !ends[s.Name] {
			ends[s.Name] = true
			queue = append(queue, s.Name)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, from := range into[s] {
			if !ends[from] {
				ends[from] = true
				queue = append(queue, from)
			}
		}
	}
	var out []State
	for _, s := range f.States {
		if !ends[s.Name] {
			out = append(out, s.Name)
		}
	}
	return out
}

// EndsHolding returns the first transition, in declaration order, that
// takes an order of a flow that Holds into a terminal state while it still
// holds its stock and coupon: one that emits no event of ReleaseOn or
// ConsumeOn, from a state the order can reach from the initial one without
// any transition that does. Such an order would keep its holdings for
// ever (S4). It returns nil when there is none, or the flow holds nothing.
func (f *Flow) EndsHolding() *Transition {
	if !f.Holds {
		return nil
	}
	settling := map[string]bool{}
	for _, typ := range slices.Concat(f.ReleaseOn, f.ConsumeOn) {
		settling[typ] = true
	}
	settles := func(t *Transition) bool {
		return slices.ContainsFunc(t.Emits, func(typ string) bool { return settling[typ] })
	}
	holding := map[State]bool{f.Initial: true}
	for grew := true; grew; {
		grew = false
		for i := range f.Transitions {
			t := &f.Transitions[i]
			if holding[t.From] && !holding[t.To] && !settles(t) {
				holding[t.To], grew = true, true
			}
		}
	}
	for i := range f.Transitions {
		t := &f.Transitions[i]
		if to := f.State(t.To); holding[t.From] && to != nil && to.Terminal && !settles(t) {
			return t
		}
	}
	return nil
}

// Reachable returns the states an order in one of from can reach through
// the flow's transitions, from included.
func (f *Flow) Reachable(from ...State) map[State]bool {
	reached := map[State]bool{}
	queue := slices.Clone(from)
	for _, s := range from {
		reached[s] = true
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, t := range f.Transitions {
			if t.From == s && !reached[t.To] {
				reached[t.To] = true
				queue = append(queue, t.To)
			}
		}
	}
	return reached
}

// Firing is a request to fire an event at an order.
type Firing struct {
	Event   Event
	Now     time.Time
	FiredBy FiredBy
	Actor   string // who: "engine", "api", an operator name
	Reason  string // why, in words, for the transition log
	// At, when set, is when the event happened in the world, which guards
	// judge instead of Now: a payment's provider success time, so that a
	// payment made in time is not refused for arriving late.
	At time.Time
	// Deadline marks a firing by the deadline engine: it is allowed only when
	// the order's deadline has passed at Now, so a deadline that was moved
	// after the order was claimed never fires early.
	Deadline bool
}

// Plan decides what firing fr.Event at o does, without touching storage. It
// returns the guarded transition for a store to apply, or an error: EINVALID
// when the flow has no such event, ECONFLICT when the order's state does not
// accept it, the order has ended (ClosedAt is set: a flow changed since may
// have made its state non-terminal) or a guard refuses it.
func (f *Flow) Plan(o *Order, fr Firing) (*OrderTransitionParams, error) {
	if f.Event(fr.Event) == nil {
		return nil, FieldError("event", "flow %s has no event %s", f.Name, fr.Event)
	}
	t := f.Transition(o.State, fr.Event)
	if t == nil {
		accepts := f.Accepts(o.State)
		if len(accepts) == 0 {
			return nil, Errorf(ECONFLICT, "order %s is %s, which accepts no events", o.OrderNo, o.State)
		}
		return nil, Errorf(ECONFLICT, "order %s is %s, which does not accept %s (it accepts %s)",
			o.OrderNo, o.State, fr.Event, joinEvents(accepts))
	}
	if o.ClosedAt != nil {
		// The order ended (S1: a terminal state stays terminal) in a state
		// that the flow, changed since, no longer ends in. Moving it again
		// would reopen an order whose stock and coupon were given back,
		// or make a closed order paid (S2).
		return nil, Errorf(ECONFLICT, "order %s ended in %s at %s and takes no more events (its flow %s has changed since: %s is no longer terminal)",
			o.OrderNo, o.State, o.ClosedAt.UTC().Format(time.RFC3339), f.Name, o.State)
	}
	if fr.Deadline {
		if o.DeadlineAt == nil || o.DeadlineAt.After(fr.Now) {
			return nil, ErrStale
		}
	}
	// Guards and the deadline judge the window of the order's state: its
	// PayBy only while it is in the state that took the intent.
	orig := o
	o = f.InWindow(o)
	at := fr.Now
	if !fr.At.IsZero() {
		at = fr.At
	}
	if err := f.deadlineDecides(o, t, at); err != nil {
		return nil, err
	}
	if t.Guard != nil {
		if err := t.Guard(o, at); err != nil {
			return nil, err
		}
	}
	p := &OrderTransitionParams{
		OrderID:     o.ID,
		FromState:   o.State,
		FromVersion: o.Version,
		ToState:     t.To,
		Event:       fr.Event,
		FiredBy:     fr.FiredBy,
		Actor:       fr.Actor,
		Reason:      fr.Reason,
		At:          fr.Now,
	}
	to := f.State(t.To)
	switch {
	case t.To == o.State:
		// Staying in a state (a member joining an open group) keeps its
		// deadline: the timer runs from entering the state.
		p.DeadlineAt = o.DeadlineAt
	case to.Deadline != nil:
		d := Ceil(fr.Now.Add(to.Deadline.After)) // never before the state's window ends
		p.DeadlineAt = &d
	}
	if to.Terminal {
		p.ClosedAt = &fr.Now
		p.CloseReason = string(fr.Event)
		// The deadline the order ends with is the cutoff its PAY guard
		// judged (BeforeDeadline): PayBy once the customer started paying
		// (DeadlineAt is then when the closer asks the provider again).
		p.ClosedDeadlineAt = cmp.Or(o.PayBy, o.DeadlineAt)
	}
	after := *orig
	after.State, after.DeadlineAt, after.Version = p.ToState, p.DeadlineAt, o.Version+1
	after.UpdatedAt, after.ClosedAt, after.CloseReason, after.FiredBy = fr.Now, p.ClosedAt, p.CloseReason, fr.FiredBy
	after.ClosedDeadlineAt = p.ClosedDeadlineAt
	for _, typ := range t.Emits {
		p.Outbox = append(p.Outbox, NewOutboxEvent(typ, &after, p))
	}
	return p, nil
}

// deadlineDecides refuses t, fired at o at at, when o's state has a
// deadline that has passed (its PayBy, once its customer started paying)
// and t would take the order elsewhere than the deadline's own event does
// (S2: a passed deadline cannot be moved, nor escaped). Until the claimer
// comes by, an event that leaves the order in its state or takes it where
// the deadline would (a CANCEL of an unpaid order: CLOSED either way) still
// goes; one that would let it out (a pre-order SUBMITted into a fresh
// payment window, a parcel SHIPped after the merchant's hours ran out, a
// group CANCELled instead of charged) does not. The events of Lapse's
// features (FeatureEvent) judge time by rules of their own: a payment by
// its provider time, a refund or a group's settlement by what happened.
func (f *Flow) deadlineDecides(o *Order, t *Transition, at time.Time) error {
	spec := f.State(o.State)
	if spec == nil || spec.Deadline == nil || t.To == o.State || t.Event == spec.Deadline.Event || f.FeatureEvent(t.Event) {
		return nil
	}
	cutoff := cmp.Or(o.PayBy, o.DeadlineAt)
	if cutoff == nil || at.Before(*cutoff) {
		return nil
	}
	d := f.Transition(o.State, spec.Deadline.Event)
	if d == nil || d.To == t.To {
		return nil
	}
	return Errorf(ECONFLICT, "order %s passed its deadline at %s: %s fires next and takes it to %s, not %s",
		o.OrderNo, cutoff.Format(time.RFC3339Nano), d.Event, d.To, t.To)
}

// DeadlineLoop is a cycle of states that an order goes round on their
// deadlines alone.
type DeadlineLoop []State

// DeadlineCycle returns the first cycle, from the states in declaration
// order, of states whose deadlines lead from one to the next and back to
// the first, or nil. An order in one would move on timers alone for ever,
// each move an event to deliver. A state whose deadline leads back to
// itself is one of length 1, and fires at once again and again: staying in
// a state keeps its deadline, which has passed.
func (f *Flow) DeadlineCycle() DeadlineLoop {
	next := func(st State) (State, bool) {
		s := f.State(st)
		if s == nil || s.Deadline == nil {
			return "", false
		}
		t := f.Transition(st, s.Deadline.Event)
		if t == nil {
			return "", false
		}
		return t.To, true
	}
	for _, s := range f.States {
		path := []State{s.Name}
		for st := s.Name; len(path) <= len(f.States); {
			to, ok := next(st)
			if !ok {
				break
			}
			if to == s.Name {
				return path
			}
			if slices.Contains(path, to) {
				break // a loop that s leads into: found from its own states
			}
			path, st = append(path, to), to
		}
	}
	return nil
}

// Problem says what is wrong with the loop, for an error message.
func (c DeadlineLoop) Problem() string {
	if len(c) == 1 {
		return fmt.Sprintf("state %s: its deadline leads back to %s, and staying in a state keeps its deadline, which has passed: it would fire at once, again and again", c[0], c[0])
	}
	names := make([]string, len(c)+1)
	for i, s := range c {
		names[i] = string(s)
	}
	names[len(c)] = string(c[0])
	return fmt.Sprintf("states %s lead from one to the next on their deadlines alone: an order would go round them for ever, on timers, without anyone acting", strings.Join(names, " → "))
}

// PaidStates returns the states of f, in declaration order, that an order
// reaches only by being paid: the targets of its Pays transitions and every
// state reachable from them (Validate refuses a flow in which another event
// leads into one from a state before payment, or a payment leads out of
// one: PaidWithoutPayment, PaidAgain). nil when f takes no
// payments. Every order in one of them has exactly one applied payment.
func (f *Flow) PaidStates() []State {
	paid := f.paid()
	var out []State
	for _, s := range f.States {
		if paid[s.Name] {
			out = append(out, s.Name)
		}
	}
	return out
}

func (f *Flow) paid() map[State]bool {
	if f.Pays == "" {
		return nil
	}
	var to []State
	for _, t := range f.Transitions {
		if t.Event == f.Pays {
			to = append(to, t.To)
		}
	}
	return f.Reachable(to...)
}

// PaidWithoutPayment returns the first transition, in declaration order,
// that takes an order from a state before payment into a paid state
// (PaidStates) by an event other than Pays, or nil. Such an order would be
// paid with no payment: by its deadline, or by any caller allowed to fire
// the event, and the merchant would ship it.
func (f *Flow) PaidWithoutPayment() *Transition {
	paid := f.paid()
	for i := range f.Transitions {
		if t := &f.Transitions[i]; t.Event != f.Pays && paid[t.To] && !paid[t.From] {
			return t
		}
	}
	return nil
}

// PaidAgain returns the first transition, in declaration order, by Pays
// out of a paid state (PaidStates), or nil. An order in one has had its
// payment applied; such a transition would apply another, under another
// transaction, beside it: the customer charged twice, and nothing to
// refund the second (S3).
func (f *Flow) PaidAgain() *Transition {
	paid := f.paid()
	for i := range f.Transitions {
		if t := &f.Transitions[i]; t.Event == f.Pays && paid[t.From] {
			return t
		}
	}
	return nil
}

// LeavesCharging returns the first transition, in declaration order, that
// moves a group buy on after its members' charges started (from a state a
// transition that emits Group.Charge leads to, or one after it short of
// the group settling) by another event than the group's own steps
// (Settled, Failed, Retry, Abandon), or nil; nil when f is no group buy.
// Any caller allowed to send its event would end the group with its
// members' charges captured: only abandoning refunds them.
func (f *Flow) LeavesCharging() *Transition {
	g := f.Group
	if g == (GroupEvents{}) {
		return nil
	}
	charging := map[State]bool{}
	var queue []State
	for _, t := range f.Transitions {
		if slices.Contains(t.Emits, g.Charge) && !charging[t.To] {
			charging[t.To] = true
			queue = append(queue, t.To)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, t := range f.Transitions {
			if t.From == s && t.Event != g.Settled && !charging[t.To] {
				charging[t.To] = true
				queue = append(queue, t.To)
			}
		}
	}
	own := []Event{g.Settled, g.Failed, g.Retry, g.Abandon}
	for i := range f.Transitions {
		if t := &f.Transitions[i]; charging[t.From] && !slices.Contains(own, t.Event) {
			return t
		}
	}
	return nil
}

// ReentersPayable returns the first transition, in declaration order, that
// takes an order into a state that takes payments and has a deadline (a
// payment window) after it was in such a state: from one, or from a state
// it can reach after leaving one. nil when there is none. An order keeps
// the PayBy that a customer's intent set in the first window, so the next
// would find itself closed by it.
func (f *Flow) ReentersPayable() *Transition {
	if f.Pays == "" {
		return nil
	}
	window := func(st State) bool {
		s := f.State(st)
		return s != nil && s.Deadline != nil && f.Transition(st, f.Pays) != nil
	}
	var next []State
	for _, t := range f.Transitions {
		if window(t.From) && t.To != t.From {
			next = append(next, t.To)
		}
	}
	after := f.Reachable(next...)
	for i := range f.Transitions {
		if t := &f.Transitions[i]; window(t.To) && t.From != t.To && (window(t.From) || after[t.From]) {
			return t
		}
	}
	return nil
}

// ClosableByHand reports whether an operator's manual close may end an
// order in st by firing its deadline now: st has a deadline whose
// transition leads to a terminal state, and st is not one an order reaches
// by being paid (the state a payment, f.Pays, leads to, and every state
// after it). So an open group buy, whose deadline settles it and charges
// its members, and a state whose deadline hands the order to someone (a
// review) are left alone, and so is a paid order whose state has a
// deadline of its own (a merchant's 48 hours to ship, a buyer's days to
// confirm receipt), which a close would refund or confirm: a manual close
// cuts short a wait for payment, and nothing else. A flow that takes no
// payment (f.Pays empty) has no paid states to tell apart.
func (f *Flow) ClosableByHand(st State) bool {
	s := f.State(st)
	if s == nil || s.Deadline == nil {
		return false
	}
	t := f.Transition(st, s.Deadline.Event)
	if t == nil {
		return false
	}
	if to := f.State(t.To); to == nil || !to.Terminal {
		return false
	}
	return !f.paid()[st]
}

// InWindow returns o as the window of its state sees it: o itself, or,
// when o has a PayBy (its customer started paying) but its state takes no
// payment, a copy without it. A PayBy is the end of the payment window of
// the state that took the intent; the order keeps it after it moves on,
// and a later state's deadline (a merchant's 48 hours to ship a paid
// order) is its own, not cut short by it.
func (f *Flow) InWindow(o *Order) *Order {
	if o.PayBy == nil || (f.Pays != "" && f.Transition(o.State, f.Pays) != nil) {
		return o
	}
	c := *o
	c.PayBy = nil
	return &c
}

// FeatureEvent reports whether ev is an event that one of Lapse's features
// fires in f: a verified payment's, a refund's, a group buy's or issuing's.
func (f *Flow) FeatureEvent(ev Event) bool {
	if ev == "" {
		return false
	}
	r, g, is := f.Refunds, f.Group, f.Issues
	return slices.Contains([]Event{f.Pays, r.Start, r.Done, r.Partial, g.Join, g.Settled, g.Failed, g.Retry, g.Abandon,
		is.Issued, is.Failed, is.GiveUp, is.Retry}, ev)
}

// featureRoles returns the events of Lapse's features in f (FeatureEvent)
// with the role each plays, in a fixed order; unset ones are "".
func (f *Flow) featureRoles() []struct {
	ev   Event
	role string
} {
	r, g, is := f.Refunds, f.Group, f.Issues
	return []struct {
		ev   Event
		role string
	}{{f.Pays, "pays"}, {r.Start, "refunds start"}, {r.Done, "refunds done"}, {r.Partial, "refunds partial"},
		{g.Join, "group join"}, {g.Settled, "group settled"}, {g.Failed, "group failed"}, {g.Retry, "group retry"},
		{g.Abandon, "group abandon"}, {is.Issued, "issues issued"}, {is.Failed, "issues failed"},
		{is.GiveUp, "issues give_up"}, {is.Retry, "issues retry"}}
}

// SharedFeatureEvent returns the first event of Lapse's features that f
// names in two roles, with the two, or "". Each feature tells what
// happened by the event it fires and plans the next step by the event
// the order's state takes: one event in two roles (a refund's start and
// its done) would have a second refund asked while the first is under
// way end the order refunded before the provider was asked.
func (f *Flow) SharedFeatureEvent() (ev Event, a, b string) {
	roles := f.featureRoles()
	for i, x := range roles {
		for _, y := range roles[:i] {
			if x.ev != "" && x.ev == y.ev {
				return x.ev, y.role, x.role
			}
		}
	}
	return "", "", ""
}

func joinEvents(es []Event) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = string(e)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}
