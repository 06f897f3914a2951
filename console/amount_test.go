package console

import (
	"errors"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
)

func TestParseAmount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, cur string
		want    int64
		err     string // the message key, "" for none
	}{
		{"12.50", "CNY", 1250, ""}, {"12.5", "CNY", 1250, ""}, {"12", "CNY", 1200, ""}, {" 0.01 ", "USD", 1, ""},
		{".5", "EUR", 50, ""}, {"12.", "CNY", 1200, ""}, {"0", "CNY", 0, ""}, {"007.10", "CNY", 710, ""},
		{"500", "JPY", 500, ""}, {"1.234", "KWD", 1234, ""},
		// Floats would get these wrong: 0.29*100 is 28.999999999999996, 1.005*100 is 100.49999999999999.
		{"0.29", "CNY", 29, ""}, {"1.15", "USD", 115, ""}, {"4.35", "CNY", 435, ""},
		{"92233720368547758.07", "USD", 9223372036854775807, ""},
		{"92233720368547758.08", "USD", 0, "amount.range"},
		{"1.005", "USD", 0, "amount.decimals"}, {"5.0", "JPY", 0, "amount.decimals"},
		{"-1", "CNY", 0, "amount.invalid"}, {"+1", "CNY", 0, "amount.invalid"}, {"1e3", "CNY", 0, "amount.invalid"},
		{"1,000", "CNY", 0, "amount.invalid"}, {"", "CNY", 0, "amount.invalid"}, {".", "CNY", 0, "amount.invalid"},
		{"1.2.3", "CNY", 0, "amount.invalid"}, {"１２", "CNY", 0, "amount.invalid"}, {"NaN", "CNY", 0, "amount.invalid"},
	} {
		got, err := parseAmount(c.in, c.cur)
		var ae *amountError
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("parseAmount(%q, %s) = %d, %v; want %d", c.in, c.cur, got, err, c.want)
		case c.err != "" && (!errors.As(err, &ae) || ae.key != c.err):
			t.Errorf("parseAmount(%q, %s) = %d, %v; want %s", c.in, c.cur, got, err, c.err)
		}
	}
	// What money shows, parseAmount reads back.
	for _, v := range []struct {
		n   int64
		cur string
	}{{1999, "CNY"}, {5, "USD"}, {500, "JPY"}, {1234, "KWD"}, {9223372036854775807, "EUR"}} {
		s := strings.TrimSuffix(lapse.Money(v.n, v.cur), " "+v.cur)
		if got, err := parseAmount(s, v.cur); err != nil || got != v.n {
			t.Errorf("parseAmount(lapse.Money(%d)) = %d, %v", v.n, got, err)
		}
	}
}

func TestMinAmount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		min    string
		amount int64
		cur    string
		want   bool
	}{
		{"10", 1000, "CNY", true}, {"10", 999, "CNY", false}, {"10.01", 1000, "CNY", false}, {"0.5", 1, "JPY", true},
		{"0.5", 0, "JPY", false}, {"1.2345", 1235, "KWD", true}, {"1.2345", 1234, "KWD", false}, {"0", 0, "USD", true},
		{"100000000000000000000", 9223372036854775807, "USD", false},
	} {
		m, err := parseMin(c.min)
		if err != nil {
			t.Fatalf("parseMin(%q): %v", c.min, err)
		}
		if got := m.allows(c.amount, c.cur); got != c.want {
			t.Errorf("min %s allows %d %s = %v, want %v", c.min, c.amount, c.cur, got, c.want)
		}
	}
	for _, bad := range []string{"", "-1", "1e2", "1,0", "x"} {
		if _, err := parseMin(bad); err == nil {
			t.Errorf("parseMin(%q) is no error", bad)
		}
	}
}
