package lapse_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

func TestBuiltinFlowsValidate(t *testing.T) {
	for _, f := range flows.Builtin() {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
}

func TestFlowValidateRefuses(t *testing.T) {
	cases := []struct {
		want string
		edit func(f *lapse.Flow)
	}{
		{"name", func(f *lapse.Flow) { f.Name = "Bad Name" }},
		{"declared twice", func(f *lapse.Flow) { f.States = append(f.States, lapse.StateSpec{Name: flows.Paid}) }},
		{"initial state", func(f *lapse.Flow) { f.Initial = "NOPE" }},
		{"unknown state", func(f *lapse.Flow) { f.Transitions[0].To = "NOPE" }},
		{"unknown event", func(f *lapse.Flow) { f.Transitions[0].Event = "NOPE" }},
		{"leaves terminal", func(f *lapse.Flow) {
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Closed, Event: flows.Pay, To: flows.Paid})
		}},
		{"already has a transition", func(f *lapse.Flow) {
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Unpaid, Event: flows.Pay, To: flows.Closed})
		}},
		{"does not accept", func(f *lapse.Flow) { f.States[0].Deadline.Event = flows.RefundDone }},
		{"positive duration", func(f *lapse.Flow) { f.States[0].Deadline.After = 0 }},
		{"cannot have a guard", func(f *lapse.Flow) { f.Transitions[1].Guard = lapse.BeforeDeadline }},
		{"unreachable", func(f *lapse.Flow) { f.States = append(f.States, lapse.StateSpec{Name: "LIMBO"}) }},
		{"terminal and cannot have a deadline", func(f *lapse.Flow) {
			f.States[2].Deadline = &lapse.Deadline{After: time.Minute, Event: flows.Pay}
		}},
		{"no transition emits", func(f *lapse.Flow) { f.ReleaseOn = append(f.ReleaseOn, "order.vanished") }},
		{"both releases and consumes", func(f *lapse.Flow) { f.ConsumeOn = append(f.ConsumeOn, flows.EventOrderClosed) }},
		{"must look like", func(f *lapse.Flow) { f.Transitions[0].Emits = []string{"Paid"} }},
		// Two events of one type, each with its own id, would be acted on
		// twice by every subscriber.
		{"emits order.closed twice", func(f *lapse.Flow) {
			f.Transitions[1].Emits = []string{flows.EventOrderClosed, flows.EventOrderClosed}
		}},
		{"grace must be at most 366 days", func(f *lapse.Flow) { f.Grace = lapse.DefaultMaxDeadline + time.Second }},
		// S4: an order that holds stock and a coupon may end only by a
		// transition that gives them back or uses them up, also two steps
		// on from the initial state.
		{"ends the order holding", func(f *lapse.Flow) {
			f.States = append(f.States, lapse.StateSpec{Name: "CANCELLED", Terminal: true})
			f.Events = append(f.Events, lapse.EventSpec{Name: "ABANDON"})
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Unpaid, Event: "ABANDON", To: "CANCELLED",
				Emits: []string{"order.cancelled"}})
		}},
		{"ends the order holding", func(f *lapse.Flow) {
			f.States = append(f.States, lapse.StateSpec{Name: "HELD"}, lapse.StateSpec{Name: "GONE", Terminal: true})
			f.Events = append(f.Events, lapse.EventSpec{Name: "HOLD"}, lapse.EventSpec{Name: "DROP"})
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Unpaid, Event: "HOLD", To: "HELD"},
				lapse.Transition{From: "HELD", Event: "DROP", To: "GONE"})
		}},
		// A merchant's stock port takes order.created as a new order's
		// hold; an administrator's notifier, delivery.dead as a lost delivery.
		// A refund is asked of its provider by the subscriber of what its
		// start emits: one that emits nothing was answered 201 and never
		// asked, its order refunding for good.
		{"refunds: starting one", func(f *lapse.Flow) {
			for i := range f.Transitions {
				if f.Transitions[i].Event == flows.Refund {
					f.Transitions[i].Emits = nil
				}
			}
		}},
		{"only the engine writes", func(f *lapse.Flow) { f.Transitions[0].Emits = []string{lapse.EventOrderCreated} }},
		{"only the engine writes", func(f *lapse.Flow) { f.Transitions[0].Emits = []string{lapse.EventDeliveryDead} }},
		// Flows written in Go are held to what a flow file is: an order
		// that can never end holds what it holds for ever.
		{"no state is terminal", func(f *lapse.Flow) {
			for i := range f.States {
				f.States[i].Terminal = false
			}
			f.Transitions = slices.DeleteFunc(f.Transitions, func(t lapse.Transition) bool { return t.From == flows.Closed || t.From == flows.Refunded })
		}},
		{"state STUCK leads to no terminal state", func(f *lapse.Flow) {
			f.States = append(f.States, lapse.StateSpec{Name: "STUCK"})
			f.Events = append(f.Events, lapse.EventSpec{Name: "PARK"})
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Paid, Event: "PARK", To: "STUCK"})
		}},
		// Paid without a payment: by its deadline, or by any key that may
		// fire a plain event (reconcile then finds a paid order that no
		// payment was applied to).
		{"TIMEOUT--> PAID makes the order paid without a payment", func(f *lapse.Flow) {
			f.Transitions[1].To = flows.Paid
			f.Transitions[1].Emits = []string{flows.EventOrderPaid}
		}},
		{"MARK_PAID--> PAID makes the order paid without a payment", func(f *lapse.Flow) {
			f.Events = append(f.Events, lapse.EventSpec{Name: "MARK_PAID"})
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Unpaid, Event: "MARK_PAID", To: flows.Paid,
				Emits: []string{flows.EventOrderPaid}})
		}},
		{"CANCEL--> REFUNDED makes the order paid without a payment", func(f *lapse.Flow) {
			for i := range f.Transitions {
				if f.Transitions[i].From == flows.Unpaid && f.Transitions[i].Event == flows.Cancel {
					f.Transitions[i].To = flows.Refunded
				}
			}
		}},
		// A payment taken by an order that is paid already (PAID --PAY-->,
		// or back to an unpaid state a payment leads from): a second
		// payment under another transaction was applied to it beside the
		// first, the customer charged twice and nothing refunding it (S3).
		{"PAID --PAY--> PAID takes a payment for an order that is paid already", func(f *lapse.Flow) {
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Paid, Event: flows.Pay, To: flows.Paid,
				Emits: []string{"order.paid_again"}})
		}},
		{"REFUNDING --PAY--> REFUNDED takes a payment for an order that is paid already", func(f *lapse.Flow) {
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Refunding, Event: flows.Pay, To: flows.Refunded,
				Emits: []string{"order.paid_again"}})
		}},
		{"UNPAID --PAY--> PAID takes a payment for an order that is paid already", func(f *lapse.Flow) {
			f.States[0].Deadline = nil
			f.Transitions = slices.DeleteFunc(f.Transitions, func(t lapse.Transition) bool { return t.Event == flows.Timeout })
			f.Events = append(f.Events, lapse.EventSpec{Name: "REOPEN"})
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.Paid, Event: "REOPEN", To: flows.Unpaid,
				Emits: []string{"order.reopened"}})
		}},
		// One event in two roles of the refund path: a second refund asked
		// while the first was under way fired REFUND from REFUNDING as
		// its start, and it ended the order REFUNDED at once, before the
		// provider was asked (and whatever it answered).
		{"REFUND names two of the events of Lapse's features (refunds start and refunds done)", func(f *lapse.Flow) {
			f.Refunds.Done = flows.Refund
			for i := range f.Transitions {
				if f.Transitions[i].Event == flows.RefundDone {
					f.Transitions[i].Event = flows.Refund
				}
			}
			f.Events = slices.DeleteFunc(f.Events, func(e lapse.EventSpec) bool { return e.Name == flows.RefundDone })
		}},
		{"REFUND_DONE names two of the events of Lapse's features (refunds done and refunds partial)", func(f *lapse.Flow) {
			f.Refunds.Partial = flows.RefundDone
			f.Transitions = slices.DeleteFunc(f.Transitions, func(t lapse.Transition) bool { return t.Event == flows.RefundPartial })
			f.Events = slices.DeleteFunc(f.Events, func(e lapse.EventSpec) bool { return e.Name == flows.RefundPartial })
		}},
		// Created in a terminal state but never closed: open for ever,
		// and one that holds kept its stock reserved.
		{"initial state UNPAID is terminal", func(f *lapse.Flow) {
			f.States[0].Terminal, f.States[0].Deadline = true, nil
			f.Transitions = slices.DeleteFunc(f.Transitions, func(t lapse.Transition) bool { return t.From == flows.Unpaid })
		}},
		// A timer is no payment: the order was PAID at its deadline,
		// fired_by timer, with nothing paid.
		{"its deadline fires PAY, which only one of Lapse's features fires", func(f *lapse.Flow) {
			f.States[0].Deadline.Event = flows.Pay
			f.Transitions[0].Guard = nil
		}},
		// A deadline that leaves the order where it is keeps the passed
		// deadline: it fired again at once, hundreds of times a second.
		{"its deadline leads back to UNPAID", func(f *lapse.Flow) { f.Transitions[1].To = flows.Unpaid }},
		// Two states whose deadlines lead to each other: round and round,
		// on timers alone.
		{"states UNPAID → HELD → UNPAID lead from one to the next on their deadlines alone", func(f *lapse.Flow) {
			f.States = append(f.States, lapse.StateSpec{Name: "HELD", Deadline: &lapse.Deadline{After: time.Second, Event: flows.Timeout}})
			f.Transitions[1].To = "HELD"
			f.Transitions = append(f.Transitions, lapse.Transition{From: "HELD", Event: flows.Timeout, To: flows.Unpaid},
				lapse.Transition{From: "HELD", Event: flows.Cancel, To: flows.Closed, Emits: []string{flows.EventOrderClosed}})
		}},
		// A type longer than a RabbitMQ routing key could be written, but
		// never published: every delivery of it would die.
		{"at most 64 long", func(f *lapse.Flow) { f.Transitions[0].Emits = []string{"order." + strings.Repeat("x", 59)} }},
		// Every firing writes an event of each type it emits, and
		// Validate compares each with the others.
		{"emits 17 event types: a transition emits at most 16", func(f *lapse.Flow) {
			for i := range 16 {
				f.Transitions[0].Emits = append(f.Transitions[0].Emits, fmt.Sprintf("order.paid%d", i))
			}
		}},
		{"release_on names order.closed twice", func(f *lapse.Flow) { f.ReleaseOn = append(f.ReleaseOn, flows.EventOrderClosed) }},
		{"consume_on names order.paid twice", func(f *lapse.Flow) { f.ConsumeOn = append(f.ConsumeOn, flows.EventOrderPaid) }},
		{"a flow has at most 256", func(f *lapse.Flow) {
			for i := range lapse.MaxFlowStates {
				f.States = append(f.States, lapse.StateSpec{Name: lapse.State(fmt.Sprintf("S%d", i))})
			}
		}},
		{"a flow has at most 1024", func(f *lapse.Flow) {
			for range lapse.MaxFlowTransitions {
				f.Transitions = append(f.Transitions, f.Transitions[0])
			}
		}},
	}
	if f := flows.Checkout(); f.Validate() != nil || !lapse.ValidEmit("order."+strings.Repeat("x", 58)) {
		t.Fatal("checkout, or an emitted type 64 long, is refused")
	}
	for _, c := range cases {
		f := flows.Checkout()
		c.edit(f)
		err := f.Validate()
		if err == nil || lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error about %q, got %v", c.want, err)
		}
	}
}

