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

// parseItemsAsWritten reads items in the one form that Items writes them,
// [{"sku":"…","qty":n},…] with no space and no escape in a SKU, without
// json.Unmarshal's reflection (the deadline engine reads an order's items
// with every close); false for anything else, which json.Unmarshal reads.
func parseItemsAsWritten(b []byte) ([]lapse.Item, bool) {
	const sku, qty = `{"sku":"`, `","qty":`
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	rest := b[1 : len(b)-1]
	items := make([]lapse.Item, 0, bytes.Count(rest, []byte(sku)))
	for len(rest) > 0 {
		if len(items) > 0 {
			if rest[0] != ',' {
				return nil, false
			}
			rest = rest[1:]
		}
		if !bytes.HasPrefix(rest, []byte(sku)) {
			return nil, false
		}
		rest = rest[len(sku):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 || !plainString(rest[:end]) {
			return nil, false
		}
		it := lapse.Item{SKU: string(rest[:end])}
		rest = rest[end:]
		if !bytes.HasPrefix(rest, []byte(qty)) {
			return nil, false
		}
		rest = rest[len(qty):]
		end = bytes.IndexByte(rest, '}')
		if end < 0 {
			return nil, false
		}
		n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
		if err != nil || (end > 1 && rest[0] == '0') || (end > 2 && rest[0] == '-' && rest[1] == '0') || rest[0] == '+' {
			return nil, false
		}
		it.Qty = n
		items = append(items, it)
		rest = rest[end+1:]
	}
	return items, true
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
