package lapse_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
)

// createIn is a valid order request in currency.
func createIn(orderNo, currency string) *lapse.OrderCreate {
	return &lapse.OrderCreate{OrderNo: orderNo, Flow: "checkout", UserID: "u-1", Amount: 1999, Currency: currency}
}

// TestCurrencyRefused: an order in a code that has the shape of ISO 4217
// but names no currency (ZZZ), in a code ISO 4217 keeps for no money
// (XXX, XTS) or for what has no minor units (gold, SDRs), or in a code
// withdrawn, is refused naming the field and the value.
func TestCurrencyRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"ZZZ", "QQQ", "AAA", "ABC", "XXX", "XTS", "XAU", "XAG", "XDR", "XBA", "HRK", "VEF", "MRO",
		"", "cny", "Cny", "CN", "CNYY", " CNY", "C\x00Y", "人民币"} {
		err := createIn("A-1", c).Validate()
		le, _ := err.(*lapse.Error)
		switch {
		case le == nil:
			t.Errorf("currency %q: %v, want an error about it", c, err)
		case le.Code != lapse.EINVALID || le.Field != "currency":
			t.Errorf("currency %q: code %q, field %q: %v", c, le.Code, le.Field, err)
		case c != "" && !strings.Contains(le.Message, strconv.Quote(c)):
			t.Errorf("currency %q: the error does not name it: %v", c, err)
		}
		if lapse.ValidCurrency(c) {
			t.Errorf("ValidCurrency(%q) = true", c)
		}
	}
}

// TestCurrencyAccepted: the codes every shop uses, the other national and
// regional ones, and the funds codes, which have minor units.
func TestCurrencyAccepted(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"CNY", "USD", "EUR", "JPY", "GBP", "HKD", "SGD", "KRW", "AUD", "CAD", "CHF", "INR",
		"KWD", "BHD", "CLP", "XAF", "XOF", "XCD", "XPF", "XCG", "ZWG", "SLE", "VES", "CLF", "UYW", "BOV", "USN"} {
		if err := createIn("A-1", c).Validate(); err != nil {
			t.Errorf("currency %s: %v", c, err)
		}
		if !lapse.ValidCurrency(c) {
			t.Errorf("ValidCurrency(%q) = false", c)
		}
	}
}

// TestCurrencyProbe: XXX, ISO 4217's code for no currency, is the
// synthetic probe's, whose orders carry no money; no other order takes it.
func TestCurrencyProbe(t *testing.T) {
	t.Parallel()
	if err := createIn(lapse.ProbeOrderPrefix+"1764489600000", "XXX").Validate(); err != nil {
		t.Errorf("the probe's order: %v", err)
	}
	if err := createIn(lapse.ProbeOrderPrefix+"1764489600000", "ZZZ").Validate(); err == nil {
		t.Error("a probe order in ZZZ was taken")
	}
	if err := createIn("A-1", "XXX").Validate(); err == nil {
		t.Error("an order in XXX was taken")
	}
}

// TestCurrencyExponent: the minor units come from the table that decides
// which codes are taken, with ISO 4217's digits.
func TestCurrencyExponent(t *testing.T) {
	t.Parallel()
	for c, want := range map[string]int{"CNY": 2, "USD": 2, "EUR": 2, "JPY": 0, "KRW": 0, "BIF": 0, "DJF": 0, "GNF": 0, "KMF": 0,
		"RWF": 0, "VUV": 0, "XPF": 0, "UYI": 0, "ISK": 0, "KWD": 3, "BHD": 3, "TND": 3, "CLF": 4, "UYW": 4, "jpy": 0} {
		if got := lapse.CurrencyExponent(c); got != want {
			t.Errorf("CurrencyExponent(%q) = %d, want %d", c, got, want)
		}
	}
	// A code Lapse does not take (a provider may report one: the payment
	// is then in review) is shown with two digits.
	if got := lapse.CurrencyExponent("ZZZ"); got != 2 {
		t.Errorf("CurrencyExponent(ZZZ) = %d", got)
	}
	if got := lapse.Money(1999, "BIF"); got != "1999 BIF" {
		t.Errorf("Money(1999, BIF) = %q", got)
	}
}
