package console

import (
	"strconv"
	"strings"
	"time"
)

// exponents are the minor-unit digits of currencies that do not have two
// (ISO 4217).
var exponents = map[string]int{
	"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "XAF": 0, "XOF": 0, "PYG": 0,
	"BHD": 3, "KWD": 3, "OMR": 3, "JOD": 3, "TND": 3, "IQD": 3, "LYD": 3,
}

// money shows amount minor units of currency as a decimal with the
// currency's code: 1999 CNY is "19.99 CNY", 500 JPY "500 JPY". Never a
// float: the digits are placed, not computed.
func money(amount int64, currency string) string {
	exp, ok := exponents[strings.ToUpper(currency)]
	if !ok {
		exp = 2
	}
	neg := amount < 0
	u := uint64(amount)
	if neg {
		u = -u
	}
	digits := strconv.FormatUint(u, 10)
	if exp > 0 {
		if len(digits) <= exp {
			digits = strings.Repeat("0", exp-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-exp] + "." + digits[len(digits)-exp:]
	}
	if neg {
		digits = "-" + digits
	}
	if currency == "" {
		return digits
	}
	return digits + " " + currency
}

// zoneOf is the operator's time zone, UTC when unknown.
func zoneOf(name string) *time.Location {
	if loc, err := time.LoadLocation(name); err == nil && name != "" {
		return loc
	}
	return time.UTC
}

// when shows t in loc to the second, with the zone's abbreviation.
func when(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return ""
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}
