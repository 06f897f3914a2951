package column_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/column"
)

func TestItems(t *testing.T) {
	items := []lapse.Item{{SKU: "tea", Qty: 2}, {SKU: "téa", Qty: 1}}
	got, err := column.ParseItems(column.Items(items))
	if err != nil || !slices.Equal(got, items) {
		t.Errorf("items came back as %v, %v", got, err)
	}
	for _, none := range [][]lapse.Item{nil, {}} {
		if b := column.Items(none); b != nil {
			t.Errorf("Items(%#v) = %q, want NULL", none, b)
		}
	}
	for _, none := range []string{"", "[]", "null"} {
		if got, err := column.ParseItems([]byte(none)); err != nil || got != nil {
			t.Errorf("ParseItems(%q) = %#v, %v; want nil", none, got, err)
		}
	}
	if _, err := column.ParseItems([]byte(`{`)); err == nil {
		t.Error("ParseItems of broken JSON succeeded")
	}
}

func TestMicros(t *testing.T) {
	at := time.Date(2026, 11, 29, 20, 0, 0, 123456789, time.FixedZone("CST", 8*3600))
	got := column.Time(column.Micros(at))
	if want := at.Truncate(time.Microsecond).UTC(); got != want {
		t.Errorf("Time(Micros(%v)) = %v, want %v", at, got, want)
	}
	if column.NullMicros(nil) != nil || column.NullTime(sql.NullInt64{}) != nil {
		t.Error("a nil time is not NULL, or NULL not a nil time")
	}
	if p := column.NullTime(sql.NullInt64{Int64: column.Micros(at), Valid: true}); p == nil || *p != got {
		t.Errorf("NullTime = %v, want %v", p, got)
	}
}

func TestZeroMicros(t *testing.T) {
	at := time.Date(2026, 11, 29, 20, 0, 0, 123456789, time.FixedZone("CST", 8*3600))
	us := column.ZeroMicros(at)
	if got := column.ZeroTime(sql.NullInt64{Int64: us.(int64), Valid: true}); got != at.Truncate(time.Microsecond).UTC() {
		t.Errorf("ZeroTime(ZeroMicros(%v)) = %v", at, got)
	}
	if column.ZeroMicros(time.Time{}) != nil || column.ZeroTime(sql.NullInt64{}) != (time.Time{}) {
		t.Error("the zero time is not NULL, or NULL not the zero time")
	}
}

func TestScopes(t *testing.T) {
	scopes := []string{"orders:write", "orders:read", "", "a b"}
	if got, err := column.ParseScopes(column.Scopes(scopes)); err != nil || !slices.Equal(got, scopes) {
		t.Errorf("scopes came back as %q, %v", got, err)
	}
	for _, none := range [][]string{nil, {}} {
		if s := column.Scopes(none); s != "[]" {
			t.Errorf("Scopes(%#v) = %q, want []", none, s)
		}
	}
	if got, err := column.ParseScopes("[]"); err != nil || got != nil {
		t.Errorf("ParseScopes([]) = %#v, %v; want nil", got, err)
	}
	if _, err := column.ParseScopes("{"); err == nil {
		t.Error("ParseScopes of broken JSON succeeded")
	}
}

// TestParseItemsAsJSON: ParseItems reads what json.Unmarshal reads, the
// same items or an error, whether its fast path takes the input or not:
// every list of items Items writes (any SKU, any quantity), as written or
// as PostgreSQL's jsonb spells it, and those bytes mangled.
func TestParseItemsAsJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		items := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) lapse.Item {
			return lapse.Item{SKU: rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z0-9-]{1,12}`)).Draw(t, "sku"),
				Qty: rapid.Int64().Draw(t, "qty")}
		}), 0, 4).Draw(t, "items")
		b := column.Items(items)
		if len(items) > 0 && rapid.Bool().Draw(t, "jsonb") {
			b = jsonbItems(items)
		}
		if len(b) > 0 && rapid.Bool().Draw(t, "mangle") {
			i := rapid.IntRange(0, len(b)-1).Draw(t, "at")
			b = append(b[:i:i], append([]byte(rapid.SampledFrom([]string{"", " ", "0", "+", "-", "\\", "\"", ",", "}", "\x01", "\xff", "1.5", "e3", `"SKU"`}).Draw(t, "with")), b[i+1:]...)...)
		}
		var want []lapse.Item
		wantErr := json.Unmarshal(b, &want)
		if len(want) == 0 {
			want = nil
		}
		got, err := column.ParseItems(b)
		switch {
		case len(b) == 0:
			if got != nil || err != nil {
				t.Fatalf("ParseItems(empty) = %v, %v", got, err)
			}
		case (err != nil) != (wantErr != nil):
			t.Fatalf("ParseItems(%q): error %v, json.Unmarshal's %v", b, err, wantErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("ParseItems(%q) = %#v, json.Unmarshal reads %#v", b, got, want)
		}
	})
}

// jsonbItems spells items as PostgreSQL's jsonb writes them out.
func jsonbItems(items []lapse.Item) []byte {
	b := []byte{'['}
	for i, it := range items {
		if i > 0 {
			b = append(b, ", "...)
		}
		sku, _ := json.Marshal(it.SKU)
		b = fmt.Appendf(b, `{"qty": %d, "sku": %s}`, it.Qty, sku)
	}
	return append(b, ']')
}

// TestParseItemsJSONB: the items of a jsonb column as PostgreSQL writes
// them read back as they were.
func TestParseItemsJSONB(t *testing.T) {
	got, err := column.ParseItems([]byte(`[{"qty": 2, "sku": "A-1"}, {"qty": -3, "sku": "B"}]`))
	want := []lapse.Item{{SKU: "A-1", Qty: 2}, {SKU: "B", Qty: -3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseItems = %#v, %v; want %#v", got, err, want)
	}
}
