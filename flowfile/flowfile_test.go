package flowfile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flowfile"
	"github.com/lapsehq/lapse/flows"
)

const autoConfirm = `# the example of the package doc
name: auto_confirm           # flow name
initial: SHIPPED
states:
  - name: SHIPPED
    doc: shipped, waiting for the buyer to confirm receipt
    deadline: {after: 7d, event: AUTO_CONFIRM}
  - name: CONFIRMED
    terminal: true
events:
  - {name: CONFIRM, doc: the buyer confirmed receipt}
  - {name: AUTO_CONFIRM, internal: true}
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
  - {from: SHIPPED, event: AUTO_CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
`

func TestParse(t *testing.T) {
	t.Parallel()
	f, err := flowfile.Parse("auto_confirm.yaml", []byte(autoConfirm))
	if err != nil {
		t.Fatal(err)
	}
	shipped := f.State("SHIPPED")
	switch {
	case f.Name != "auto_confirm" || f.Initial != "SHIPPED" || len(f.States) != 2 || len(f.Events) != 2 || len(f.Transitions) != 2:
		t.Errorf("flow %+v", f)
	case shipped.Doc != "shipped, waiting for the buyer to confirm receipt" ||
		*shipped.Deadline != (lapse.Deadline{After: 7 * 24 * time.Hour, Event: "AUTO_CONFIRM"}):
		t.Errorf("SHIPPED %+v, deadline %+v", shipped, shipped.Deadline)
	case !f.State("CONFIRMED").Terminal || !f.Event("AUTO_CONFIRM").Internal || f.Event("CONFIRM").Internal:
		t.Errorf("terminal or internal flags lost: %+v %+v", f.States, f.Events)
	case f.Transitions[1].To != "CONFIRMED" || len(f.Transitions[1].Emits) != 1 || f.Transitions[1].Emits[0] != "order.confirmed":
		t.Errorf("transition %+v", f.Transitions[1])
	}
}

// checkoutYAML is the built-in checkout flow written as a flow file.
const checkoutYAML = `name: checkout
initial: UNPAID
states:
  - name: UNPAID
    deadline: {after: 15m, event: TIMEOUT}
    doc: waiting for payment; PAY, TIMEOUT (deadline) or CANCEL move it on
  - {name: PAID, doc: paid; REFUND moves it on}
  - {name: CLOSED, terminal: true, doc: "closed unpaid, by TIMEOUT or CANCEL"}
  - name: REFUNDING
    doc: refund under way; REFUND_DONE (all refunded) or REFUND_PARTIAL (paid again) moves it on
  - {name: REFUNDED, terminal: true, doc: refunded}
events:
  - {name: PAY, internal: true, doc: "a verified payment, applied by the payment path"}
  - {name: TIMEOUT, internal: true, doc: "the payment window lapsed, fired by the deadline engine"}
  - {name: CANCEL, doc: the caller cancels an unpaid order}
  - {name: REFUND, internal: true, doc: "a refund starts, through the refund path"}
  - {name: REFUND_DONE, internal: true, doc: the provider confirmed the refund of all the order captured}
  - {name: REFUND_PARTIAL, internal: true, doc: "a partial refund ended (or the provider refused it); the order is paid again"}
transitions:
  - {from: UNPAID, event: PAY, to: PAID, guard: before_deadline, emits: [order.paid]}
  - {from: UNPAID, event: TIMEOUT, to: CLOSED, emits: [order.closed]}
  - {from: UNPAID, event: CANCEL, to: CLOSED, emits: [order.closed]}
  - {from: PAID, event: REFUND, to: REFUNDING, emits: [order.refunding]}
  - {from: REFUNDING, event: REFUND_DONE, to: REFUNDED, emits: [order.refunded]}
  - {from: REFUNDING, event: REFUND_PARTIAL, to: PAID, emits: [order.refund_settled]}
holds: true
release_on: [order.closed]
consume_on: [order.paid]
pays: PAY
refunds: {start: REFUND, done: REFUND_DONE, partial: REFUND_PARTIAL}
grace: 2m
`

