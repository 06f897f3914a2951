package lapse

import "strings"

// noMinorUnits marks an ISO 4217 code whose minor unit the standard gives
// as N.A.: money cannot be counted in its minor units.
const noMinorUnits = -1

// currencies is ISO 4217's list of codes in use (its list one, with the
// amendments to 2025), each with the digits of its minor unit. It is the one
// table of currencies: ValidCurrency takes the codes it has with minor
// units, and CurrencyExponent reads their digits from it. The codes without
// minor units (precious metals, bond-market units and other units of
// account, XTS for testing, XXX for no currency) are here so that refusals
// can say what they are. Funds codes (CLF, USN, …) have minor units and are
// taken. Codes ISO withdrew are not here: HRK (Croatia took the euro), ANG
// (Curaçao and Sint Maarten's XCG replaced it), ZWL (Zimbabwe's ZWG), BGN
// (Bulgaria took the euro), VEF, MRO, STD and the like.
var currencies = map[string]int{
	"AED": 2, "AFN": 2, "ALL": 2, "AMD": 2, "AOA": 2, "ARS": 2, "AUD": 2, "AWG": 2, "AZN": 2,
	"BAM": 2, "BBD": 2, "BDT": 2, "BHD": 3, "BIF": 0, "BMD": 2, "BND": 2, "BOB": 2, "BOV": 2, "BRL": 2,
	"BSD": 2, "BTN": 2, "BWP": 2, "BYN": 2, "BZD": 2,
	"CAD": 2, "CDF": 2, "CHE": 2, "CHF": 2, "CHW": 2, "CLF": 4, "CLP": 0, "CNY": 2, "COP": 2, "COU": 2,
	"CRC": 2, "CUC": 2, "CUP": 2, "CVE": 2, "CZK": 2,
	"DJF": 0, "DKK": 2, "DOP": 2, "DZD": 2,
	"EGP": 2, "ERN": 2, "ETB": 2, "EUR": 2,
	"FJD": 2, "FKP": 2,
	"GBP": 2, "GEL": 2, "GHS": 2, "GIP": 2, "GMD": 2, "GNF": 0, "GTQ": 2, "GYD": 2,
	"HKD": 2, "HNL": 2, "HTG": 2, "HUF": 2,
	"IDR": 2, "ILS": 2, "INR": 2, "IQD": 3, "IRR": 2, "ISK": 0,
	"JMD": 2, "JOD": 3, "JPY": 0,
	"KES": 2, "KGS": 2, "KHR": 2, "KMF": 0, "KPW": 2, "KRW": 0, "KWD": 3, "KYD": 2, "KZT": 2,
	"LAK": 2, "LBP": 2, "LKR": 2, "LRD": 2, "LSL": 2, "LYD": 3,
	"MAD": 2, "MDL": 2, "MGA": 2, "MKD": 2, "MMK": 2, "MNT": 2, "MOP": 2, "MRU": 2, "MUR": 2, "MVR": 2,
	"MWK": 2, "MXN": 2, "MXV": 2, "MYR": 2, "MZN": 2,
	"NAD": 2, "NGN": 2, "NIO": 2, "NOK": 2, "NPR": 2, "NZD": 2,
	"OMR": 3,
	"PAB": 2, "PEN": 2, "PGK": 2, "PHP": 2, "PKR": 2, "PLN": 2, "PYG": 0,
	"QAR": 2,
	"RON": 2, "RSD": 2, "RUB": 2, "RWF": 0,
	"SAR": 2, "SBD": 2, "SCR": 2, "SDG": 2, "SEK": 2, "SGD": 2, "SHP": 2, "SLE": 2, "SLL": 2, "SOS": 2,
	"SRD": 2, "SSP": 2, "STN": 2, "SVC": 2, "SYP": 2, "SZL": 2,
	"THB": 2, "TJS": 2, "TMT": 2, "TND": 3, "TOP": 2, "TRY": 2, "TTD": 2, "TWD": 2, "TZS": 2,
	"UAH": 2, "UGX": 0, "USD": 2, "USN": 2, "UYI": 0, "UYU": 2, "UYW": 4, "UZS": 2,
	"VED": 2, "VES": 2, "VND": 0, "VUV": 0,
	"WST": 2,
	"XAF": 0, "XCD": 2, "XCG": 2, "XOF": 0, "XPF": 0,
	"YER": 2,
	"ZAR": 2, "ZMW": 2, "ZWG": 2,

	"XAG": noMinorUnits, "XAU": noMinorUnits, "XPD": noMinorUnits, "XPT": noMinorUnits,
	"XBA": noMinorUnits, "XBB": noMinorUnits, "XBC": noMinorUnits, "XBD": noMinorUnits,
	"XDR": noMinorUnits, "XSU": noMinorUnits, "XUA": noMinorUnits,
	"XTS": noMinorUnits, NoCurrency: noMinorUnits,
}

// NoCurrency is ISO 4217's code for a transaction where no currency is
// involved. Only the orders of the synthetic probe, which carry no money,
// are in it (OrderCreate.Validate); every other order is refused it.
const NoCurrency = "XXX"

// ValidCurrency reports whether c is a currency Lapse counts money in: an
// ISO 4217 code in use, in capitals, whose currency has minor units (CNY,
// USD, EUR, JPY, KWD, …; not ZZZ, nor XAU, XTS or XXX).
func ValidCurrency(c string) bool {
	exp, ok := currencies[c]
	return ok && exp != noMinorUnits
}

// WellFormedCurrency reports whether c has the form of an ISO 4217 code,
// three capital letters, whether or not it names a currency. A verified
// payment callback needs no more: its money was captured, so a payment in a
// currency Lapse does not take must be recorded (in review, as one that
// does not match its order's), not refused.
func WellFormedCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := range len(c) {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// CheckCurrency refuses a currency that ValidCurrency does not take, as an
// EINVALID error naming field and the value given.
func CheckCurrency(field, c string) error {
	if ValidCurrency(c) {
		return nil
	}
	shown := c
	if len(shown) > 16 {
		shown = shown[:16] + "…"
	}
	switch exp, known := currencies[c]; {
	case c == "":
		return FieldError(field, "is required: an ISO 4217 currency code such as CNY, USD or EUR")
	case known && exp == noMinorUnits:
		return FieldError(field, "%q is an ISO 4217 code without minor units (a precious metal, a unit of account, XTS for tests or XXX for no currency), which money is not counted in; use a currency such as CNY, USD or EUR", shown)
	default:
		return FieldError(field, "%q is not an ISO 4217 currency code in use; use one such as CNY, USD or EUR", shown)
	}
}

// CurrencyExponent returns the number of minor-unit digits of currency
// (ISO 4217): 2 for CNY and most others, 0 for JPY, 3 for KWD. Lowercase is
// read as capitals. A code that ValidCurrency does not take (a provider may
// report one: such a payment is in review) is shown with 2.
func CurrencyExponent(currency string) int {
	if exp, ok := currencies[strings.ToUpper(currency)]; ok && exp != noMinorUnits {
		return exp
	}
	return 2
}
