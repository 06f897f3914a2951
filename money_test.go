package lapse_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lapsehq/lapse"
)

func TestMoney(t *testing.T) {
	for _, tc := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{5000, "CNY", "50.00 CNY"},
		{1999, "CNY", "19.99 CNY"},
		{5, "EUR", "0.05 EUR"},
		{0, "USD", "0.00 USD"},
		{-5, "CNY", "-0.05 CNY"},
		{500, "JPY", "500 JPY"},
		{1234, "KWD", "1.234 KWD"},
		{7, "kwd", "0.007 kwd"},
		{150, "", "1.50"},
		{math.MaxInt64, "CNY", "92233720368547758.07 CNY"},
		{math.MinInt64, "CNY", "-92233720368547758.08 CNY"},
	} {
		if got := lapse.Money(tc.amount, tc.currency); got != tc.want {
			t.Errorf("Money(%d, %q) = %q, want %q", tc.amount, tc.currency, got, tc.want)
		}
	}
	if lapse.CurrencyExponent("JPY") != 0 || lapse.CurrencyExponent("CNY") != 2 || lapse.CurrencyExponent("BHD") != 3 {
		t.Errorf("exponents JPY %d, CNY %d, BHD %d", lapse.CurrencyExponent("JPY"), lapse.CurrencyExponent("CNY"), lapse.CurrencyExponent("BHD"))
	}
}

// moneyName is the name of a value that holds an amount of money.
var moneyName = regexp.MustCompile(`(?i)(amount|price|captured|refunded)$`)

// TestMoneyTexts: no error or log text of the module shows an amount of
// money with %d, as a bare number of minor units that reads as whole yuan
// ("5000 CNY" for 50.00 CNY): they show it with Money. A text that says
// its numbers are minor units (the reconcile report, a provider's answer
// as it came) may, and so may storetest's test failures.
func TestMoneyTexts(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "bench" || d.Name() == "storetest" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for i, a := range call.Args {
				lit, ok := a.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				format, err := strconv.Unquote(lit.Value)
				if err != nil || !strings.Contains(format, "%") || strings.Contains(format, "minor units") {
					continue
				}
				verbs := formatVerbs(format)
				args := call.Args[i+1:]
				for j, v := range verbs {
					if j >= len(args) || v != 'd' {
						continue
					}
					if name := lastName(args[j]); moneyName.MatchString(name) {
						t.Errorf("%s: %q shows %s with %%d: show money with lapse.Money", fset.Position(lit.Pos()), format, name)
					}
				}
				break
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// formatVerbs returns the verbs of a fmt format, one per argument.
func formatVerbs(format string) []rune {
	var out []rune
	rs := []rune(format)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '%' {
			continue
		}
		i++
		for i < len(rs) && strings.ContainsRune("+-# 0123456789.*", rs[i]) {
			i++
		}
		if i < len(rs) && rs[i] != '%' {
			out = append(out, rs[i])
		}
	}
	return out
}

// lastName returns the name an expression ends in: Amount for p.Amount,
// left for left, Amount for p.Amount-p.Refunded; "" for others.
func lastName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.BinaryExpr:
		return lastName(x.X)
	case *ast.ParenExpr:
		return lastName(x.X)
	}
	return ""
}
