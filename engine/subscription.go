package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse"
)

// Subscription routes outbox events to one subscriber. Every event it matches
// gets its own delivery for it, written with the event, and the Deliverer
// hands it over with its own attempts, schedule and lease.
type Subscription struct {
	// Name identifies the subscriber on its deliveries and as the consumer of
	// its dedup rows. Unique; lower case letters, digits, - and _.
	Name string
	// Events are the event types it receives; "order.*" matches every type
	// that starts with "order.". Default: order.*.
	Events []string
	// Flows limits it to the events of these flows. Default: every flow.
	Flows []string
	// Handler delivers to an outside system; Local applies an effect in the
	// database instead. Exactly one is set. A Handler that is also a
	// lapse.BatchHandler is handed the deliveries of each claim in one call,
	// and those it delivered are recorded in one statement: the Deliverer
	// then claims once a quarter of its Concurrency is free, and a batch's
	// slots are free once the handler has answered, while its outcomes are
	// recorded (two batches at most being recorded at once).
	Handler lapse.Handler
	Local   lapse.LocalHandler
	// Schedule is its retry schedule. Default: lapse.DefaultSchedule().
	Schedule lapse.Schedule
	// Timeout bounds one attempt. Default: 30s. It may exceed the
	// Deliverer's Lease: the lease is renewed while the attempt runs.
	Timeout time.Duration
	// Concurrency bounds its attempts in flight in this process (a bulkhead):
	// the deliveries handed to its handler and not yet answered.
	// Default: 8.
	Concurrency int
	// YieldsToCloses holds its deliveries back while this process's
	// Claimer burns down a backlog of due orders, for at most the
	// Deliverer's CloseHold (close_hold.go): for a stream of events
	// (lapse serve's webhook, NATS and RabbitMQ subscriptions), not for an
	// effect that others wait for.
	YieldsToCloses bool
	// Filter, when set, limits it to the orders for which it returns true;
	// other orders' events get no delivery for it at all.
	Filter func(*lapse.Order) bool
	// Relay, for a Handler that is a lapse.BatchHandler, relays its events
	// (relay.go) when the store can (lapse.Relayer: PostgreSQL): they get
	// no delivery row when written; a relay reads them from the outbox in
	// commit order and hands them over in batches of up to Concurrency,
	// and only those its handler did not take get a delivery row, retried
	// from there. Events are relayed once this process's Deliverer has
	// made the relay's cursor (its Start does, before it returns); until
	// then they get delivery rows. On a store that cannot relay it has no
	// effect.
	Relay bool

	// relayed is set by New when Relay applies: the store can relay.
	relayed bool
	// cursor is set once this process has made or found the relay's
	// cursor (Deliverer.relayMake): until then its events get delivery
	// rows, since other processes find a relay's events through its
	// cursor, and a process that stopped for good before it made one
	// would leave them to nobody.
	cursor atomic.Bool

	// schedule is Schedule as the deliverer reads it; SetSchedule replaces
	// it at run time.
	schedule atomic.Pointer[lapse.Schedule]

	// kick wakes the subscription's delivery loop when this process writes
	// deliveries for it, and relayKick its relay when it writes events for
	// it to relay (Engine.delivered): only its own, so that an event for
	// one subscriber sends no other loop to the store to find nothing.
	kick, relayKick broadcast
}

// retries returns the subscription's retry schedule as it stands.
func (s *Subscription) retries() lapse.Schedule {
	if p := s.schedule.Load(); p != nil {
		return *p
	}
	return s.Schedule
}

// SetSchedule replaces the retry schedule of the subscription called name
// (a configuration reload): failures from now on wait as it says. Errors:
// EINVALID for an unknown subscription or an invalid schedule.
func (e *Engine) SetSchedule(name string, sch lapse.Schedule) error {
	if err := sch.Validate(); err != nil {
		return lapse.Errorf(lapse.EINVALID, "subscription %s: %v", name, err)
	}
	for _, s := range e.subs {
		if s.Name == name {
			s.schedule.Store(&sch)
			return nil
		}
	}
	return lapse.Errorf(lapse.EINVALID, "no subscription %q", name)
}

func (s *Subscription) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("engine: subscription %q: %s", s.Name, fmt.Sprintf(format, args...))
	}
	if s.Name == "" || strings.Trim(s.Name, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return bad("names are lower case letters, digits, - and _")
	}
	if (s.Handler == nil) == (s.Local == nil) {
		return bad("set exactly one of Handler and Local")
	}
	if _, batch := s.Handler.(lapse.BatchHandler); s.Relay && !batch {
		return bad("only a lapse.BatchHandler can be relayed")
	}
	if len(s.Events) == 0 {
		s.Events = []string{"order.*"}
	}
	for _, ev := range s.Events {
		if ev == "" || ev == "*" || strings.Count(ev, "*") > 1 || (strings.Contains(ev, "*") && !strings.HasSuffix(ev, ".*")) {
			return bad("event pattern %q: use a type such as order.closed or a prefix such as order.*", ev)
		}
	}
	if s.Schedule.Steps == nil && s.Schedule.Base == 0 {
		s.Schedule = lapse.DefaultSchedule()
	}
	if err := s.Schedule.Validate(); err != nil {
		return bad("%v", err)
	}
	sch := s.Schedule
	s.schedule.Store(&sch)
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Second
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 8
	}
	return nil
}

// matches reports whether the subscription receives events of type typ
// about order o.
func (s *Subscription) matches(o *lapse.Order, typ string) bool {
	if len(s.Flows) > 0 && !slices.Contains(s.Flows, o.Flow) {
		return false
	}
	if s.Filter != nil && !s.Filter(o) {
		return false
	}
	return slices.ContainsFunc(s.Events, func(ev string) bool { return EventMatches(ev, typ) })
}

// fanOut names, on each event about order o, the subscribers it goes to.
func (e *Engine) fanOut(o *lapse.Order, evs []lapse.OutboxEvent) {
	for i := range evs {
		e.route(o, &evs[i], "")
	}
}

// route names on ev, an event about order o, the subscriptions that receive
// it, leaving out except: those relayed in its Relays (once their cursor is
// made), the others in its Subscribers.
func (e *Engine) route(o *lapse.Order, ev *lapse.OutboxEvent, except string) {
	ev.Subscribers, ev.Relays = nil, nil
	for _, s := range e.subs {
		switch {
		case s.Name == except || !s.matches(o, ev.Type):
		case s.relayed && s.cursor.Load():
			ev.Relays = append(ev.Relays, s.Name)
		default:
			ev.Subscribers = append(ev.Subscribers, s.Name)
		}
	}
}

// Subscriptions returns the engine's subscriptions.
func (e *Engine) Subscriptions() []*Subscription { return slices.Clone(e.subs) }