// TestParseCheckout checks every optional key against the built-in flow
// they describe: the two document alike.
func TestParseCheckout(t *testing.T) {
	t.Parallel()
	f, err := flowfile.Parse("checkout.yaml", []byte(checkoutYAML))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := flowfile.Markdown(f), flowfile.Markdown(flows.Checkout()); got != want {
		t.Errorf("the YAML checkout documents as\n%s\nwant\n%s", got, want)
	}
	if f.Transitions[0].Guard == nil || f.Grace != flows.CheckoutGrace || f.Pays != flows.Pay {
		t.Errorf("guard, grace or pays lost: %+v", f)
	}
}

// TestParseErrors checks that each problem is reported as EINVALID at the
// line marked "# <-" (line 1 when none is), with a message containing want.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, want, yaml string
	}{
		{"unknown state in transition", "unknown state SHIPED", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPED, event: CONFIRM, to: CONFIRMED} # <-
`},
		{"unknown target state in block style", "unknown state CONFIRM", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - from: SHIPPED
    event: CONFIRM
    to: CONFIRM # <-
`},
		{"unknown initial state", "initial state NEW is not declared", `name: x
initial: NEW # <-
states: [{name: SHIPPED}]
`},
		{"transition out of a terminal state", "CONFIRMED, which is terminal", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}, {name: REOPEN}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED}
  - {from: CONFIRMED, event: REOPEN, to: SHIPPED} # <-
`},
		{"deadline fires an event the state does not accept", "fires AUTO_CONFIRM, which the state does not accept (it accepts CONFIRM)", `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    deadline:
      after: 7d
      event: AUTO_CONFIRM # <-
  - {name: CONFIRMED, terminal: true}
events: [{name: CONFIRM}, {name: AUTO_CONFIRM, internal: true}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED}
`},
		{"unreachable state", "state LIMBO is unreachable", `name: x
initial: SHIPPED
states:
  - {name: SHIPPED}
  - {name: CONFIRMED, terminal: true}
  - name: LIMBO # <-
    doc: nothing leads here
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED}
`},
		{"no terminal state", "flow x has no terminal state", `name: x # <-
initial: OPEN
states: [{name: OPEN}, {name: SHUT}]
events: [{name: SHUT}, {name: OPEN}]
transitions:
  - {from: OPEN, event: SHUT, to: SHUT}
  - {from: SHUT, event: OPEN, to: OPEN}
`},
		{"state that leads to no terminal state", "state STUCK leads to no terminal state (CONFIRMED)", `name: x
initial: SHIPPED
states:
  - {name: SHIPPED}
  - {name: STUCK} # <-
  - {name: CONFIRMED, terminal: true}
events: [{name: CONFIRM}, {name: LOSE}, {name: POKE}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED}
  - {from: SHIPPED, event: LOSE, to: STUCK}
  - {from: STUCK, event: POKE, to: STUCK}
`},
		{"holding order left in a dead end", "state LOST leads to no terminal state", `name: x
initial: UNPAID
holds: true
release_on: [order.closed]
states:
  - {name: UNPAID, deadline: {after: 15m, event: CLOSE}}
  - {name: LOST} # <-
  - {name: CLOSED, terminal: true}
events: [{name: CLOSE}, {name: MISLAY}]
transitions:
  - {from: UNPAID, event: CLOSE, to: CLOSED, emits: [order.closed]}
  - {from: UNPAID, event: MISLAY, to: LOST}
`},
		{"event emitted twice", `emits "order.closed" twice`, `name: x
initial: UNPAID
states: [{name: UNPAID}, {name: CLOSED, terminal: true}]
events: [{name: CLOSE}]
transitions:
  - from: UNPAID
    event: CLOSE
    to: CLOSED
    emits: [order.closed, order.closed] # <-
