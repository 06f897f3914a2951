package flows_test

import (
	"testing"

	"github.com/lapsehq/lapse/flows"
)

func TestBuiltinValid(t *testing.T) {
	for _, f := range flows.Builtin() {
		if err := f.Validate(); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
}
