package engine_test

import "time"

// The model's flows: the rules of the three built-in flows written again
// from SPEC §3, as plain tables, without the flows package or the engine's
// Plan. TestModel runs the engine and these tables side by side; they must
// agree on every order's state, version, deadline and events.

// modelMove is one edge: to the state To, emitting Emits; Guarded moves
// (PAY, JOIN) happen only before the order's deadline (or, once its
// customer started paying, its pay-by).
type modelMove struct {
	To      string
	Emits   string
	Guarded bool
}

// modelTimer is a state's deadline: After entering it, Event fires.
type modelTimer struct {
	After time.Duration
	Event string
}

type modelFlow struct {
	Name     string
	Initial  string
	Timers   map[string]modelTimer
	Moves    map[string]map[string]modelMove // state → event → move
	Events   map[string]bool                 // the flow's events; true: internal (the events API refuses it)
	Terminal map[string]bool
	Pays     bool          // takes payments (PAY)
	Grace    time.Duration // added to the window by a payment intent started in time
	Refunds  bool          // merchant refunds (REFUND, REFUND_DONE, REFUND_PARTIAL)
	Holds    bool          // reserves stock at creation; order.closed releases it, order.paid consumes it
	Group    bool
	Issues   bool // a paid order issues its cards (ISSUE)
}

func (f *modelFlow) move(state, event string) (modelMove, bool) {
	m, ok := f.Moves[state][event]
	return m, ok
}

// open reports whether members join a group buy in state.
func (f *modelFlow) open(state string) bool {
	_, ok := f.move(state, "JOIN")
	return ok
}

var modelCheckout = &modelFlow{
	Name:    "checkout",
	Initial: "UNPAID",
	Timers:  map[string]modelTimer{"UNPAID": {15 * time.Minute, "TIMEOUT"}},
	Moves: map[string]map[string]modelMove{
		"UNPAID": {
			"PAY":     {"PAID", "order.paid", true},
			"TIMEOUT": {"CLOSED", "order.closed", false},
			"CANCEL":  {"CLOSED", "order.closed", false},
		},
		"PAID": {"REFUND": {"REFUNDING", "order.refunding", false}},
		"REFUNDING": {
			"REFUND_DONE":    {"REFUNDED", "order.refunded", false},
			"REFUND_PARTIAL": {"PAID", "order.refund_settled", false},
		},
	},
	Events: map[string]bool{"PAY": true, "TIMEOUT": true, "CANCEL": false, "REFUND": true,
		"REFUND_DONE": true, "REFUND_PARTIAL": true},
	Terminal: map[string]bool{"CLOSED": true, "REFUNDED": true},
	Pays:     true,
	Grace:    2 * time.Minute,
	Refunds:  true,
	Holds:    true,
}

var modelGroupbuy = &modelFlow{
	Name:    "groupbuy",
	Initial: "OPEN",
	Timers:  map[string]modelTimer{"OPEN": {24 * time.Hour, "CLOSE"}},
	Moves: map[string]map[string]modelMove{
		"OPEN": {
			"JOIN":   {"OPEN", "group.joined", true},
			"CLOSE":  {"CLOSED", "group.closed", false},
			"CANCEL": {"CANCELLED", "group.cancelled", false},
		},
		"CLOSED": {
			"SETTLE": {"SETTLED", "group.settled", false},
			"FAIL":   {"FAILED", "group.failed", false},
		},
		"FAILED": {"RETRY": {"CLOSED", "group.closed", false}},
	},
	Events:   map[string]bool{"JOIN": true, "CLOSE": true, "CANCEL": false, "SETTLE": true, "FAIL": true, "RETRY": true},
	Terminal: map[string]bool{"SETTLED": true, "CANCELLED": true},
	Group:    true,
}

var modelMembership = func() *modelFlow {
	f := &modelFlow{
		Name:    "membership",
		Initial: "PRE_ORDER",
		Timers: map[string]modelTimer{
			"PRE_ORDER": {24 * time.Hour, "EXPIRE"},
			"WAIT_PAY":  {15 * time.Minute, "TIMEOUT"},
		},
		Moves: map[string]map[string]modelMove{
			"PRE_ORDER": {
				"SUBMIT": {"WAIT_PAY", "membership.submitted", false},
				"CANCEL": {"CANCELLED", "membership.cancelled", false},
				"EXPIRE": {"CANCELLED", "membership.cancelled", false},
			},
			"WAIT_PAY": {
				"PAY":     {"PAID", "membership.paid", true},
				"TIMEOUT": {"CANCELLED", "membership.cancelled", false},
				"CANCEL":  {"CANCELLED", "membership.cancelled", false},
			},
			"PAID": {
				"ISSUE":        {"ISSUED", "membership.issued", false},
				"ISSUE_FAILED": {"COMPENSATING", "membership.compensating", false},
			},
			"ISSUED": {},
			"COMPENSATING": {
				"ISSUE":    {"ISSUED", "membership.issued", false},
				"ESCALATE": {"MANUAL_REVIEW", "membership.manual_review", false},
			},
			"MANUAL_REVIEW": {"RETRY": {"COMPENSATING", "membership.retried", false}},
			"REFUNDING": {
				"REFUND_DONE": {"REFUNDED", "membership.refunded", false},
				// The cards went when the refund started: a partial refund
				// needs a person.
				"REFUND_PARTIAL": {"MANUAL_REVIEW", "membership.refund_review", false},
			},
		},
		Events: map[string]bool{"SUBMIT": false, "EXPIRE": true, "PAY": true, "TIMEOUT": true, "CANCEL": false,
			"ISSUE": true, "ISSUE_FAILED": true, "ESCALATE": true, "RETRY": true, "REFUND": true,
			"REFUND_DONE": true, "REFUND_PARTIAL": true},
		Terminal: map[string]bool{"CANCELLED": true, "REFUNDED": true},
		Pays:     true,
		Grace:    2 * time.Minute,
		Refunds:  true,
		Issues:   true,
	}
	for _, s := range []string{"PAID", "ISSUED", "COMPENSATING", "MANUAL_REVIEW"} {
		f.Moves[s]["REFUND"] = modelMove{"REFUNDING", "membership.refunding", false}
	}
	return f
}()
