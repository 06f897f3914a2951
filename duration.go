package lapse

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var daysPrefix = regexp.MustCompile(`^(\d+)d(.*)$`)

// maxDays is the most days a time.Duration holds.
const maxDays = int64(math.MaxInt64) / int64(24*time.Hour)

// ParseDuration parses a duration as Lapse reads every duration a person
// writes, in the API (ttl, extend_by), in flow files, in retry schedules and
// in --payment-grace: a Go duration (90s, 15m, 1h30m) that may start with a
// number of days (7d, 1d12h), with an optional sign (-10m). A day is 24
// hours. Its errors say what is wrong, without a field: the caller names
// it.
func ParseDuration(s string) (time.Duration, error) {
	rest, neg := strings.CutPrefix(s, "-")
	if !neg {
		rest = strings.TrimPrefix(rest, "+")
	}
	var days time.Duration
	m := daysPrefix.FindStringSubmatch(rest)
	if m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > maxDays {
			return 0, fmt.Errorf("duration %q is out of range", s)
		}
		days, rest = time.Duration(n)*24*time.Hour, m[2]
	}
	var d time.Duration
	if rest != "" || m == nil {
		if rest == "" || rest[0] == '-' || rest[0] == '+' {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
	}
	if d > math.MaxInt64-days {
		return 0, fmt.Errorf("duration %q is out of range", s)
	}
	if neg {
		return -(days + d), nil
	}
	return days + d, nil
}
