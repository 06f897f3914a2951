package closes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
)

// MaxOrderNos bounds the order numbers one Selector names.
const MaxOrderNos = 10000

// Selector chooses the orders of a manual close (seed 004: by order number,
// user or time range): exactly one of OrderNos (1 to MaxOrderNos of them,
// none empty, none twice), UserID, or a created_at range From (inclusive)
// to To (exclusive), both set, From before To. Flow, when set, narrows any
// of them to the orders of that flow.
type Selector struct {
	OrderNos []string   `json:"order_nos,omitempty"`
	UserID   string     `json:"user_id,omitempty"`
	From     *time.Time `json:"from,omitempty"`
	To       *time.Time `json:"to,omitempty"`
	Flow     string     `json:"flow,omitempty"`
}

// Validate reports a selector that chooses no orders, or chooses them two
// ways at once, as a lapse.FieldError naming the field (order_nos,
// user_id, from, to or flow). It does not know the engine's flows: Preview
// and Start check that Flow names one.
func (s *Selector) Validate() error {
	if s == nil {
		return lapse.FieldError("order_nos", "choose orders by order_nos, user_id, or from and to")
	}
	ways := 0
	for _, set := range []bool{len(s.OrderNos) > 0, s.UserID != "", s.From != nil || s.To != nil} {
		if set {
			ways++
		}
	}
	switch {
	case ways == 0:
		return lapse.FieldError("order_nos", "choose orders by order_nos, user_id, or from and to")
	case ways > 1:
		field := "user_id"
		if s.UserID == "" {
			field = "from"
		}
		return lapse.FieldError(field, "choose orders one way only: order_nos, user_id, or from and to")
	}
	if len(s.Flow) > lapse.MaxOrderNoLen || !printable(s.Flow) {
		return lapse.FieldError("flow", "is not a flow's name")
	}
	switch {
	case len(s.OrderNos) > 0:
		return validOrderNos(s.OrderNos)
	case s.UserID != "":
		if len(s.UserID) > lapse.MaxUserIDLen || !printable(s.UserID) {
			return lapse.FieldError("user_id", "must be at most %d bytes of UTF-8 text without control characters", lapse.MaxUserIDLen)
		}
	case s.From == nil:
		return lapse.FieldError("from", "is required with to")
	case s.To == nil:
		return lapse.FieldError("to", "is required with from")
	case !s.From.Before(*s.To):
		return lapse.FieldError("to", "must be after from")
	}
	return nil
}

func validOrderNos(nos []string) error {
	if len(nos) > MaxOrderNos {
		return lapse.FieldError("order_nos", "names %d orders; at most %d at once", len(nos), MaxOrderNos)
	}
	seen := make(map[string]bool, len(nos))
	for i, no := range nos {
		switch {
		case no == "":
			return lapse.FieldError("order_nos", "order number %d is empty", i+1)
		case len(no) > lapse.MaxOrderNoLen || !printable(no):
			return lapse.FieldError("order_nos", "order number %d is not an order number", i+1)
		case seen[no]:
			return lapse.FieldError("order_nos", "names %s twice", no)
		}
		seen[no] = true
	}
	return nil
}

// printable reports UTF-8 text without control characters.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// Selection names what s chooses: the SHA-256 of its canonical form, in
// hex, the same for two selectors that choose the same orders (order
// numbers in any order, times in any zone). A preview gives it, and a close
// confirmed from that preview gives it back, so that a close never takes a
// preview's count for another selection's.
func (s *Selector) Selection() string {
	sum := sha256.Sum256(s.canonical())
	return hex.EncodeToString(sum[:])
}

// canonical returns the selector as JSON in one spelling per selection:
// the order numbers sorted, the times in UTC rounded up to the microsecond
// (as stores compare them with lapse.Ceil). Two selectors choose the same
// orders when their canonical forms are equal.
func (s *Selector) canonical() []byte {
	c := *s
	c.OrderNos = slices.Clone(s.OrderNos)
	slices.Sort(c.OrderNos)
	for _, t := range []**time.Time{&c.From, &c.To} {
		if *t != nil {
			u := lapse.Ceil(**t)
			*t = &u
		}
	}
	b, _ := json.Marshal(&c) // strings and times: it cannot fail
	return b
}
