package lapse_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

func TestFlowMermaid(t *testing.T) {
	t.Parallel()
	want := `stateDiagram-v2
    [*] --> UNPAID
    UNPAID --> PAID: PAY [before deadline]
    UNPAID --> CLOSED: TIMEOUT (deadline 15m)
    UNPAID --> CLOSED: CANCEL
    PAID --> REFUNDING: REFUND
    REFUNDING --> REFUNDED: REFUND_DONE
    REFUNDING --> PAID: REFUND_PARTIAL
    CLOSED --> [*]
    REFUNDED --> [*]
`
	if got := flows.Checkout().Mermaid(); got != want {
		t.Errorf("checkout diagram:\n%s\nwant\n%s", got, want)
	}
}

func TestFlowMermaidDurationsAndGuards(t *testing.T) {
	t.Parallel()
	never := func(*lapse.Order, time.Time) error { return lapse.Errorf(lapse.ECONFLICT, "never") }
	f := &lapse.Flow{
		Name:    "waits",
		Initial: "A",
		States: []lapse.StateSpec{
			{Name: "A", Deadline: &lapse.Deadline{After: 48 * time.Hour, Event: "NEXT"}},
			{Name: "B", Deadline: &lapse.Deadline{After: 7*24*time.Hour + 90*time.Minute, Event: "NEXT"}},
			{Name: "C", Deadline: &lapse.Deadline{After: 2*time.Hour + 30*time.Second, Event: "NEXT"}},
			{Name: "D", Terminal: true},
		},
		Events: []lapse.EventSpec{{Name: "NEXT"}, {Name: "SKIP"}},
		Transitions: []lapse.Transition{
			{From: "A", Event: "NEXT", To: "B"},
			{From: "B", Event: "NEXT", To: "C"},
			{From: "C", Event: "NEXT", To: "D"},
			{From: "A", Event: "SKIP", To: "D", Guard: never},
		},
	}
	want := `stateDiagram-v2
    [*] --> A
    A --> B: NEXT (deadline 48h)
    B --> C: NEXT (deadline 7d1h30m)
    C --> D: NEXT (deadline 2h0m30s)
    A --> D: SKIP [guarded]
    D --> [*]
`
	if got := f.Mermaid(); got != want {
		t.Errorf("diagram:\n%s\nwant\n%s", got, want)
	}
}

func TestBuiltinFlowsMermaid(t *testing.T) {
	t.Parallel()
	for _, f := range flows.Builtin() {
		got := f.Mermaid()
		if got != f.Mermaid() {
			t.Errorf("%s: the diagram differs from one call to the next", f.Name)
		}
		if want := "stateDiagram-v2\n    [*] --> " + string(f.Initial) + "\n"; !strings.HasPrefix(got, want) {
			t.Errorf("%s: diagram starts\n%s", f.Name, got)
		}
	}
}
