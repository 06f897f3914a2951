package flowfile

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
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

// formatDuration writes d as parseDuration reads it: 15m, 2h30m, 48h, 7d,
// 3d12h. It matches the diagrams of lapse.Flow.Mermaid.
func formatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	var s string
	if d >= 3*day { // people count hours up to 48h, then days
		s, d = strconv.FormatInt(int64(d/day), 10)+"d", d%day
		if d == 0 {
			return s
		}
	}
	rest := d.String() // 2h30m0s, 1h0m0s, 1.5s
	if strings.HasSuffix(rest, "m0s") {
		rest = strings.TrimSuffix(rest, "0s")
	}
	if strings.HasSuffix(rest, "h0m") {
		rest = strings.TrimSuffix(rest, "0m")
	}
	return s + rest
}
