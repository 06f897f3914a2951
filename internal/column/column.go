// Package column holds the ways of keeping values in columns that more than
// one store shares, so that each is written once: an order's items as JSON
// (every store), an API key's scopes as JSON, and times as unix
// microseconds (the SQLite and MySQL stores, whose time types do not keep
// every time.Time exactly).
package column

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
)

// Items is the JSON that an order's items are kept as, or nil (NULL) when it
// has none, so that an order created without items reads back without any
// (lapse.Store.OrderCreate).
func Items(items []lapse.Item) []byte {
	if len(items) == 0 {
		return nil
	}
	b, _ := json.Marshal(items) // an Item always marshals
	return b
}

// ParseItems reads the items that Items kept. NULL, and '[]' as another
// writer may keep no items, are none: nil.
func ParseItems(b []byte) ([]lapse.Item, error) {
	if len(b) == 0 {
		return nil, nil
	}
	items, ok := parseItemsAsWritten(b)
	if !ok {
		items = nil
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, err
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	return items, nil
}

// plainString reports whether s is a JSON string's contents that mean
// themselves: valid UTF-8, with no escape and no control character.
func plainString(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return false
		}
	}
	return utf8.Valid(s)
}

// The two exact spellings of a list of items that ParseItems reads without
// json.Unmarshal's reflection (the deadline engine reads an order's items
// with every close): Items' own, [{"sku":"…","qty":n},…], and jsonb's
// output of it (PostgreSQL keeps items as jsonb, and writes its keys
// shortest first, with a space after each colon and comma),
// [{"qty": n, "sku": "…"}, …]; in both with no escape in a SKU.
var (
	itemsAsWritten = itemForm{sep: ",", sku: `{"sku":"`, qty: `","qty":`, end: "}"}
	itemsAsJSONB   = itemForm{sep: ", ", qty: `{"qty": `, sku: `, "sku": "`, end: `"}`, qtyFirst: true}
)

// itemForm is one spelling of a list of items: each item is sku, the SKU,
// qty, the quantity and end (or qty, the quantity, sku, the SKU and end,
// when qtyFirst); sep goes between items.
type itemForm struct {
	sep, sku, qty, end string
	qtyFirst           bool
}

// parseItemsAsWritten reads items in either form that itemsAsWritten and
// itemsAsJSONB spell; false for anything else, which json.Unmarshal reads.
func parseItemsAsWritten(b []byte) ([]lapse.Item, bool) {
	if items, ok := itemsAsWritten.parse(b); ok {
		return items, true
	}
	return itemsAsJSONB.parse(b)
}

func (f *itemForm) parse(b []byte) ([]lapse.Item, bool) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	rest := b[1 : len(b)-1]
	first := f.sku
	if f.qtyFirst {
		first = f.qty
	}
	items := make([]lapse.Item, 0, bytes.Count(rest, []byte(first)))
	for len(rest) > 0 {
		if len(items) > 0 {
			if !bytes.HasPrefix(rest, []byte(f.sep)) {
				return nil, false
			}
			rest = rest[len(f.sep):]
		}
		var it lapse.Item
		var ok bool
		if f.qtyFirst {
			// {"qty": n, "sku": "…"}
			if it.Qty, rest, ok = cutQty(rest, f.qty, f.sku[0]); !ok {
				return nil, false
			}
			if it.SKU, rest, ok = cutSKU(rest, f.sku); !ok || !bytes.HasPrefix(rest, []byte(f.end)) {
				return nil, false
			}
			rest = rest[len(f.end):]
		} else {
			// {"sku":"…","qty":n}
			if it.SKU, rest, ok = cutSKU(rest, f.sku); !ok {
				return nil, false
			}
			if it.Qty, rest, ok = cutQty(rest, f.qty, f.end[0]); !ok {
				return nil, false
			}
			rest = rest[len(f.end):]
		}
		items = append(items, it)
	}
	return items, true
}

// cutSKU reads key and then a SKU up to its closing quote, which stays in
// rest (and begins what follows in either form).
func cutSKU(b []byte, key string) (sku string, rest []byte, ok bool) {
	if !bytes.HasPrefix(b, []byte(key)) {
		return "", nil, false
	}
	b = b[len(key):]
	end := bytes.IndexByte(b, '"')
	if end < 0 || !plainString(b[:end]) {
		return "", nil, false
	}
	return string(b[:end]), b[end:], true
}

// cutQty reads key and then a quantity up to the byte until, which stays in
// rest: an integer as JSON spells it, which fits an int64.
func cutQty(b []byte, key string, until byte) (qty int64, rest []byte, ok bool) {
	if !bytes.HasPrefix(b, []byte(key)) {
		return 0, nil, false
	}
	b = b[len(key):]
	end := bytes.IndexByte(b, until)
	if end < 1 {
		return 0, nil, false
	}
	n, err := strconv.ParseInt(string(b[:end]), 10, 64)
	if err != nil || (end > 1 && b[0] == '0') || (end > 2 && b[0] == '-' && b[1] == '0') || b[0] == '+' {
		return 0, nil, false
	}
	return n, b[end:], true
}

// Scopes is the JSON array that an API key's scopes are kept as, in their
// order; none is '[]'.
func Scopes(scopes []string) string {
	if scopes == nil {
		scopes = []string{}
	}
	b, _ := json.Marshal(scopes) // strings always marshal
	return string(b)
}

// ParseScopes reads the scopes that Scopes kept; none is nil.
func ParseScopes(s string) ([]string, error) {
	var scopes []string
	if err := json.Unmarshal([]byte(s), &scopes); err != nil {
		return nil, err
	}
	if len(scopes) == 0 {
		return nil, nil
	}
	return scopes, nil
}

// Micros is t as kept: unix microseconds, the precision that lapse.Truncate
// keeps; a finer time is truncated.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// NullMicros is Micros of t, or NULL when t is nil.
func NullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// Time is the time that Micros kept, in UTC, so that a time from a Clock
// reads back equal to the one written.
func Time(us int64) time.Time { return time.UnixMicro(us).UTC() }

// NullTime is Time of us, or nil when us is NULL.
func NullTime(us sql.NullInt64) *time.Time {
	if !us.Valid {
		return nil
	}
	t := Time(us.Int64)
	return &t
}

// ZeroMicros is Micros of t, or NULL when t is the zero time: a time that
// may be absent where absence is the zero time rather than a nil pointer
// (lapse.AccessStore's records).
func ZeroMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

// ZeroTime is Time of us, or the zero time when us is NULL.
func ZeroTime(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return Time(us.Int64)
}