`},
		{"duplicate state", "state SHIPPED is declared twice (first at line 4)", `name: x
initial: SHIPPED
states:
  - {name: SHIPPED}
  - {name: SHIPPED} # <-
`},
		{"duplicate event", "event CONFIRM is declared twice", `name: x
initial: SHIPPED
states: [{name: SHIPPED}]
events:
  - {name: CONFIRM}
  - {name: CONFIRM} # <-
`},
		{"duplicate transition", "already has a transition on CONFIRM (line 5)", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions: [{from: SHIPPED, event: CONFIRM, to: CONFIRMED},
  {from: SHIPPED, event: CONFIRM, to: SHIPPED}] # <-
`},
		{"unknown event in transition", "unknown event CONFIRM", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED} # <-
`},
		{"deadline beyond the horizon", "deadline after: 367d is further ahead than a deadline may be: at most 366d", `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    deadline: {after: 367d, event: CONFIRM} # <-
  - {name: CONFIRMED, terminal: true}
events: [{name: CONFIRM}]
transitions: [{from: SHIPPED, event: CONFIRM, to: CONFIRMED}]
`},
		{"emits an event of the engine's", `emits "order.created", which only the engine writes`, `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.created]} # <-
`},
		{"bad duration", `bad duration "7 days"`, `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    deadline: {after: 7 days, event: CONFIRM} # <-
  - {name: CONFIRMED, terminal: true}
events: [{name: CONFIRM}]
transitions: [{from: SHIPPED, event: CONFIRM, to: CONFIRMED}]
`},
		{"duration that is a number", "must be a duration", `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    deadline: {after: 7, event: CONFIRM} # <-
`},
		{"zero duration", "must be positive", `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    deadline: {after: 0d, event: CONFIRM} # <-
`},
		{"unknown top-level key", `unknown key "intial"`, `name: x
intial: SHIPPED # <-
states: [{name: SHIPPED}]
`},
		{"unknown state key", `state: unknown key "timeout"`, `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    timeout: 7d # <-
`},
		{"unknown transition key", `transition: unknown key "on"`, `name: x
initial: SHIPPED
states: [{name: SHIPPED}]
transitions:
  - {from: SHIPPED, on: CONFIRM, to: SHIPPED} # <-
`},
		{"duplicate key", `key "initial" is repeated (first at line 2)`, `name: x
initial: SHIPPED
states: [{name: SHIPPED}]
initial: CONFIRMED # <-
`},
		{"missing key", "state: name is required", `name: x
initial: SHIPPED
states:
  - doc: no name # <-
`},
		{"wrong type: bool", `terminal must be true or false, not "yes"`, `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    terminal: yes # <-
`},
		{"wrong type: list", "states must be a list", `name: x
initial: SHIPPED
states: SHIPPED # <-
`},
		{"wrong type: string", "initial must be a string", `name: x
initial: [SHIPPED] # <-
states: [{name: SHIPPED}]
`},
		{"wrong type: emits", "emits must be a list", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: order.confirmed} # <-
`},
		{"unknown guard", "unknown guard \"in_time\" (known guards: before_deadline)", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, guard: in_time} # <-
`},
		{"guarded deadline", "cannot have a guard", `name: x
initial: SHIPPED
states:
  - name: SHIPPED
    deadline: {after: 1h, event: CONFIRM} # <-
  - {name: CONFIRMED, terminal: true}
events: [{name: CONFIRM}]
transitions: [{from: SHIPPED, event: CONFIRM, to: CONFIRMED, guard: before_deadline}]
`},
		{"bad flow name", `flow name "Auto Confirm"`, `name: Auto Confirm # <-
initial: SHIPPED
states: [{name: SHIPPED}]
`},
		{"bad state name", `state name "shipped"`, `name: x
initial: shipped
states: [{name: shipped}] # <-
`},
		{"bad emitted event", `emits "confirmed"`, `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [confirmed]} # <-
