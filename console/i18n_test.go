package console

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/lapsehq/lapse"
)

// TestMessagesComplete: every message has both languages, and every key a
// template names is a message.
func TestMessagesComplete(t *testing.T) {
	for k, m := range messages {
		if m.en == "" || m.zh == "" {
			t.Errorf("message %s lacks a translation: en %q, zh %q", k, m.en, m.zh)
		}
	}
	key := regexp.MustCompile(`\bt \$?\.Lang "([^"]+)"`)
	names, _ := fs.Glob(templateFS, "templates/*.html")
	for _, n := range names {
		b, _ := fs.ReadFile(templateFS, n)
		for _, m := range key.FindAllSubmatch(b, -1) {
			if _, ok := messages[string(m[1])]; !ok {
				t.Errorf("%s uses message %s, which is not defined", n, m[1])
			}
		}
	}
	for _, role := range []string{"viewer", "operator", "admin"} {
		if _, ok := messages["role."+role]; !ok {
			t.Errorf("role.%s is not defined", role)
		}
	}
}

func TestMoney(t *testing.T) {
	for _, c := range []struct {
		amount int64
		cur    string
		want   string
	}{
		{1999, "CNY", "19.99 CNY"}, {5, "USD", "0.05 USD"}, {0, "EUR", "0.00 EUR"}, {-150, "CNY", "-1.50 CNY"},
		{500, "JPY", "500 JPY"}, {1234, "KWD", "1.234 KWD"}, {-9223372036854775808, "USD", "-92233720368547758.08 USD"},
	} {
		if got := lapse.Money(c.amount, c.cur); got != c.want {
			t.Errorf("lapse.Money(%d, %s) = %q, want %q", c.amount, c.cur, got, c.want)
		}
	}
}
