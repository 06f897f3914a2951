package column_test

import (
	"database/sql"
	"slices"
	"testing"
	"time"

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
