package flowfile

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

var daysPrefix = regexp.MustCompile(`^(\d+)d(.*)$`)

// maxDays is the most days a time.Duration holds.
const maxDays = int64(1<<63-1) / int64(24*time.Hour)

// parseDuration parses a Go duration that may start with a number of days:
// 7d, 1d12h, 48h, 90s.
func parseDuration(s string) (time.Duration, error) {
	var days time.Duration
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > maxDays {
			return 0, fmt.Errorf("duration %q is out of range", s)
		}
		days, s = time.Duration(n)*24*time.Hour, m[2]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 || d > 1<<63-1-days {
		return 0, fmt.Errorf("duration %q is out of range", s)
	}
	return days + d, nil
}
