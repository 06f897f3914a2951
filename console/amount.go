package console

import (
	"math/big"
	"strconv"
	"strings"

	"github.com/lapsehq/lapse"
)

// amountError is an amount an operator typed that is not one, as the key
// of its message and the message's arguments.
type amountError struct {
	key  string
	args []any
}

func (e *amountError) Error() string { return t(langEN, e.key, e.args...) }

// text is the error in lang.
func (e *amountError) text(lang string) string { return t(lang, e.key, e.args...) }

// parseAmount reads s, an amount of currency in major units as an operator
// types it ("12", "12.5", "12.50"), as minor units, exactly: the digits are
// placed, never computed in floating point, as lapse.Money shows them. Signs,
// exponents, separators, more decimals than the currency has (a JPY amount
// has none) and amounts beyond int64 are *amountError.
func parseAmount(s, currency string) (int64, error) {
	s = strings.TrimSpace(s)
	exp := lapse.CurrencyExponent(currency)
	whole, frac, _ := strings.Cut(s, ".")
	if whole+frac == "" || !digitsOnly(whole) || !digitsOnly(frac) {
		return 0, &amountError{key: "amount.invalid", args: []any{s}}
	}
	if len(frac) > exp {
		return 0, &amountError{key: "amount.decimals", args: []any{currency, exp}}
	}
	n, err := strconv.ParseInt(whole+frac+strings.Repeat("0", exp-len(frac)), 10, 64)
	if err != nil {
		return 0, &amountError{key: "amount.range", args: []any{s}}
	}
	return n, nil
}

// minAmount is an amount in major units of no currency in particular, the
// queue's minimum: digits × 10^-exp.
type minAmount struct {
	digits *big.Int
	exp    int
}

// parseMin reads s as a minAmount: digits with at most one decimal point.
func parseMin(s string) (minAmount, *amountError) {
	s = strings.TrimSpace(s)
	whole, frac, _ := strings.Cut(s, ".")
	d, ok := new(big.Int).SetString(whole+frac, 10)
	if whole+frac == "" || len(s) > 40 || !digitsOnly(whole) || !digitsOnly(frac) || !ok {
		return minAmount{}, &amountError{key: "amount.invalid", args: []any{s}}
	}
	return minAmount{digits: d, exp: len(frac)}, nil
}

// allows reports whether amount minor units of currency are at least m,
// compared exactly whatever the decimals of either.
func (m minAmount) allows(amount int64, currency string) bool {
	ten := big.NewInt(10)
	a := new(big.Int).Mul(big.NewInt(amount), new(big.Int).Exp(ten, big.NewInt(int64(m.exp)), nil))
	b := new(big.Int).Mul(m.digits, new(big.Int).Exp(ten, big.NewInt(int64(lapse.CurrencyExponent(currency))), nil))
	return a.Cmp(b) >= 0
}

func digitsOnly(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func init() {
	addMessages(map[string]msg{
		"amount.invalid":  {"%q is not an amount: write digits with at most one decimal point, such as 12.50.", "%q 不是金额：请只写数字和至多一个小数点，例如 12.50。"},
		"amount.decimals": {"%s amounts have at most %d decimals.", "%s 金额至多 %d 位小数。"},
		"amount.range":    {"%q is too large an amount.", "金额 %q 过大。"},
	})
}
