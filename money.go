package lapse

import (
	"strconv"
	"strings"
)

// Money shows amount minor units of currency as people read money: a
// decimal with the currency's minor-unit digits and its code, 5000 CNY as
// "50.00 CNY", 500 JPY as "500 JPY", -5 CNY as "-0.05 CNY". Every error and
// log text that shows an amount shows it so, never as a bare number of
// minor units that reads as whole yuan. The digits are placed, never
// computed in floating point. Without a currency it shows the decimal
// alone, with two digits.
func Money(amount int64, currency string) string {
	exp := CurrencyExponent(currency)
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
