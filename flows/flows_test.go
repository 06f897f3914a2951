package flows_test

import (
	"slices"
	"testing"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/flows"
)

func TestBuiltinValid(t *testing.T) {
	for _, f := range flows.Builtin() {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
}

// TestClosableByHand: a manual close ends the built-in flows' waits for
// payment, and nothing else.
func TestClosableByHand(t *testing.T) {
	closable := map[string][]lapse.State{
		"checkout":   {flows.Unpaid},
		"groupbuy":   nil, // an open group's deadline settles it and charges its members
		"membership": {flows.PreOrder, flows.WaitPay},
	}
	for _, f := range flows.Builtin() {
		for _, s := range f.States {
			want := slices.Contains(closable[f.Name], s.Name)
			if got := f.ClosableByHand(s.Name); got != want {
				t.Errorf("%s: ClosableByHand(%s) = %v, want %v", f.Name, s.Name, got, want)
			}
		}
	}
}
