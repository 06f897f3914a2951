package closes_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/closes"
)

func TestSelectorValidate(t *testing.T) {
	t.Parallel()
	from, to := t0, t0.Add(time.Hour)
	many := make([]string, closes.MaxOrderNos+1)
	for i := range many {
		many[i] = fmt.Sprintf("A-%d", i)
	}
	for _, c := range []struct {
		name  string
		sel   *closes.Selector
		field string // "" when valid
	}{
		{"order numbers", &closes.Selector{OrderNos: []string{"A-1", "A-2"}}, ""},
		{"the most order numbers", &closes.Selector{OrderNos: many[:closes.MaxOrderNos]}, ""},
		{"a user", &closes.Selector{UserID: "u1"}, ""},
		{"a range of a flow", &closes.Selector{From: &from, To: &to, Flow: "checkout"}, ""},
		{"a user of a flow", &closes.Selector{UserID: "u1", Flow: "checkout"}, ""},

		{"nil", nil, "order_nos"},
		{"nothing", &closes.Selector{}, "order_nos"},
		{"only a flow", &closes.Selector{Flow: "checkout"}, "order_nos"},
		{"no order numbers", &closes.Selector{OrderNos: []string{}}, "order_nos"},
		{"numbers and a user", &closes.Selector{OrderNos: []string{"A-1"}, UserID: "u1"}, "user_id"},
		{"numbers and a range", &closes.Selector{OrderNos: []string{"A-1"}, From: &from, To: &to}, "from"},
		{"a user and a range", &closes.Selector{UserID: "u1", From: &from, To: &to}, "user_id"},
		{"too many numbers", &closes.Selector{OrderNos: many}, "order_nos"},
		{"an empty number", &closes.Selector{OrderNos: []string{"A-1", ""}}, "order_nos"},
		{"a number twice", &closes.Selector{OrderNos: []string{"A-1", "A-2", "A-1"}}, "order_nos"},
		{"a number with a newline", &closes.Selector{OrderNos: []string{"A-1\n"}}, "order_nos"},
		{"a user with a control character", &closes.Selector{UserID: "u\x001"}, "user_id"},
		{"a user too long", &closes.Selector{UserID: strings.Repeat("u", lapse.MaxUserIDLen+1)}, "user_id"},
		{"from alone", &closes.Selector{From: &from}, "to"},
		{"to alone", &closes.Selector{To: &to}, "from"},
		{"an empty range", &closes.Selector{From: &from, To: &from}, "to"},
		{"a backward range", &closes.Selector{From: &to, To: &from}, "to"},
		{"a flow with a newline", &closes.Selector{UserID: "u1", Flow: "check\nout"}, "flow"},
	} {
		err := c.sel.Validate()
		var le *lapse.Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", c.name, err)
		case c.field != "" && (!errors.As(err, &le) || le.Code != lapse.EINVALID || le.Field != c.field):
			t.Errorf("%s: Validate = %v, want an EINVALID error about %s", c.name, err, c.field)
		}
	}
}
