package engine_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/engine"
	"github.com/lapsehq/lapse/flows"
)

func TestEventTypes(t *testing.T) {
	types := engine.EventTypes(flows.Builtin())
	for _, want := range append(lapse.EngineEvents(), flows.EventOrderClosed, flows.EventGroupSettled, flows.EventMembershipIssued) {
		if !slices.Contains(types, want) {
			t.Errorf("EventTypes lacks %s: %v", want, types)
		}
	}
	if !slices.IsSorted(types) || len(slices.Compact(slices.Clone(types))) != len(types) {
		t.Errorf("EventTypes is not sorted and distinct: %v", types)
	}
	for _, c := range []struct {
		pattern, typ string
		want         bool
	}{
		{"order.closed", "order.closed", true},
		{"order.*", "order.closed", true},
		{"order.*", "orders.closed", false},
		{"order.clo", "order.closed", false},
		{"payment.*", "payment.late", true},
	} {
		if got := engine.EventMatches(c.pattern, c.typ); got != c.want {
			t.Errorf("EventMatches(%q, %q) = %v", c.pattern, c.typ, got)
		}
	}
}

// TestFlowDeadlineHorizon: a flow whose deadline is further ahead than an
// order's may be (Config.MaxDeadline) is refused when the engine starts;
// one at the bound is taken.
func TestFlowDeadlineHorizon(t *testing.T) {
	s := openSQLite(t)
	far := func(after time.Duration) *lapse.Flow {
		return &lapse.Flow{Name: "far", Initial: "A",
			States: []lapse.StateSpec{{Name: "A", Deadline: &lapse.Deadline{After: after, Event: "TIME"}}, {Name: "B", Terminal: true}},
			Events: []lapse.EventSpec{{Name: "TIME", Internal: true}}, Transitions: []lapse.Transition{{From: "A", Event: "TIME", To: "B"}}}
	}
	if _, err := engine.New(s, []*lapse.Flow{far(lapse.DefaultMaxDeadline)}, engine.Config{}); err != nil {
		t.Errorf("a deadline of %s: %v", lapse.DefaultMaxDeadline, err)
	}
	_, err := engine.New(s, []*lapse.Flow{far(lapse.DefaultMaxDeadline + time.Hour)}, engine.Config{})
	if err == nil || !strings.Contains(err.Error(), "further ahead than a deadline may be") {
		t.Errorf("a deadline past the horizon: %v", err)
	}
	if _, err := engine.New(s, []*lapse.Flow{far(2 * lapse.DefaultMaxDeadline)}, engine.Config{MaxDeadline: 3 * lapse.DefaultMaxDeadline}); err != nil {
		t.Errorf("a deadline within a MaxDeadline set further: %v", err)
	}
}
