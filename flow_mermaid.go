package lapse

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Mermaid returns the flow as a Mermaid stateDiagram-v2: an arrow into the
// initial state, one labelled edge per transition in declaration order (an
// event fired by its state's deadline says so, as does a guarded one), and
// an arrow out of every terminal state. The same flow gives the same text.
func (f *Flow) Mermaid() string {
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s\n", f.Initial)
	for _, t := range f.Transitions {
		label := string(t.Event)
		if from := f.State(t.From); from != nil && from.Deadline != nil && from.Deadline.Event == t.Event {
			label += " (deadline " + FormatDuration(from.Deadline.After) + ")"
		}
		if t.Guard != nil {
			label += " [" + guardName(t.Guard) + "]"
		}
		fmt.Fprintf(&b, "    %s --> %s: %s\n", t.From, t.To, label)
	}
	for _, s := range f.States {
		if s.Terminal {
			fmt.Fprintf(&b, "    %s --> [*]\n", s.Name)
		}
	}
	return b.String()
}

// guardName names the guards lapse knows; others are just "guarded".
func guardName(g Guard) string {
	if reflect.ValueOf(g).Pointer() == reflect.ValueOf(BeforeDeadline).Pointer() {
		return "before deadline"
	}
	return "guarded"
}

// FormatDuration writes d the way people write deadlines, as flow files
// read them: 15m, 2h30m, 48h, 7d, 3d12h.
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	var s string
	if d >= 3*day { // people count hours up to 48h, then days
		s, d = strconv.FormatInt(int64(d/day), 10)+"d", d%day
		if d == 0 {
			return s
		}
	}
	rest := d.String() // 2h30m0s, 1h0m0s, 1.5s
	if strings.HasSuffix(rest, "m0s") {
		rest = strings.TrimSuffix(rest, "0s")
	}
	if strings.HasSuffix(rest, "h0m") {
		rest = strings.TrimSuffix(rest, "0m")
	}
	return s + rest
}
