package payment

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/lapsehq/lapse"
)

// A callback whose signature verifies reports a capture (or a refund) the
// provider made, so only one that cannot be read at all, or that names no
// transaction or order, is refused: the provider would send any other until
// it gave up, and the money would be off the books. A field Lapse cannot
// take as it is makes the notice unreadable (the engine puts it in review),
// and a currency that is not a code is passed on as sent (the engine
// records the payment in review).

// unreadable makes n, a verified notice that names its transaction and
// order, one Lapse cannot read in full: why, with the values as sent, is
// its Review, before what the review said already.
func unreadable(n *lapse.PaymentNotice, format string, args ...any) *lapse.PaymentNotice {
	why := fmt.Sprintf(format, args...)
	if n.Review != "" {
		why += "; " + n.Review
	}
	n.Kind, n.Review = lapse.NoticeUnreadable, why
	return n
}

// minorUnits reads raw, an amount in minor units as a callback sent it:
// a positive integer that fits in an int64, or 0 and false. Amounts are
// read apart from the rest, so that one Lapse cannot take makes a notice
// unreadable rather than the whole callback refused.
func minorUnits(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// sent shows raw, a value as a callback sent it, in a review's reason.
func sent(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "missing"
	}
	return string(raw)
}