`},
		{"release_on without holds", "release_on needs holds", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions: [{from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.confirmed]}]
release_on:
  - order.confirmed # <-
`},
		{"an end that keeps the holdings", "ends the order holding its stock and coupon", `name: x
initial: UNPAID
holds: true
release_on: [order.closed]
consume_on: [order.paid]
states: [{name: UNPAID}, {name: PAID, terminal: true}, {name: CLOSED, terminal: true}, {name: CANCELLED, terminal: true}]
events: [{name: PAY}, {name: CLOSE}, {name: CANCEL}]
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid]}
  - {from: UNPAID, event: CLOSE, to: CLOSED, emits: [order.closed]}
  - {from: UNPAID, event: CANCEL, to: CANCELLED, emits: [order.cancelled]} # <-
`},
		{"pays undeclared", "pays: event PAY is not declared", `name: x
initial: SHIPPED
states: [{name: SHIPPED}]
pays: PAY # <-
`},
		{"grace without payments", "grace needs a flow that takes payments", `name: x
initial: SHIPPED
states: [{name: SHIPPED}]
grace: 2m # <-
`},
		{"grace beyond the horizon", "grace: 8784h0m1s is further ahead than a deadline may be", `name: x
initial: UNPAID
pays: PAY
states: [{name: UNPAID}, {name: PAID, terminal: true}]
events: [{name: PAY}]
transitions: [{from: UNPAID, event: PAY, to: PAID}]
grace: 366d1s # <-
`},
		{"refunds undeclared", "refunds: event REFUND is not declared", `name: x
initial: SHIPPED
states: [{name: SHIPPED}]
refunds: {start: REFUND, done: DONE, partial: PARTIAL} # <-
`},
		{"terminal deadline", "terminal and cannot have a deadline", `name: x
initial: PACKED
states:
  - name: PACKED
  - name: SHIPPED
    terminal: true
    deadline: {after: 1h, event: CONFIRM} # <-
events: [{name: CONFIRM}, {name: SHIP}]
transitions: [{from: PACKED, event: SHIP, to: SHIPPED}]
`},
		{"alias", "anchors and aliases are not supported", `name: x
initial: &s SHIPPED
states:
  - name: *s # <-
`},
		// The YAML parser's own errors give the line where it noticed the
		// problem, which may be a line before the mistake.
		{"syntax error", "did not find expected ',' or ']'", `name: x
initial: SHIPPED # <-
states: [{name: SHIPPED}
events: []
`},
		{"tab indentation", "found character that cannot start any token", "name: x\ninitial: SHIPPED\nstates:\n\t- {name: SHIPPED} # <-\n"},
		{"not a mapping", "flow must be a mapping", "- name: x # <-\n"},
		{"empty file", "the file is empty", "# only a comment\n"},
		{"two documents", "a second YAML document", "name: x\ninitial: A\nstates: [{name: A}]\n--- # <-\nname: y\n"},
		{"an emitted type longer than a routing key", "at most 64 long", `name: x
initial: SHIPPED
states: [{name: SHIPPED}, {name: CONFIRMED, terminal: true}]
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.` + strings.Repeat("x", 59) + `]} # <-
`},
		{"a deadline that pays", "makes the order paid without a payment: PAID is entered from a state before payment only by pays (PAY)", `name: x
initial: UNPAID
states:
  - {name: UNPAID, deadline: {after: 15m, event: EXPIRE}}
  - {name: PAID, terminal: true}
events: [{name: PAY}, {name: EXPIRE, internal: true}]
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid]}
  - {from: UNPAID, event: EXPIRE, to: PAID, emits: [order.expired]} # <-
pays: PAY
`},
		{"a paid order paid again", "takes a payment for an order that is paid already", `name: x
initial: UNPAID
states:
  - {name: UNPAID, deadline: {after: 15m, event: EXPIRE}}
  - {name: PAID}
  - {name: DONE, terminal: true}
  - {name: CLOSED, terminal: true}
events: [{name: PAY}, {name: SHIP}, {name: EXPIRE, internal: true}]
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid]}
  - {from: UNPAID, event: EXPIRE, to: CLOSED, emits: [order.expired]}
  - {from: PAID, event: PAY, to: PAID, emits: [order.paid_again]} # <-
  - {from: PAID, event: SHIP, to: DONE, emits: [order.shipped]}
pays: PAY
`},
		// YAML 1.1's yes and on, tagged !!bool, were read as false: an
		// event the author marked internal could be sent by any
		// orders:write key, a state marked terminal was not.
		{"a YAML 1.1 boolean", `internal must be true or false, not "yes"`, `name: x
initial: SHIPPED
states:
  - {name: SHIPPED, deadline: {after: 7d, event: AUTO_CONFIRM}}
  - {name: CONFIRMED, terminal: true}
events:
  - {name: CONFIRM}
  - {name: AUTO_CONFIRM, internal: !!bool yes} # <-
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
  - {from: SHIPPED, event: AUTO_CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
`},
		{"a YAML 1.1 boolean on a state", `terminal must be true or false, not "on"`, `name: x
initial: SHIPPED
states:
  - {name: SHIPPED}
  - {name: CONFIRMED, terminal: !!bool on} # <-
events: [{name: CONFIRM}]
transitions:
  - {from: SHIPPED, event: CONFIRM, to: CONFIRMED, emits: [order.confirmed]}
`},
		{"one event as two steps of a refund", "REFUND is named twice, as refunds start and refunds done", `name: x
initial: UNPAID
states:
  - {name: UNPAID, deadline: {after: 15m, event: EXPIRE}}
  - {name: PAID}
  - {name: REFUNDING}
  - {name: REFUNDED, terminal: true}
  - {name: CLOSED, terminal: true}
events: [{name: PAY}, {name: REFUND}, {name: PARTIAL}, {name: EXPIRE, internal: true}]
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid]}
  - {from: UNPAID, event: EXPIRE, to: CLOSED, emits: [order.expired]}
  - {from: PAID, event: REFUND, to: REFUNDING, emits: [order.refunding]}
  - {from: REFUNDING, event: REFUND, to: REFUNDED, emits: [order.refunded]}
  - {from: REFUNDING, event: PARTIAL, to: PAID, emits: [order.refund_settled]}
pays: PAY
refunds: {start: REFUND, done: REFUND, partial: PARTIAL} # <-
`},
		{"initial state terminal", "initial state DONE is terminal", `name: x
initial: DONE # <-
holds: true
states: [{name: DONE, terminal: true}]
`},
		{"a deadline that fires the payment", "its deadline fires PAY, which only Lapse fires for a verified payment", `name: x
initial: UNPAID
states:
  - {name: UNPAID, deadline: {after: 15m, event: PAY}} # <-
  - {name: PAID, terminal: true}
  - {name: CLOSED, terminal: true}
events: [{name: PAY, internal: true}, {name: CANCEL}]
transitions:
  - {from: UNPAID, event: PAY, to: PAID, emits: [order.paid]}
  - {from: UNPAID, event: CANCEL, to: CLOSED, emits: [order.closed]}
pays: PAY
`},
		{"a deadline that stays", "its deadline leads back to WAIT", `name: x
initial: WAIT
states:
  - {name: WAIT, deadline: {after: 1h, event: NAG}} # <-
  - {name: END, terminal: true}
events: [{name: NAG, internal: true}, {name: STOP}]
transitions:
  - {from: WAIT, event: NAG, to: WAIT, emits: [order.nagged]}
  - {from: WAIT, event: STOP, to: END}
`},
		{"deadlines in a ring", "states PING → PONG → PING lead from one to the next on their deadlines alone", `name: x
initial: PING
states:
  - {name: PING, deadline: {after: 1s, event: FLIP}} # <-
  - {name: PONG, deadline: {after: 1s, event: FLIP}}
  - {name: END, terminal: true}
events: [{name: FLIP, internal: true}, {name: STOP}]
transitions:
  - {from: PING, event: FLIP, to: PONG}
  - {from: PONG, event: FLIP, to: PING}
  - {from: PING, event: STOP, to: END}
  - {from: PONG, event: STOP, to: END}
`},
		{"too many states", "more than 256 states", `name: x
initial: S0
states:
` + strings.Repeat("  - {name: S0}\n", lapse.MaxFlowStates) + `  - {name: S0} # <-
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			line := 1
			for i, l := range strings.Split(c.yaml, "\n") {
				if strings.HasSuffix(l, "# <-") {
					line = i + 1
				}
			}
			f, err := flowfile.Parse("bad.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("parsed %+v", f)
			}
			var le *lapse.Error
			if !errors.As(err, &le) || le.Code != lapse.EINVALID {
				t.Errorf("error %v is not EINVALID", err)
			}
			prefix := fmt.Sprintf("bad.yaml:%d: ", line)
			if le == nil || !strings.HasPrefix(le.Message, prefix) || !strings.Contains(le.Message, c.want) {
				t.Errorf("error %q; want it to start %q and contain %q", err, prefix, c.want)
			}
		})
	}
}

// TestParseManyEmits: a flow file of a transition that emits tens of
// thousands of event types, or that releases on one type named over and
// over, is refused at its line at once: each emitted type was compared
// with every other (a minute for a megabyte), and every firing of the
// transition wrote an outbox event of each.
func TestParseManyEmits(t *testing.T) {
	t.Parallel()
	head := "name: big\ninitial: A\nholds: true\nstates: [{name: A}, {name: Z, terminal: true}]\nevents: [{name: E}]\ntransitions:\n"
	var b strings.Builder
	for i := range 40000 {
		fmt.Fprintf(&b, "a.b%d,", i)
	}
	emits := head + "  - {from: A, event: E, to: Z, emits: [" + strings.TrimSuffix(b.String(), ",") + "]}\nrelease_on: [a.b0]\n"
	released := head + "  - {from: A, event: E, to: Z, emits: [a.b]}\nrelease_on: [" + strings.Repeat("a.b, ", 100000) + "a.b]\n"
	for _, c := range []struct{ yaml, want string }{
		{emits, "big.yaml:7: transition A --E--> Z emits 40000 event types: a transition emits at most 16"},
		{released, `big.yaml:8: release_on names a.b twice`},
	} {
		start := time.Now()
		_, err := flowfile.Parse("big.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %.300v; want %q", err, c.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v", d)
		}
	}
}

// TestParseLarge: a flow file near MaxSize of states in a chain is refused
// at once, not checked state by state for hours (a walk over the flow from
// each of its states).
func TestParseLarge(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("name: big\ninitial: S0\nstates:\n")
	const n = 20000
	for i := range n {
		fmt.Fprintf(&b, "  - {name: S%d}\n", i)
	}
	b.WriteString("  - {name: END, terminal: true}\nevents: [{name: N}, {name: X}]\ntransitions:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {from: S%d, event: N, to: S%d}\n  - {from: S%d, event: X, to: END}\n", i, i+1, i)
	}
	_, err := flowfile.Parse("big.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "big.yaml:260: more than 256 states") {
		t.Errorf("a flow of %d states: %v", n, err)
	}
}

func TestParseDurations(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for in, want := range map[string]time.Duration{
		"7d": 7 * day, "48h": 48 * time.Hour, "1d12h": 36 * time.Hour, "15m": 15 * time.Minute,
		"90s": 90 * time.Second, "2h30m": 150 * time.Minute, "1d0h30m": day + 30*time.Minute,
		"bad": -1, "7": -1, "1d1d": -1, "-1d": -1, "1d-2h": -1, "12h1d": -1, "d": -1, "1.5d": -1,
		"106752d": -1, "106751d24h": -1,
	} {
		yaml := fmt.Sprintf("name: x\ninitial: A\nstates: [{name: A}, {name: B, terminal: true}]\n"+
			"events: [{name: E}]\ntransitions: [{from: A, event: E, to: B}]\npays: E\ngrace: %q\n", in)
		f, err := flowfile.Parse("d.yaml", []byte(yaml))
		switch {
		case want < 0 && err == nil:
			t.Errorf("%s parsed as %v", in, f.Grace)
		case want < 0 && !strings.Contains(err.Error(), "d.yaml:7: grace"):
			t.Errorf("%s: %v", in, err)
		case want >= 0 && err != nil:
			t.Errorf("%s: %v", in, err)
		case want >= 0 && f.Grace != want:
			t.Errorf("%s parsed as %v, want %v", in, f.Grace, want)
		}
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	write := func(dir, name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	renamed := func(name string) string { return strings.Replace(autoConfirm, "auto_confirm ", name, 1) }

	dir := t.TempDir()
	write(dir, "b.yml", renamed("b_flow"))
	write(dir, "a.yaml", renamed("a_flow"))
	write(dir, "notes.txt", "not a flow")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	fs, err := flowfile.LoadDir(dir)
	if err != nil || len(fs) != 2 || fs[0].Name != "a_flow" || fs[1].Name != "b_flow" {
		t.Fatalf("LoadDir = %v, %v", fs, err)
	}

	write(dir, "c.yaml", renamed("a_flow"))
	_, err = flowfile.LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "a.yaml and "+filepath.Join(dir, "c.yaml")+" both define flow \"a_flow\"") {
		t.Errorf("LoadDir with two a_flows: %v", err)
	}

	write(dir, "c.yaml", "name: [")
	if _, err = flowfile.LoadDir(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "c.yaml")+":1:") {
		t.Errorf("LoadDir with a broken file: %v", err)
	}

	empty := t.TempDir()
	write(empty, "README.md", "no flows here")
	if _, err := flowfile.LoadDir(empty); err == nil || !strings.Contains(err.Error(), "no flow files") {
		t.Errorf("LoadDir of a directory without flows: %v", err)
	}
	if _, err := flowfile.LoadDir(filepath.Join(empty, "missing")); err == nil {
		t.Error("LoadDir of a missing directory succeeded")
	}
	if _, err := flowfile.Load(filepath.Join(empty, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestLoadTooLarge: a file past MaxSize is refused, not read to its end.
func TestLoadTooLarge(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte("#"+strings.Repeat("x", flowfile.MaxSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := flowfile.Load(path); lapse.ErrorCode(err) != lapse.EINVALID || !strings.Contains(err.Error(), "larger than 1024 KiB") {
		t.Errorf("Load of a file past MaxSize = %v, want EINVALID", err)
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	f, err := flowfile.Parse("auto_confirm.yaml", []byte(strings.Replace(autoConfirm,
		"doc: the buyer confirmed receipt", `doc: "the buyer | confirmed\n receipt"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	md := flowfile.Markdown(f)
	for _, want := range []string{
		"# Flow `auto_confirm`\n",
		"```mermaid\nstateDiagram-v2\n    [*] --> SHIPPED\n",
		"SHIPPED --> CONFIRMED: AUTO_CONFIRM (deadline 7d)\n",
		"| `SHIPPED` | after 7d fires `AUTO_CONFIRM` | shipped, waiting for the buyer to confirm receipt |\n",
		"| `CONFIRMED` (terminal) |  |  |\n",
		"| `CONFIRM` | API or Go caller | the buyer \\| confirmed receipt |\n",
		"| `AUTO_CONFIRM` | Lapse |  |\n",
		"| `SHIPPED` | `AUTO_CONFIRM` | `CONFIRMED` | `order.confirmed` |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	if md != flowfile.Markdown(f) {
		t.Error("Markdown is not deterministic")
	}
}
