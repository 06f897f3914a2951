package lapse

import "math"

// AddInt64 returns a + b, and false when the sum does not fit in an int64.
// Every sum of quantities or amounts that a caller's input can reach goes
// through it: a wrapped sum would reserve, charge or report the wrong number.
func AddInt64(a, b int64) (int64, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}
