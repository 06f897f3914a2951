package engine

import (
	"slices"
	"strings"

	"github.com/lapsehq/lapse"
)

// EventTypes returns, sorted, the types of the events an engine running
// flows writes: its own and those its flows' transitions emit. A
// subscription's pattern that matches none of them receives nothing
// (EventMatches).
func EventTypes(flows []*lapse.Flow) []string {
	out := lapse.EngineEvents()
	for _, f := range flows {
		for _, t := range f.Transitions {
			out = append(out, t.Emits...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EventMatches reports whether the event pattern of a Subscription, a type
// (order.closed) or a prefix (order.*), matches the type typ.
func EventMatches(pattern, typ string) bool {
	return pattern == typ || (strings.HasSuffix(pattern, ".*") && strings.HasPrefix(typ, strings.TrimSuffix(pattern, "*")))
}
