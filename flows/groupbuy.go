package flows

import (
	"time"

	"github.com/lapsehq/lapse"
)

// States of the groupbuy flow. A group is an order whose amount is the price
// each member pays.
const (
	// GroupOpen: members join until the deadline, which closes the group.
	GroupOpen lapse.State = "OPEN"
	// GroupClosed: no one joins any more; the settle subscriber charges every
	// member, then SETTLE or FAIL moves the group on. A group found CLOSED
	// after a crash goes straight on charging.
	GroupClosed lapse.State = "CLOSED"
	// GroupSettled: terminal. Every member was charged.
	GroupSettled lapse.State = "SETTLED"
	// GroupFailed: charges kept failing through the retry schedule, or the
	// group closed with fewer members than it needs (its min_members, at
	// least one) and no one was charged; the organiser and the admins were
	// told. Only an operator moves it: RETRY, or ABANDON.
	GroupFailed lapse.State = "FAILED"
	// GroupAbandoned: terminal. An operator gave up on the failed group:
	// every member charged is refunded, once; the others are released.
	GroupAbandoned lapse.State = "ABANDONED"
	// GroupCancelled: terminal. The organiser cancelled the open group; no
	// one was charged.
	GroupCancelled lapse.State = "CANCELLED"
)

// Events of the groupbuy flow.
const (
	Join   lapse.Event = "JOIN"   // a member joined (the join API only)
	Close  lapse.Event = "CLOSE"  // the group's deadline passed (deadline engine only)
	Settle lapse.Event = "SETTLE" // every member was charged (settle subscriber only)
	Fail   lapse.Event = "FAIL"   // charges failed after the last retry, or too few members (settle subscriber only)
	Retry  lapse.Event = "RETRY"  // an operator retries a failed group (the retry API only)
	// Abandon: an operator gives up on a failed group (the abandon API only).
	Abandon lapse.Event = "ABANDON"
)

// Events emitted by the groupbuy flow.
const (
	EventGroupJoined    = "group.joined"
	EventGroupClosed    = "group.closed"
	EventGroupSettled   = "group.settled"
	EventGroupFailed    = "group.failed"
	EventGroupCancelled = "group.cancelled"
	EventGroupAbandoned = "group.abandoned"
)

// GroupWindow is the default time a group stays open.
const GroupWindow = 24 * time.Hour

// GroupRetries is seed 000's schedule for a group whose charges fail: retry
// after 1 s, 2 s, 4 s, 8 s and 16 s, then give up.
var GroupRetries = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// Groupbuy returns the groupbuy flow (seed 000): a group is open until its
// deadline, then closed and every member charged, then settled; or failed
// when charges keep failing, for an operator to retry.
func Groupbuy() *lapse.Flow {
	return &lapse.Flow{
		Name:    "groupbuy",
		Initial: GroupOpen,
		States: []lapse.StateSpec{
			{Name: GroupOpen, Deadline: &lapse.Deadline{After: GroupWindow, Event: Close},
				Doc: "open: members JOIN until the deadline CLOSEs it; the organiser may CANCEL"},
			{Name: GroupClosed, Doc: "closed: every member is being charged; SETTLE or FAIL moves it on"},
			{Name: GroupSettled, Terminal: true, Doc: "every member charged"},
			{Name: GroupFailed, Doc: "charges failed after the last retry, or too few members joined; organiser and admins told; an operator may RETRY"},
			{Name: GroupCancelled, Terminal: true, Doc: "cancelled while open; no one charged"},
			{Name: GroupAbandoned, Terminal: true, Doc: "an operator gave up on the failed group: members charged refunded once, the others released"},
		},
		Events: []lapse.EventSpec{
			{Name: Join, Internal: true, Doc: "a member joined, through the join API"},
			{Name: Close, Internal: true, Doc: "the group's deadline passed, fired by the deadline engine"},
			{Name: Cancel, Doc: "the organiser cancels an open group"},
			{Name: Settle, Internal: true, Doc: "every member was charged"},
			{Name: Fail, Internal: true, Doc: "charges still failed after the last retry, or the group closed with fewer members than it needs"},
			{Name: Retry, Internal: true, Doc: "an operator retries a failed group, through the retry API"},
			{Name: Abandon, Internal: true, Doc: "an operator gives up on a failed group, through the abandon API"},
		},
		Transitions: []lapse.Transition{
			{From: GroupOpen, Event: Join, To: GroupOpen, Guard: lapse.BeforeDeadline, Emits: []string{EventGroupJoined}},
			{From: GroupOpen, Event: Close, To: GroupClosed, Emits: []string{EventGroupClosed}},
			{From: GroupOpen, Event: Cancel, To: GroupCancelled, Emits: []string{EventGroupCancelled}},
			{From: GroupClosed, Event: Settle, To: GroupSettled, Emits: []string{EventGroupSettled}},
			{From: GroupClosed, Event: Fail, To: GroupFailed, Emits: []string{EventGroupFailed}},
			{From: GroupFailed, Event: Retry, To: GroupClosed, Emits: []string{EventGroupClosed}},
			{From: GroupFailed, Event: Abandon, To: GroupAbandoned, Emits: []string{EventGroupAbandoned}},
		},
		Group: lapse.GroupEvents{Join: Join, Charge: EventGroupClosed, Settled: Settle, Failed: Fail, Retry: Retry,
			Abandon: Abandon, Refund: EventGroupAbandoned},
	}
}
