// Package column holds the ways of keeping values in columns that more than
// one store shares, so that each is written once: an order's items as JSON
// (every store), an API key's scopes as JSON, and times as unix
// microseconds (the SQLite and MySQL stores, whose time types do not keep
// every time.Time exactly).
package column

import (
	"database/sql"
	"encoding/json"
	"time"

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
	var items []lapse.Item
	if err := json.Unmarshal(b, &items); err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, nil
	}
	return items, nil
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
