package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestDemoMoneyOverflow: totals that do not fit in 64 bits are not shown as
// the wrapped sums (a captured total gone negative, or an equation that
// seems to hold), on the live display or in the summary, as lapse
// reconcile does not show them; and a total of the most negative minor
// units reads as one sign and one number.
func TestDemoMoneyOverflow(t *testing.T) {
	st := &demoStats{Money: map[string]moneyLine{
		"CNY": {Captured: math.MinInt64 + 249, Applied: math.MinInt64 + 249, Overflow: true},
		"USD": {Captured: 250, Applied: 250},
	}}
	d := &demo{}
	var sum bytes.Buffer
	d.summary(&sum, st, false)
	for name, out := range map[string]string{"display": strings.Join(st.lines(d), "\n"), "summary": sum.String()} {
		if strings.Contains(out, "-92233720368547") || !strings.Contains(out, "do not fit in 64 bits") || !strings.Contains(out, "2.50") {
			t.Errorf("%s:\n%s\nwant the CNY totals not shown and said not to fit, the USD ones shown", name, out)
		}
	}
	if got := minor(math.MinInt64); got != "-92233720368547758.08" {
		t.Errorf("minor(MinInt64) = %q, want -92233720368547758.08", got)
	}
}