func TestPlan(t *testing.T) {
	f := flows.Checkout()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deadline := now.Add(time.Minute)
	o := &lapse.Order{ID: 7, OrderNo: "P-1", Flow: "checkout", State: flows.Unpaid, DeadlineAt: &deadline, Version: 3, Amount: 100, Currency: "CNY"}

	p, err := f.Plan(o, lapse.Firing{Event: flows.Cancel, Now: now, FiredBy: lapse.FiredByAPI, Actor: "api", Reason: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if p.OrderID != 7 || p.FromState != flows.Unpaid || p.FromVersion != 3 || p.ToState != flows.Closed || p.DeadlineAt != nil ||
		p.ClosedAt == nil || !p.ClosedAt.Equal(now) || p.CloseReason != "CANCEL" || len(p.Outbox) != 1 || p.Outbox[0].Type != flows.EventOrderClosed {
		t.Errorf("CANCEL plan = %+v", p)
	}
	if p.ClosedDeadlineAt == nil || !p.ClosedDeadlineAt.Equal(deadline) {
		t.Errorf("CANCEL plan's closed deadline = %v, want the deadline it had, %v", p.ClosedDeadlineAt, deadline)
	}
	ev, err := lapse.EventOrder(&p.Outbox[0])
	if err != nil || ev.State != flows.Closed || ev.Version != 4 || ev.CloseReason != "CANCEL" ||
		ev.ClosedDeadlineAt == nil || !ev.ClosedDeadlineAt.Equal(deadline) {
		t.Errorf("the event's order = %+v, %v", ev, err)
	}
	// Once the customer started paying, the cutoff is PayBy; DeadlineAt is
	// when the closer asks the provider again.
	intent := *o
	payBy, ask := deadline.Add(5*time.Minute), deadline.Add(6*time.Minute)
	intent.PayBy, intent.DeadlineAt = &payBy, &ask
	if p, err := f.Plan(&intent, lapse.Firing{Event: flows.Timeout, Now: ask, Deadline: true}); err != nil ||
		p.ClosedDeadlineAt == nil || !p.ClosedDeadlineAt.Equal(payBy) {
		t.Errorf("TIMEOUT of a started payment: closed deadline %v (%v), want its pay_by %v", p, err, payBy)
	}
	if p, err := f.Plan(o, lapse.Firing{Event: flows.Pay, Now: now}); err != nil || p.ClosedDeadlineAt != nil {
		t.Errorf("PAY plan = %+v, %v: no closed deadline while the order is not terminal", p, err)
	}

	// A deadline firing before the deadline is stale; PAY at the deadline is refused.
	if _, err := f.Plan(o, lapse.Firing{Event: flows.Timeout, Now: now, Deadline: true}); err != lapse.ErrStale {
		t.Errorf("early deadline firing = %v, want ErrStale", err)
	}
	if _, err := f.Plan(o, lapse.Firing{Event: flows.Pay, Now: deadline}); lapse.ErrorCode(err) != lapse.ECONFLICT {
		t.Errorf("PAY at the deadline = %v", err)
	}
	closed := *o
	closed.State = flows.Closed
	if _, err := f.Plan(&closed, lapse.Firing{Event: flows.Pay, Now: now}); lapse.ErrorCode(err) != lapse.ECONFLICT || !strings.Contains(err.Error(), "accepts no events") {
		t.Errorf("PAY on CLOSED = %v", err)
	}
	paid := *o
	paid.State = flows.Paid
	if _, err := f.Plan(&paid, lapse.Firing{Event: flows.Cancel, Now: now}); err == nil || !strings.Contains(err.Error(), "it accepts REFUND") {
		t.Errorf("CANCEL on PAID = %v", err)
	}
	if _, err := f.Plan(o, lapse.Firing{Event: "BOGUS", Now: now}); lapse.ErrorCode(err) != lapse.EINVALID {
		t.Errorf("unknown event = %v", err)
	}
}

func TestNewEventID(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a, b := lapse.NewEventID(at), lapse.NewEventID(at.Add(time.Millisecond))
	if len(a) != 36 || a[14] != '7' || a == b || !(a < b) {
		t.Errorf("ids %s, %s: want UUIDv7s that sort by time", a, b)
	}
}

// TestFlowValidateRefusesKeptBenefits: a flow that issues benefits and takes
// refunds revokes them whenever a refund starts. One that named no revoke
// event, or whose refund from one state emitted none, was valid, and its
// refunded orders kept their cards, visits and all.
func TestFlowValidateRefusesKeptBenefits(t *testing.T) {
	for name, edit := range map[string]func(f *lapse.Flow){
		"no revoke event": func(f *lapse.Flow) { f.Issues.Revoke = nil },
		"a refund from MANUAL_REVIEW that revokes nothing": func(f *lapse.Flow) {
			f.Transitions = slices.DeleteFunc(f.Transitions, func(t lapse.Transition) bool {
				return t.From == flows.ManualReview && t.Event == flows.Refund
			})
			f.Transitions = append(f.Transitions, lapse.Transition{From: flows.ManualReview, Event: flows.Refund,
				To: flows.MembershipRefunding, Emits: []string{"membership.refund_started"}})
		},
	} {
		f := flows.Membership()
		edit(f)
		err := f.Validate()
		if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "keep its benefits") {
			t.Errorf("%s: Validate = %v, want it refused: the order would keep its benefits", name, err)
		}
	}
}

// TestFlowValidateRefusesLeftCharging: a group buy whose members may have
// been charged (it closed, and did not settle) is moved on only by the
// group's own steps: a CANCEL of a failed group, or of one being charged,
// by any key that may send the event, ended it with its members' charges
// captured and nothing to refund them (the abandoning does).
func TestFlowValidateRefusesLeftCharging(t *testing.T) {
	for name, from := range map[string]lapse.State{"a failed group cancelled": flows.GroupFailed, "a group cancelled while charged": flows.GroupClosed} {
		f := flows.Groupbuy()
		f.Transitions = append(f.Transitions, lapse.Transition{From: from, Event: flows.Cancel, To: flows.GroupCancelled,
			Emits: []string{flows.EventGroupCancelled}})
		err := f.Validate()
		if lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "after its members' charges started") {
			t.Errorf("%s: Validate = %v, want it refused: members charged would not be refunded", name, err)
		}
	}
	// After it settled, the group is the merchant's.
	f := flows.Groupbuy()
	f.States = append(f.States, lapse.StateSpec{Name: "SHIPPED", Terminal: true})
	f.Events = append(f.Events, lapse.EventSpec{Name: "SHIP"})
	for i := range f.States {
		if f.States[i].Name == flows.GroupSettled {
			f.States[i].Terminal = false
		}
	}
	f.Transitions = append(f.Transitions, lapse.Transition{From: flows.GroupSettled, Event: "SHIP", To: "SHIPPED", Emits: []string{"group.shipped"}})
	if err := f.Validate(); err != nil {
		t.Errorf("a settled group shipped: %v", err)
	}
}
