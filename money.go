package lapse

import (
	"strconv"
	"strings"
)

// currencyExponents are the minor-unit digits of the currencies that do not
// have two (ISO 4217).
var currencyExponents = map[string]int{
	"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "XAF": 0, "XOF": 0, "PYG": 0,
	"BHD": 3, "KWD": 3, "OMR": 3, "JOD": 3, "TND": 3, "IQD": 3, "LYD": 3,
}

// CurrencyExponent returns the number of minor-unit digits of currency
// (ISO 4217): 2 for CNY and most others, 0 for JPY, 3 for KWD.
func CurrencyExponent(currency string) int {
	if exp, ok := currencyExponents[strings.ToUpper(currency)]; ok {
		return exp
	}
	return 2
}

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
